// POST /v1/sign_batch (issue 34; docs/api.md) over HTTP with the real rules engine and SoftHSM, on SQLite and on
// PostgreSQL when the API tests run there: every digest signed, the batch recorded as one audit entry whose items
// are batch_items rows (issue 46; each signature checked with node:crypto against the tenant's public key), the pkcs11_sign form (RSA PSS), one policy
// decision for the batch (a denial writes one entry; a hold is one request for the batch, approved once and
// collected whole), velocity counting every digest, the
// validation refusals (nothing signed), and Idempotency-Key.
import { constants, createHash, verify } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parsePolicyDocument } from '../../src/policy/policy-file.js';
import { RulesPolicyEngine } from '../../src/policy/rules-engine.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

const POLICY = `version: 1
rules:
  projects: { deny: [forbidden] }
  environments:
    requireApproval: [production]
tenants:
  fast:
    velocity: { perTenant: { max: 5, windowSeconds: 3600 } }
`;

let svc: TestService;
const signers = new Map<string, string>();
const pems = new Map<string, string>();

const message = (tag: string, i: number) => Buffer.from(`${tag} artifact ${i}`);
const digestOf = (m: Buffer, hash = 'sha256') => createHash(hash).update(m).digest('base64');

async function batch(tenant: string, body: Record<string, unknown>, headers: Record<string, string> = {}) {
  const res = await svc.app.inject({
    method: 'POST',
    url: '/v1/sign_batch',
    headers: { authorization: `Bearer ${signers.get(tenant)}`, ...headers },
    payload: { action: 'sign_batch', tenant_id: tenant, ...body },
  });
  return { status: res.statusCode, body: res.json() as Record<string, unknown>, headers: res.headers };
}

async function entries(action = 'sign_batch') {
  return (await svc.store.audit.read(0, 100_000)).filter((e) => e.action === action);
}

beforeAll(async () => {
  svc = await startTestService({ policy: new RulesPolicyEngine(parsePolicyDocument(POLICY, 'batch-policy')) });
  for (const [tenant, spec] of [
    ['ec', 'ECC_NIST_P256'],
    ['rsa', 'RSA_2048'],
    ['fast', 'ECC_NIST_P256'],
  ] as const) {
    expect(
      (await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: tenant, key_spec: spec })).status,
    ).toBe(201);
    const signer = await svc.apiKey('signer', tenant);
    signers.set(tenant, signer);
    pems.set(
      tenant,
      (await callAction(svc.app, signer, 'get_public_key', { tenant_id: tenant })).body.public_key_pem as string,
    );
  }
}, 60_000);
afterAll(async () => svc?.close());

