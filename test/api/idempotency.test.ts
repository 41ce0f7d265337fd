// Idempotency-Key on sign and pkcs11_sign: a retried request gets the first answer again (the same signature, the
// same pending request) and nothing is signed or recorded twice; another request under the same key is refused.
import { createHash } from 'node:crypto';
import type { Kysely } from 'kysely';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { parsePolicyDocument } from '../../src/policy/policy-file.js';
import { RulesPolicyEngine } from '../../src/policy/rules-engine.js';
import type { WriteBatch } from '../../src/store/commit/group-commit.js';
import type { Database } from '../../src/store/tables.js';
import { startTestService, type TestService } from '../helpers/service.js';

let svc: TestService;
let signer: string;
let otherSigner: string;
const policy = new RulesPolicyEngine(
  parsePolicyDocument('version: 1\nrules:\n  environments:\n    requireApproval: [production]\n', 'test'),
);

beforeAll(async () => {
  svc = await startTestService({ policy });
  const res = await svc.app.inject({
    method: 'POST',
    url: '/v1/create_tenant',
    headers: { authorization: `Bearer ${svc.operator}` },
    payload: { action: 'create_tenant', tenant_id: 'idem', key_spec: 'ECC_NIST_P256' },
  });
  expect(res.statusCode).toBe(201);
  signer = await svc.apiKey('signer', 'idem');
  otherSigner = await svc.apiKey('signer', 'idem');
});
afterAll(async () => svc?.close());

const hashOf = (m: string) => createHash('sha256').update(m).digest('base64');
async function sign(key: string | undefined, body: Record<string, unknown>, token = signer) {
  const res = await svc.app.inject({
    method: 'POST',
    url: `/v1/${body.action ?? 'sign'}`,
    headers: { authorization: `Bearer ${token}`, ...(key !== undefined && { 'idempotency-key': key }) },
    payload: { action: 'sign', tenant_id: 'idem', algorithm: 'ECDSA_SHA_256', ...body },
  });
  return { status: res.statusCode, body: res.json() as Record<string, unknown>, headers: res.headers };
}
const signed = async () => (await svc.store.signatures.list('idem', 10_000)).length;

