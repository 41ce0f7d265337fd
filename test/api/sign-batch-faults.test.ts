// sign_batch against real token faults (issue 34): SoftHSM behind the fault-injecting PKCS#11 shim
// (test/native/fault_shim.c). "1 0x6 C_Sign" makes exactly one C_Sign answer CKR_FUNCTION_FAILED, an error about
// that operation (not a lost token), as an HSM answers a signature it could not make: that digest alone fails,
// in its place, with its sign_failed entry, and the batch's other digests are signed. "-1 0x30 C_SignInit" makes
// every signature fail even after the key store re-opened the token: the approval of a held batch then signs
// nothing, and the request goes back to its stage to be approved again once the token signs.
import { createHash, createPublicKey, verify } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { createApiKey } from '../../src/auth/api-keys.js';
import { Pkcs11KeyStore } from '../../src/keys/pkcs11/pkcs11-key-store.js';
import { embeddedSoftHsmOptions } from '../../src/keys/pkcs11/softhsm.js';
import type { PolicyEngine } from '../../src/policy/policy.js';
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { FAULT_SHIM, useFaultShim } from '../helpers/fault-shim.js';
import { callAction, makeTempDir } from '../helpers/service.js';

const dir = makeTempDir('sb-batch-faults-');
const fault = useFaultShim(dir);

// Tenant "held" needs a person's approval for everything; "now" signs at once.
const policy: PolicyEngine = {
  async evaluate(input) {
    return input.tenantId === 'held'
      ? { outcome: 'pending_approval', rule: 'test', reason: 'a person approves every batch' }
      : { outcome: 'allow', rule: 'test', reason: 'allowed' };
  },
};

const store = openSqliteStore(join(dir, 'signbridge.db'));
let keyStore: Pkcs11KeyStore;
let app: Awaited<ReturnType<typeof buildApp>>;
const signers = new Map<string, string>();
const publicKeys = new Map<string, string>();
let approver: string;

const messages = (tag: string, n: number) => Array.from({ length: n }, (_, i) => Buffer.from(`${tag} artifact ${i}`));
const digestOf = (m: Buffer) => createHash('sha256').update(m).digest('base64');
const verifies = (tenant: string, m: Buffer, signature: string) =>
  verify(
    'sha256',
    m,
    { key: createPublicKey(publicKeys.get(tenant) as string), dsaEncoding: 'der' },
    Buffer.from(signature, 'base64'),
  );

type Result = { signature?: string; log_index?: number; error?: { code: string; message: string; retryable: boolean } };

async function signBatch(tenant: string, body: Record<string, unknown>) {
  return callAction(app, signers.get(tenant), 'sign_batch', { tenant_id: tenant, ...body });
}

async function auditSince(seq: number) {
  return store.audit.read(seq, 10_000);
}

beforeAll(async () => {
  expect(existsSync(FAULT_SHIM), `${FAULT_SHIM} is built by scripts/setup.sh (cmake)`).toBe(true);
  fault('');
  await store.migrate();
  keyStore = Pkcs11KeyStore.open({
    ...embeddedSoftHsmOptions(dir),
    modulePath: FAULT_SHIM,
    sessions: 2,
    signThreads: 2,
  });
  app = await buildApp({ store, keyStore, policy });
  const operator = (await createApiKey(store, 'operator', null, 'op')).token;
  for (const tenant of ['now', 'held']) {
    const created = await callAction(app, operator, 'create_tenant', { tenant_id: tenant, key_spec: 'ECC_NIST_P256' });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const signer = (await createApiKey(store, 'signer', tenant, 'ci')).token;
    signers.set(tenant, signer);
    publicKeys.set(
      tenant,
      (await callAction(app, signer, 'get_public_key', { tenant_id: tenant })).body.public_key_pem as string,
    );
  }
  approver = (await createApiKey(store, 'approver', 'held', 'release manager')).token;
}, 60_000);
afterAll(async () => {
  fault('');
  await app?.close();
  await keyStore?.close();
  await store.close();
});

