// Issue 25, the signing path's part of the transparency log: every answer that hands out a signature carries
// Signbridge-Log-Index, the index (seq - 1) of the `signed` audit entry recording that very signature, and a
// verifier finds the entry again by the signature's SHA-256 or by the digest (src/transparency/entry-lookup.ts).
// Run on each way the store commits: SQLite on the event loop (record after the signature), SQLite with its writer
// thread (record written ahead, lookup row in a later commit) and PostgreSQL (migration 0019's group commit).
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { createApiKey } from '../../src/auth/api-keys.js';
import { ApiError } from '../../src/errors.js';
import { KeyStores } from '../../src/keys/key-store.js';
import { Pkcs11KeyStore } from '../../src/keys/pkcs11/pkcs11-key-store.js';
import { embeddedSoftHsmOptions } from '../../src/keys/pkcs11/softhsm.js';
import { SoftwareKeyStore } from '../../src/keys/software/software-key-store.js';
import { parsePolicyDocument } from '../../src/policy/policy-file.js';
import { RulesPolicyEngine } from '../../src/policy/rules-engine.js';
import type { KyselyStore } from '../../src/store/kysely-store.js';
import { openPostgresStore } from '../../src/store/postgres/postgres-store.js';
import type { Role } from '../../src/store/records/roles.js';
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { AuditEntry } from '../../src/store/store.js';
import { type LogEntryQuery, resolveLogEntry } from '../../src/transparency/entry-lookup.js';
import { createTestDatabase, testPostgresUrl } from '../helpers/postgres.js';
import { callAction, makeTempDir } from '../helpers/service.js';

/** The index of the entry a lookup finds (its batch item, if any, is the batch tests'). */
async function resolveLogIndex(store: Parameters<typeof resolveLogEntry>[0], tenant: string, query: LogEntryQuery) {
  return (await resolveLogEntry(store, tenant, query))?.index;
}

const policy = () =>
  new RulesPolicyEngine(
    parsePolicyDocument('version: 1\nrules:\n  environments:\n    requireApproval: [production]\n', 'test'),
  );
const hashOf = (m: string) => createHash('sha256').update(m).digest('base64');
const sha256 = (b: Buffer) => createHash('sha256').update(b).digest();

type Variant = 'sqlite' | 'sqlite-writer-thread' | 'postgres';
const variants: Variant[] = ['sqlite', 'sqlite-writer-thread', ...(testPostgresUrl() ? (['postgres'] as const) : [])];

/**
 * Polls `read` until it answers `expected` (a lookup row of a record written ahead rides along with a later commit:
 * until then the lookup answers nothing, or an earlier entry of the same signature bytes).
 */