describe('Idempotency-Key', () => {
  it('answers a retried sign with the first signature, and records one signature', async () => {
    const before = await signed();
    const first = await sign('build-42-artifact-1', { hash: hashOf('one') });
    expect(first.status).toBe(200);
    const again = await sign('build-42-artifact-1', { hash: hashOf('one') });
    expect(again.status).toBe(200);
    expect(again.body).toEqual(first.body);
    expect(await signed()).toBe(before + 1);
    // Without a key, the same request signs again (ECDSA: another signature).
    const plain = await sign(undefined, { hash: hashOf('one') });
    expect(plain.status).toBe(200);
    expect(plain.body.signature).not.toBe(first.body.signature);
    expect(await signed()).toBe(before + 2);
  });

  it('gives a retried request that waits for approval the same request id, and makes one pending request', async () => {
    const body = { hash: hashOf('release'), environment: 'production' };
    const first = await sign('release-1', body);
    expect(first.status).toBe(202);
    const again = await sign('release-1', body);
    expect(again.status).toBe(202);
    expect(again.body.request_id).toBe(first.body.request_id);
    expect(await svc.store.requests.listPending('idem')).toHaveLength(1);
  });

  it('works for pkcs11_sign too', async () => {
    const body = { action: 'pkcs11_sign', hash: hashOf('p11'), algorithm: undefined };
    const first = await sign('p11-1', body);
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    expect((await sign('p11-1', body)).body).toEqual(first.body);
  });

  it('refuses the same key with another request (422) and changes nothing', async () => {
    await sign('reused', { hash: hashOf('a') });
    const before = await signed();
    const other = await sign('reused', { hash: hashOf('b') });
    expect(other.status).toBe(422);
    expect(other.body.error).toBe('idempotency_key_reused');
    expect(await signed()).toBe(before);
  });

  it('keeps keys per caller: another caller may use the same key for its own request', async () => {
    const mine = await sign('shared-name', { hash: hashOf('x') });
    const theirs = await sign('shared-name', { hash: hashOf('y') }, otherSigner);
    expect([mine.status, theirs.status]).toEqual([200, 200]);
  });

  it('answers two simultaneous requests with one key with one signature (the other waits: 409, Retry-After)', async () => {
    const before = await signed();
    const answers = await Promise.all([1, 2, 3, 4].map(() => sign('race-1', { hash: hashOf('race') })));
    const ok = answers.filter((a) => a.status === 200);
    const busy = answers.filter((a) => a.status === 409);
    expect(ok.length + busy.length).toBe(4);
    expect(new Set(ok.map((a) => a.body.signature)).size).toBe(1);
    for (const b of busy) {
      expect(b.body.error).toBe('idempotency_key_in_use');
      expect(b.headers['retry-after']).toBe('1');
    }
    expect(await signed()).toBe(before + 1);
  });

  it('does not keep errors: a request refused for bad input can be retried with the same key once fixed', async () => {
    const bad = await sign('fix-me', { hash: hashOf('z'), algorithm: 'RSASSA_PSS_SHA_256' });
    expect(bad.status).toBe(400);
    // The same body again is evaluated again (and refused again), not replayed from a store.
    expect((await sign('fix-me', { hash: hashOf('z'), algorithm: 'RSASSA_PSS_SHA_256' })).status).toBe(400);
  });

  it('refuses a malformed key', async () => {
    const res = await sign('has space', { hash: hashOf('q') });
    expect(res.status).toBe(400);
    expect(res.body.reason).toMatch(/Idempotency-Key must be 1 to 255 printable ASCII/);
  });

  it('lets a retry take over a claim left in progress by a process that died (an older release claimed first)', async () => {
    const db = (svc.store as unknown as { db: Kysely<Database> }).db;
    const at = '2026-01-01T00:00:00.000Z';
    await db
      .insertInto('sign_idempotency')
      .values({
        caller_id: 'c',
        idem_key: 'k',
        fingerprint: 'f',
        reply: null,
        created_at: at,
        updated_at: at,
        log_seq: null,
      })
      .execute();
    const lookup = { callerId: 'c', key: 'k', fingerprint: 'f', expiredBefore: '2025-12-31T00:00:00.000Z' };
    expect(await svc.store.idempotency.look({ ...lookup, staleBefore: '2025-12-31T23:58:00.000Z' })).toEqual({
      state: 'in_progress',
    });
    const later = { ...lookup, staleBefore: '2026-01-01T00:01:00.000Z' };
    expect(await svc.store.idempotency.look(later)).toEqual({ state: 'absent' });
    const reply = '{"status":200,"body":{}}';
    const record = { caller_id: 'c', idem_key: 'k', fingerprint: 'f', reply, created_at: '2026-01-01T00:03:00.000Z' };
    await svc.store.idempotency.remember({
      ...record,
      expired_before: lookup.expiredBefore,
      stale_before: later.staleBefore,
    });
    expect(await svc.store.idempotency.look(later)).toEqual({ state: 'done', reply, logSeq: null });
  });

  // Issue 46: the claim's INSERT and the answer's UPDATE are gone; the record rides in the `signed` entry's commit.
  it('writes one transaction per signature with a key: its record in the group commit of its entry', async () => {
    const store = svc.store as unknown as { db: Kysely<Database>; commitWrites: (w: WriteBatch) => Promise<unknown> };
    const commits = vi.spyOn(store, 'commitWrites');
    const statements = vi.spyOn(store.db.getExecutor(), 'executeQuery');
    try {
      const first: Array<{ body: Record<string, unknown>; headers: Record<string, unknown> }> = [];
      for (const n of [1, 2, 3]) {
        const res = await sign(`one-commit-${n}`, {
          action: 'pkcs11_sign',
          hash: hashOf(`one-commit-${n}`),
          algorithm: undefined,
        });
        expect(res.status, JSON.stringify(res.body)).toBe(200);
        first.push(res);
      }
      const writesOfTheirOwn = statements.mock.calls.filter(([query]) => !/^\s*select/i.test(query.sql));
      expect(writesOfTheirOwn.map(([query]) => query.sql)).toEqual([]);
      expect(commits.mock.calls.map(([w]) => w.idempotency.length)).toEqual([1, 1, 1]);
      // And a replay still answers with the first signature and its log index.
      for (const n of [1, 2, 3]) {
        const again = await sign(`one-commit-${n}`, {
          action: 'pkcs11_sign',
          hash: hashOf(`one-commit-${n}`),
          algorithm: undefined,
        });
        expect(again.body).toEqual(first[n - 1]?.body);
        expect(again.headers['signbridge-log-index']).toBe(first[n - 1]?.headers['signbridge-log-index']);
        expect(again.headers['signbridge-log-index']).toBeDefined();
      }
    } finally {
      commits.mockRestore();
      statements.mockRestore();
    }
  });

  it('keeps a sign_batch answer in the commit of its entry and replays it with each log_index', async () => {
    const body = { action: 'sign_batch', hashes: [hashOf('b1'), hashOf('b2')], algorithm: 'ECDSA_SHA_256' };
    const first = await sign('batch-1', body);
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    const again = await sign('batch-1', body);
    expect(again.body).toEqual(first.body);
    expect((first.body.results as Array<{ log_index: number }>)[0]?.log_index).toBeTypeOf('number');
  });
});