describe('POST /v1/sign_batch', () => {
  it('signs every digest in the order given and records the batch as one entry, one leaf, with its items', async () => {
    const messages = Array.from({ length: 20 }, (_, i) => message('ec', i));
    const before = (await entries()).length;
    const res = await batch('ec', { algorithm: 'ECDSA_SHA_256', hashes: messages.map((m) => digestOf(m)) });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.headers['signbridge-log-index']).toBeUndefined();
    const results = res.body.results as Array<{ signature: string; log_index: number; signature_id: string }>;
    expect(results).toHaveLength(20);
    for (const [i, r] of results.entries()) {
      expect(
        verify('sha256', messages[i] as Buffer, pems.get('ec') as string, Buffer.from(r.signature, 'base64')),
      ).toBe(true);
    }
    // One entry for the batch: every item on its log index, each signature id the entry's and the item's index.
    expect(new Set(results.map((r) => r.log_index)).size).toBe(1);
    const logged = (await entries()).slice(before);
    expect(logged).toHaveLength(1);
    const entry = logged[0];
    expect(entry?.seq).toBe((results[0]?.log_index as number) + 1);
    expect(entry?.outcome).toBe('signed');
    const details = entry?.details as { hash?: string; signature_id: string; batch: Record<string, unknown> };
    expect(details.hash).toBeUndefined();
    expect(results.map((r) => r.signature_id)).toEqual(results.map((_, i) => `${details.signature_id}.${i}`));
    expect(details.batch).toMatchObject({ id: res.body.batch_id, size: 20, signed: 20 });
    expect(details.batch.root).toMatch(/^[A-Za-z0-9+/]{43}=$/);
    const items = await svc.store.signatures.batchItems(entry?.seq as number);
    expect(items.map((i) => i.index)).toEqual(results.map((_, i) => i));
    for (const [i, item] of items.entries()) {
      expect(item.digest.toString('base64')).toBe(digestOf(messages[i] as Buffer));
      const signature = Buffer.from((results[i] as { signature: string }).signature, 'base64');
      expect(item.signatureSha256).toEqual(createHash('sha256').update(signature).digest());
    }
  });

  it('takes the pkcs11_sign form: the algorithm from the key spec, the digest length and pss_padding', async () => {
    const messages = [message('rsa', 1), message('rsa', 2)];
    const res = await batch('rsa', {
      key_spec: 'RSA_2048',
      pss_padding: true,
      hashes: messages.map((m) => digestOf(m, 'sha384')),
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.signing_algorithm).toBe('RSASSA_PSS_SHA_384');
    for (const [i, r] of (res.body.results as Array<{ signature: string }>).entries()) {
      const ok = verify(
        'sha384',
        messages[i] as Buffer,
        { key: pems.get('rsa') as string, padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: 48 },
        Buffer.from(r.signature, 'base64'),
      );
      expect(ok).toBe(true);
    }
  });

  it('refuses a bad batch as a whole, naming the item, and signs nothing', async () => {
    const before = (await svc.store.audit.read(0, 100_000)).length;
    const d32 = digestOf(Buffer.from('a'));
    const d48 = digestOf(Buffer.from('a'), 'sha384');
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ hashes: [] }, /hashes/],
      [{ hashes: Array.from({ length: 1001 }, () => d32) }, /hashes/],
      [{ hashes: [d32, d48] }, /hashes\[1\] is for ECDSA_SHA_384 but hashes\[0\] for ECDSA_SHA_256/],
      [{ algorithm: 'ECDSA_SHA_256', hashes: [d32, d48] }, /hashes\[1\]: hash must be a 32-byte digest/],
      [{ hashes: [d32, 'not base64!'] }, /hashes/],
      [{ key_spec: 'RSA_2048', hashes: [d32] }, /key_spec RSA_2048 does not match/],
      [{ hashes: [d32], hash: d32 }, /hash/],
    ];
    for (const [body, reason] of cases) {
      const res = await batch('ec', body);
      expect(res.status, JSON.stringify(body).slice(0, 80)).toBe(400);
      expect(res.body.reason).toMatch(reason);
    }
    expect((await svc.store.audit.read(0, 100_000)).length).toBe(before);
  });

  it('decides once: a denied batch writes one denied entry naming the batch', async () => {
    const hashes = [digestOf(message('deny', 1)), digestOf(message('deny', 2)), digestOf(message('deny', 3))];
    const before = (await entries()).length;
    const denied = await batch('ec', { algorithm: 'ECDSA_SHA_256', hashes, project: 'forbidden' });
    expect(denied.status).toBe(403);
    expect(denied.body.error).toBe('policy_denied');
    const written = (await entries()).slice(before);
    expect(written).toHaveLength(1);
    expect(written[0]?.outcome).toBe('denied');
    const expected = createHash('sha256');
    for (const h of hashes) expected.update(Buffer.from(h, 'base64'));
    expect((written[0]?.details as { batch: unknown }).batch).toMatchObject({
      size: 3,
      digests_sha256: expected.digest('hex'),
    });
  });

  it('holds a batch the policy holds as one request: approved once, every digest signed then, collected whole', async () => {
    const messages = Array.from({ length: 12 }, (_, i) => message('held', i));
    const hashes = messages.map((m) => digestOf(m));
    const held = await batch('ec', { algorithm: 'ECDSA_SHA_256', hashes, environment: 'production' });
    expect(held.status, JSON.stringify(held.body)).toBe(202);
    expect(held.body).toMatchObject({ status: 'pending_approval' });
    expect(held.body.message).toMatch(/one request for all 12 digests/);
    const requestId = held.body.request_id as string;
    // One pending entry for the batch, nothing signed yet.
    const request = await svc.store.requests.get('ec', requestId);
    expect(request?.batch?.hashes).toEqual(hashes);
    const pending = (await entries()).filter((e) => e.details.request_id === requestId);
    expect(pending.map((e) => e.outcome)).toEqual(['pending_approval']);
    // The batch came through the /v1 JSON API with the signer's key: its entry says so (issue 44).
    const via = pending[0]?.details.via;
    expect(via).toEqual({ api: 'signbridge', api_key_id: pending[0]?.actor });

    // The same batch again (a retry) continues the request; collecting before a decision is 202.
    const again = await batch('ec', { algorithm: 'ECDSA_SHA_256', hashes, environment: 'production' });
    expect(again.status).toBe(202);
    expect(again.body.request_id).toBe(requestId);
    const early = await batch('ec', { hashes, request_id: requestId });
    expect(early.status).toBe(202);
    // Collection needs the same digests in the same order; a one-digest collection of it is refused.
    const swapped = [hashes[1], hashes[0], ...hashes.slice(2)];
    expect((await batch('ec', { hashes: swapped, request_id: requestId })).body.error).toBe('hash_mismatch');
    const single = await svc.app.inject({
      method: 'POST',
      url: '/v1/sign',
      headers: { authorization: `Bearer ${signers.get('ec')}` },
      payload: { action: 'sign', tenant_id: 'ec', hash: hashes[0], request_id: requestId },
    });
    expect(single.statusCode).toBe(400);
    expect(single.json().reason).toMatch(/holds a batch of 12 digests: collect it with sign_batch/);

    const approver = await svc.apiKey('approver', 'ec');
    const approved = await callAction(svc.app, approver, 'approve_sign', { tenant_id: 'ec', request_id: requestId });
    expect(approved.status, JSON.stringify(approved.body)).toBe(200);
    expect(approved.body).toMatchObject({ status: 'approved' });
    expect(approved.body.message).toMatch(/12 of 12 digests signed/);
    expect(approved.body.signature).toBeUndefined();

    const collected = await batch('ec', { hashes, request_id: requestId });
    expect(collected.status, JSON.stringify(collected.body)).toBe(200);
    expect(collected.body.batch_id).toBe(requestId);
    const results = collected.body.results as Array<{ signature: string; log_index: number }>;
    expect(results).toHaveLength(12);
    const signedEntries = new Map(
      (await svc.store.audit.read(0, 100_000))
        .filter((e) => e.action === 'approve_sign' && e.outcome === 'signed')
        .map((e) => [e.seq - 1, e]),
    );
    for (const [i, r] of results.entries()) {
      expect(
        verify('sha256', messages[i] as Buffer, pems.get('ec') as string, Buffer.from(r.signature, 'base64')),
      ).toBe(true);
      // The batch's one `signed` entry, naming the request as its batch, holds every signature as an item.
      const entry = signedEntries.get(r.log_index);
      expect(entry?.details).toMatchObject({ batch: { id: requestId, size: 12, signed: 12 } });
      expect(entry?.details.hash).toBeUndefined();
      // Made at the approval, it names the API and credential the batch came through, as the pending entry did.
      expect(entry?.details.via).toEqual(via);
      const items = await svc.store.signatures.batchItems(r.log_index + 1);
      expect(items[i]?.digest.toString('base64')).toBe(hashes[i]);
    }
    expect(new Set(results.map((r) => r.log_index)).size).toBe(1);
    // Collected again: the same answer; the same batch sent anew within the retry window gets it too.
    expect((await batch('ec', { hashes, request_id: requestId })).body).toEqual(collected.body);
    const repeat = await batch('ec', { algorithm: 'ECDSA_SHA_256', hashes, environment: 'production' });
    expect(repeat.status).toBe(200);
    expect(repeat.body.results).toEqual(collected.body.results);
  });

  it('answers a rejected batch request with 403 request_rejected, nothing signed', async () => {
    const hashes = [digestOf(message('rejected', 1)), digestOf(message('rejected', 2))];
    const held = await batch('ec', { algorithm: 'ECDSA_SHA_256', hashes, environment: 'production' });
    expect(held.status).toBe(202);
    const requestId = held.body.request_id as string;
    const approver = await svc.apiKey('approver', 'ec');
    const rejected = await callAction(svc.app, approver, 'approve_sign', {
      tenant_id: 'ec',
      request_id: requestId,
      decision: 'reject',
      reason: 'not this release',
    });
    expect(rejected.status).toBe(200);
    const collected = await batch('ec', { hashes, request_id: requestId });
    expect(collected.status).toBe(403);
    expect(collected.body.error).toBe('request_rejected');
    const signed = (await svc.store.audit.read(0, 100_000)).filter(
      (e) => e.outcome === 'signed' && hashes.includes(e.details.hash as string),
    );
    expect(signed).toEqual([]);
  });

  it('counts every digest against velocity limits; a batch over the limit is refused whole', async () => {
    const hashes = (n: number, tag: string) => Array.from({ length: n }, (_, i) => digestOf(message(tag, i)));
    expect((await batch('fast', { algorithm: 'ECDSA_SHA_256', hashes: hashes(3, 'v1') })).status).toBe(200);
    const over = await batch('fast', { algorithm: 'ECDSA_SHA_256', hashes: hashes(3, 'v2') });
    expect(over.status).toBe(429);
    expect(over.body.reason).toMatch(/at most 5 signing requests per 3600 s for tenant fast/);
    expect(over.headers['retry-after']).toBeDefined();
    const limited = (await entries()).filter((e) => e.tenantId === 'fast' && e.outcome === 'rate_limited');
    expect(limited.length).toBeGreaterThanOrEqual(1);
    // The allowed batch of 3: one `signed` entry holding its 3 signatures.
    const signed = (await entries()).filter((e) => e.tenantId === 'fast' && e.outcome === 'signed');
    expect(signed.map((e) => (e.details.batch as { signed: number }).signed)).toEqual([3]);
  });

  it('answers a repeated Idempotency-Key with the first answer, signing once', async () => {
    const body = { algorithm: 'ECDSA_SHA_256', hashes: [digestOf(message('idem', 1)), digestOf(message('idem', 2))] };
    const first = await batch('ec', body, { 'idempotency-key': 'batch-key-1' });
    const before = (await entries()).length;
    const again = await batch('ec', body, { 'idempotency-key': 'batch-key-1' });
    expect(again.status).toBe(200);
    expect(again.body).toEqual(first.body);
    expect((await entries()).length).toBe(before);
    const other = await batch('ec', { ...body, hashes: [body.hashes[0]] }, { 'idempotency-key': 'batch-key-1' });
    expect(other.status).toBe(422);
  });
});