describe('sign_batch with a real token fault', () => {
  it('one digest the token fails (CKR_FUNCTION_FAILED) fails alone, in its place, with its sign_failed entry', async () => {
    const batch = messages('now', 10);
    const hashes = batch.map(digestOf);
    const before = (await store.stats()).auditEntries;
    fault('1 0x6 C_Sign');
    const res = await signBatch('now', { algorithm: 'ECDSA_SHA_256', hashes });
    fault('');
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const results = res.body.results as Result[];
    expect(results).toHaveLength(10);
    const failed = results.flatMap((r, i) => (r.error ? [i] : []));
    expect(failed).toHaveLength(1);
    const at = failed[0] as number;
    expect(results[at]?.error).toMatchObject({ code: 'internal_error', retryable: true });
    for (const [i, r] of results.entries()) {
      if (i !== at) expect(verifies('now', batch[i] as Buffer, r.signature as string), `hashes[${i}]`).toBe(true);
    }
    // One `signed` entry holding the nine signatures as its items, and one `sign_failed` naming the failed digest
    // and the token's answer; nothing else.
    const entries = await auditSince(before);
    expect(entries.map((e) => `${e.action}/${e.outcome}`).sort()).toEqual(
      ['sign_batch/signed', 'sign_batch/sign_failed'].sort(),
    );
    const signed = entries.find((e) => e.outcome === 'signed');
    expect(signed?.details.batch).toMatchObject({ size: 10, signed: 9 });
    const items = await store.signatures.batchItems(signed?.seq as number);
    expect(items.map((i) => i.digest.toString('base64'))).toEqual(hashes.filter((_, i) => i !== at));
    expect(items.map((i) => i.index)).toEqual(hashes.flatMap((_, i) => (i !== at ? [i] : [])));
    const signFailed = entries.find((e) => e.outcome === 'sign_failed');
    expect(signFailed?.details).toMatchObject({ hash: hashes[at] });
    expect(String(signFailed?.details.error)).toMatch(/CKR_FUNCTION_FAILED/);
    // The token was not taken for lost, and the failed digest signs when sent again.
    expect((await app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
    const again = await signBatch('now', { algorithm: 'ECDSA_SHA_256', hashes: [hashes[at]] });
    expect(again.status).toBe(200);
    expect(verifies('now', batch[at] as Buffer, (again.body.results as Result[])[0]?.signature as string)).toBe(true);
  });

  it('a token fault under every signature of a batch (the token re-opened, still failing): each digest fails retryable, the batch signs once the token does', async () => {
    const batch = messages('now-device', 12);
    const hashes = batch.map(digestOf);
    const before = (await store.stats()).auditEntries;
    const seen = keyStore.faults.seen;
    fault('-1 0x30 C_SignInit');
    const res = await signBatch('now', { algorithm: 'ECDSA_SHA_256', hashes });
    fault('');
    // As 12 `sign` requests would each end: the fault re-opens the token, the retry fails too, key_store_unavailable.
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const results = res.body.results as Result[];
    expect(results).toHaveLength(12);
    for (const r of results) expect(r.error).toMatchObject({ code: 'key_store_unavailable', retryable: true });
    expect(keyStore.faults.seen).toBeGreaterThan(seen);
    const entries = await auditSince(before);
    expect(entries.filter((e) => e.outcome === 'signed')).toEqual([]);
    const again = await signBatch('now', { algorithm: 'ECDSA_SHA_256', hashes });
    expect(again.status).toBe(200);
    for (const [i, r] of (again.body.results as Result[]).entries()) {
      expect(verifies('now', batch[i] as Buffer, r.signature as string), `hashes[${i}]`).toBe(true);
    }
  });

  it('the approval of a held batch signs every digest but the one the token fails, which keeps its error', async () => {
    const batch = messages('held-one', 8);
    const hashes = batch.map(digestOf);
    const held = await signBatch('held', { algorithm: 'ECDSA_SHA_256', hashes });
    expect(held.status, JSON.stringify(held.body)).toBe(202);
    const requestId = held.body.request_id as string;
    fault('1 0x6 C_Sign');
    const approved = await callAction(app, approver, 'approve_sign', { tenant_id: 'held', request_id: requestId });
    fault('');
    expect(approved.status, JSON.stringify(approved.body)).toBe(200);
    expect(approved.body.message).toMatch(/7 of 8 digests signed \(1 failed at the key store: sign them again\)/);
    const collected = await signBatch('held', { hashes, request_id: requestId });
    expect(collected.status, JSON.stringify(collected.body)).toBe(200);
    const results = collected.body.results as Result[];
    const failed = results.flatMap((r, i) => (r.error ? [i] : []));
    expect(failed).toHaveLength(1);
    expect(results[failed[0] as number]?.error).toMatchObject({ code: 'internal_error', retryable: true });
    for (const [i, r] of results.entries()) {
      if (!r.error) expect(verifies('held', batch[i] as Buffer, r.signature as string), `hashes[${i}]`).toBe(true);
    }
  });

  it('the approval of a held batch whose every digest fails signs nothing and puts the request back; approved again once the token signs', async () => {
    const batch = messages('held-all', 6);
    const hashes = batch.map(digestOf);
    const held = await signBatch('held', { algorithm: 'ECDSA_SHA_256', hashes });
    expect(held.status, JSON.stringify(held.body)).toBe(202);
    const requestId = held.body.request_id as string;
    const before = (await store.stats()).auditEntries;
    // Every C_SignInit fails, also after the key store opened the token again.
    fault('-1 0x30 C_SignInit');
    const refused = await callAction(app, approver, 'approve_sign', { tenant_id: 'held', request_id: requestId });
    fault('');
    expect(refused.status, JSON.stringify(refused.body)).toBe(503);
    expect(refused.body).toMatchObject({ error: 'key_store_unavailable' });
    expect(String(refused.body.reason)).toMatch(/CKR_DEVICE_ERROR/);
    expect(refused.headers['retry-after']).toBe('5');
    // Back to its stage, no decision kept, nothing signed; the requester still waits.
    const request = await store.requests.get('held', requestId);
    expect(request?.status).toBe('pending_approval');
    expect(request?.decisions ?? []).toEqual([]);
    expect((await auditSince(before)).filter((e) => e.outcome === 'signed')).toEqual([]);
    expect((await signBatch('held', { hashes, request_id: requestId })).status).toBe(202);

    // The token signs again: the same approver approves again and every digest is signed.
    const approved = await callAction(app, approver, 'approve_sign', { tenant_id: 'held', request_id: requestId });
    expect(approved.status, JSON.stringify(approved.body)).toBe(200);
    expect(approved.body.message).toMatch(/6 of 6 digests signed/);
    const collected = await signBatch('held', { hashes, request_id: requestId });
    expect(collected.status).toBe(200);
    const results = collected.body.results as Result[];
    expect(results).toHaveLength(6);
    for (const [i, r] of results.entries()) {
      expect(verifies('held', batch[i] as Buffer, r.signature as string), `hashes[${i}]`).toBe(true);
    }
  });
});