async function eventually<T>(read: () => Promise<T | undefined>, expected: T, ms = 3000): Promise<T | undefined> {
  const until = Date.now() + ms;
  for (;;) {
    const value = await read();
    if (value === expected || Date.now() > until) return value;
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe.each(variants)('Signbridge-Log-Index and entry lookups (%s)', (variant) => {
  let store: KyselyStore;
  let keyStores: KeyStores;
  let app: Awaited<ReturnType<typeof buildApp>>;
  let signer: string;
  let approver: string;
  let otherSigner: string;
  let database: string | undefined;
  const apiKey = async (role: Role, tenantId: string | null) =>
    (await createApiKey(store, role, tenantId, `test ${role}`)).token;

  beforeAll(async () => {
    const dataDir = makeTempDir();
    database = variant === 'postgres' ? createTestDatabase('logindex') : undefined;
    store =
      database !== undefined
        ? openPostgresStore(database)
        : openSqliteStore(join(dataDir, 'signbridge.db'), {
            ...(variant === 'sqlite-writer-thread' && { writerThread: { spinMs: 0 } }),
          });
    await store.migrate();
    expect(store.signatures.writesOnThread).toBe(variant === 'sqlite-writer-thread');
    const keyStore = Pkcs11KeyStore.open(embeddedSoftHsmOptions(dataDir));
    keyStores = new KeyStores([keyStore, new SoftwareKeyStore(keyStore, keyStore.description)]);
    app = await buildApp({ store, keyStore: keyStores, policy: policy() });
    await app.ready();
    const operator = await apiKey('operator', null);
    for (const [tenant, spec] of [
      ['li-ec', 'ECC_NIST_P256'],
      ['li-rsa', 'RSA_2048'],
      ['li-other', 'ECC_NIST_P256'],
    ]) {
      const made = await callAction(app, operator, 'create_tenant', { tenant_id: tenant, key_spec: spec });
      expect(made.status).toBe(201);
    }
    signer = await apiKey('signer', 'li-ec');
    approver = await apiKey('approver', 'li-ec');
    otherSigner = await apiKey('signer', 'li-other');
  });
  afterAll(async () => {
    await app?.close();
    await keyStores?.close();
    await store?.close();
  });

  /** The audit entry at `index` (seq index + 1). */
  async function entryAt(index: number): Promise<AuditEntry> {
    const [entry] = await store.audit.read(index, 1);
    expect(entry?.seq).toBe(index + 1);
    return entry as AuditEntry;
  }

  /** Checks that the header names the `signed` entry of this very signature, and returns the index. */
  async function checkIndex(
    res: Awaited<ReturnType<typeof callAction>>,
    tenant: string,
    hash: string,
    action: string,
  ): Promise<number> {
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const header = res.headers['signbridge-log-index'];
    expect(header, 'Signbridge-Log-Index').toMatch(/^\d+$/);
    const index = Number(header);
    const entry = await entryAt(index);
    expect(entry).toMatchObject({ tenantId: tenant, action, outcome: 'signed' });
    expect(entry.details.hash).toBe(Buffer.from(hash, 'base64').toString('base64'));
    // The signature record the entry names is this signature's (same digest and key).
    const records = await store.signatures.list(tenant, 1000);
    const record = records.find((r) => r.id === entry.details.signature_id);
    expect(record, `signature record ${entry.details.signature_id}`).toMatchObject({
      hash: entry.details.hash,
      keyId: res.body.key_id,
    });
    // ... and the lookup by the signature's bytes finds this entry.
    const signature = Buffer.from(res.body.signature as string, 'base64');
    expect(await eventually(() => store.audit.seqOfSignature(tenant, sha256(signature)), index + 1)).toBe(index + 1);
    return index;
  }

  it('sign and pkcs11_sign answer with the index of their signed entry', async () => {
    const hash = hashOf('one');
    const res = await callAction(app, signer, 'sign', { tenant_id: 'li-ec', algorithm: 'ECDSA_SHA_256', hash });
    const first = await checkIndex(res, 'li-ec', hash, 'sign');
    const p11 = await callAction(app, signer, 'pkcs11_sign', { tenant_id: 'li-ec', hash: hashOf('two') });
    expect(await checkIndex(p11, 'li-ec', hashOf('two'), 'pkcs11_sign')).toBeGreaterThan(first);
  });

  it('concurrent signatures each point at their own entry', async () => {
    const hashes = Array.from({ length: 40 }, (_, i) => hashOf(`concurrent ${i}`));
    const answers = await Promise.all(
      hashes.map((hash, i) =>
        callAction(app, signer, i % 2 ? 'pkcs11_sign' : 'sign', {
          tenant_id: 'li-ec',
          hash,
          ...(i % 2 ? {} : { algorithm: 'ECDSA_SHA_256' }),
        }),
      ),
    );
    const indexes = await Promise.all(
      answers.map((res, i) => checkIndex(res, 'li-ec', hashes[i] as string, i % 2 ? 'pkcs11_sign' : 'sign')),
    );
    expect(new Set(indexes).size).toBe(hashes.length);
  });

  it.skipIf(variant !== 'postgres')(
    'two instances on one database: each signature points at its own entry',
    async () => {
      // A second instance: its own pool and group commits, the same database and token.
      const second = openPostgresStore(database as string);
      await second.migrate();
      const app2 = await buildApp({ store: second, keyStore: keyStores, policy: policy() });
      await app2.ready();
      try {
        const hashes = Array.from({ length: 40 }, (_, i) => hashOf(`two instances ${i}`));
        const answers = await Promise.all(
          hashes.map((hash, i) =>
            callAction(i % 2 ? app2 : app, signer, 'sign', { tenant_id: 'li-ec', algorithm: 'ECDSA_SHA_256', hash }),
          ),
        );
        const indexes = await Promise.all(
          answers.map((res, i) => checkIndex(res, 'li-ec', hashes[i] as string, 'sign')),
        );
        expect(new Set(indexes).size).toBe(hashes.length);
      } finally {
        await app2.close();
        await second.close();
      }
    },
  );

  it('an idempotent replay carries the same index', async () => {
    const body = { action: 'sign', tenant_id: 'li-ec', algorithm: 'ECDSA_SHA_256', hash: hashOf('idem') };
    const send = () =>
      app.inject({
        method: 'POST',
        url: '/v1/sign',
        headers: { authorization: `Bearer ${signer}`, 'idempotency-key': `idem-${variant}` },
        payload: body,
      });
    const first = await send();
    const again = await send();
    expect(first.statusCode).toBe(200);
    expect(again.json().signature).toBe(first.json().signature);
    expect(first.headers['signbridge-log-index']).toMatch(/^\d+$/);
    expect(again.headers['signbridge-log-index']).toBe(first.headers['signbridge-log-index']);
  });

  it('approve_sign and the collecting sign carry the index of the approval signature', async () => {
    const hash = hashOf('release');
    const held = await callAction(app, signer, 'sign', {
      tenant_id: 'li-ec',
      algorithm: 'ECDSA_SHA_256',
      hash,
      environment: 'production',
    });
    expect(held.status).toBe(202);
    expect(held.headers['signbridge-log-index']).toBeUndefined();
    const requestId = held.body.request_id as string;
    const approved = await callAction(app, approver, 'approve_sign', { tenant_id: 'li-ec', request_id: requestId });
    const index = await checkIndex(approved, 'li-ec', hash, 'approve_sign');
    expect((await entryAt(index)).details.request_id).toBe(requestId);
    const collected = await callAction(app, signer, 'sign', {
      tenant_id: 'li-ec',
      algorithm: 'ECDSA_SHA_256',
      hash,
      request_id: requestId,
    });
    expect(collected.body.signature).toBe(approved.body.signature);
    expect(collected.headers['signbridge-log-index']).toBe(String(index));
    // A retry of the approved request (no request_id) gets the same signature and index.
    const retried = await callAction(app, signer, 'sign', {
      tenant_id: 'li-ec',
      algorithm: 'ECDSA_SHA_256',
      hash,
      environment: 'production',
    });
    expect(retried.body.signature).toBe(approved.body.signature);
    expect(retried.headers['signbridge-log-index']).toBe(String(index));
  });

  it('finds entries by signature and by digest, the latest for a digest signed twice', async () => {
    const rsaSigner = await apiKey('signer', 'li-rsa');
    const hash = hashOf('twice');
    const a = await callAction(app, rsaSigner, 'sign', { tenant_id: 'li-rsa', hash });
    const b = await callAction(app, rsaSigner, 'sign', { tenant_id: 'li-rsa', hash });
    // RSA PKCS#1 v1.5 is deterministic: the same bytes twice, each with an entry of its own.
    expect(b.body.signature).toBe(a.body.signature);
    const first = Number(a.headers['signbridge-log-index']);
    const second = Number(b.headers['signbridge-log-index']);
    expect(second).toBeGreaterThan(first);
    const hex = sha256(Buffer.from(b.body.signature as string, 'base64')).toString('hex');
    expect(await eventually(() => resolveLogIndex(store, 'li-rsa', { signature_sha256: hex }), second)).toBe(second);
    expect(await resolveLogIndex(store, 'li-rsa', { signature_sha256: hex.toUpperCase() })).toBe(second);
    expect(await resolveLogIndex(store, 'li-rsa', { digest: hash })).toBe(second);
    // URL-safe, unpadded: the same digest.
    const urlSafe = hash.replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
    expect(await resolveLogIndex(store, 'li-rsa', { digest: urlSafe })).toBe(second);
    expect(await resolveLogIndex(store, 'li-rsa', { index: first })).toBe(first);
    expect(await resolveLogIndex(store, 'li-rsa', { digest: hashOf('never signed') })).toBeUndefined();
    expect(
      await resolveLogIndex(store, 'li-rsa', { signature_sha256: sha256(Buffer.from('nothing')).toString('hex') }),
    ).toBeUndefined();
  });

  it("does not find another tenant's signatures under the caller's tenant", async () => {
    const hash = hashOf('other tenant');
    const res = await callAction(app, otherSigner, 'sign', { tenant_id: 'li-other', algorithm: 'ECDSA_SHA_256', hash });
    const index = await checkIndex(res, 'li-other', hash, 'sign');
    const hex = sha256(Buffer.from(res.body.signature as string, 'base64')).toString('hex');
    expect(await resolveLogIndex(store, 'li-other', { signature_sha256: hex })).toBe(index);
    expect(await resolveLogIndex(store, 'li-other', { digest: hash })).toBe(index);
    expect(await resolveLogIndex(store, 'li-ec', { signature_sha256: hex })).toBeUndefined();
    expect(await resolveLogIndex(store, 'li-ec', { digest: hash })).toBeUndefined();
  });

  it('the lookup by digest leaves out a signature withdrawn after a key store failure', async () => {
    const digest = hashOf('withdrawn');
    const at = new Date().toISOString();
    const entry = (outcome: 'signed' | 'sign_failed', details: Record<string, unknown>) => ({
      at,
      tenantId: 'li-ec',
      actor: 'test',
      action: 'sign' as const,
      outcome,
      details,
    });
    const record = {
      id: `withdrawn-${variant}`,
      tenantId: 'li-ec',
      keyId: 'k',
      algorithm: 'ECDSA_SHA_256' as const,
      hash: digest,
      caller: 'test',
      createdAt: at,
    };
    const seq = await store.signatures.record(record, entry('signed', { hash: digest, signature_id: record.id }));
    expect(typeof seq).toBe('number');
    expect(await store.audit.seqOfDigest('li-ec', digest)).toBe(seq);
    await store.signatures.withdraw(record.id, entry('sign_failed', { hash: digest, signature_id: record.id }));
    expect(await store.audit.seqOfDigest('li-ec', digest)).toBeUndefined();
  });

  it('rejects malformed queries with 400 invalid_request', async () => {
    const bad = [
      {},
      { index: 1, digest: hashOf('x') },
      { index: -1 },
      { index: 1.5 },
      { signature_sha256: 'ab'.repeat(31) },
      { signature_sha256: `${'ab'.repeat(31)}zz` },
      { digest: 'not base64!' },
      { digest: Buffer.alloc(20).toString('base64') },
      { digest: '' },
    ];
    for (const query of bad) {
      const err = await resolveLogIndex(store, 'li-ec', query).catch((e: unknown) => e);
      expect(err, JSON.stringify(query)).toBeInstanceOf(ApiError);
      expect(err).toMatchObject({ code: 'invalid_request', statusCode: 400 });
    }
  });
});
