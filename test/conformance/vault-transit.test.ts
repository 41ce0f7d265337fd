// The Vault transit door's conformance: one `describe` a client, on one service on /v1/transit/. hvac (Debian's
// python3-hvac, its defaults: LIST for list_keys); HashiCorp's Go client (github.com/hashicorp/vault/api) and the
// `vault` CLI's `vault write` (which writes through it), their requests rebuilt byte for byte from its source;
// sigstore's hashivault:// signer (cosign's, not in Debian's package: its requests rebuilt from its source too); and
// jsign's HASHICORPVAULT requests (Authorization: Bearer). Every signature is checked by node:crypto (sm-crypto for
// SM2); every refusal has Vault's shape and status and signs nothing. On SQLite, and on PostgreSQL with
// SIGNBRIDGE_TEST_STORE=postgres. Transit writes that are no client's (curl, strictness) are
// test/kms-api/vault-write-requests.test.ts's.
import { createHash, createPublicKey, constants as cryptoConstants, verify } from 'node:crypto';
import smCrypto from 'sm-crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sm2PublicPoint } from '../../src/crypto/file-representative.js';
import { ApiError } from '../../src/errors.js';
import type { PolicyEngine, PolicyInput } from '../../src/policy/policy.js';
import { type HvacMethod, hvacMissing, runHvac } from '../helpers/hvac.js';
import { rawExchange } from '../helpers/raw-http.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

const missing = hvacMissing();
const PUBLIC_URL = 'https://signbridge.example.test';

/** Tenant v-deny is denied (naming a vulnerability), v-held waits for approval, the others are allowed. */
const policy: PolicyEngine = {
  async evaluate(input: PolicyInput) {
    if (input.tenantId === 'v-deny') {
      return {
        outcome: 'deny',
        rule: 'vuln-block',
        reason: 'the artifact has a critical vulnerability',
        vulnId: 'CVE-2026-4242',
        fixVersion: '2.0.1',
      };
    }
    if (input.tenantId === 'v-held')
      return { outcome: 'pending_approval', rule: 'two-person', reason: 'needs a second person' };
    return { outcome: 'allow', rule: 'default', reason: 'allowed' };
  },
};

let svc: TestService;
let url: string;
let admin: string;
const signers: Record<string, string> = {};
const pems: Record<string, string> = {};
const TENANTS = {
  'v-rsa': 'RSA_2048',
  'v-ec': 'ECC_NIST_P256',
  'v-ml': 'ML_DSA_65',
  'v-sm2': 'SM2',
  'v-deny': 'ECC_NIST_P256',
  'v-held': 'ECC_NIST_P256',
  // Vault's Go client's and cosign's (never rotated, unlike v-rsa).
  'g-ec': 'ECC_NIST_P256',
  'g-rsa': 'RSA_2048',
} as const;

beforeAll(async () => {
  svc = await startTestService({
    policy,
    publicUrl: PUBLIC_URL,
    kmsApi: { enabled: true, heldWaitMs: 1500, vaultMount: 'transit' },
  });
  url = await svc.app.listen({ host: '127.0.0.1', port: 0 });
  admin = await svc.apiKey('admin', null);
  for (const [tenant, spec] of Object.entries(TENANTS)) {
    const made = await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: tenant, key_spec: spec });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    signers[tenant] = await svc.apiKey('signer', tenant);
    pems[tenant] = (await callAction(svc.app, admin, 'get_public_key', { tenant_id: tenant })).body
      .public_key_pem as string;
  }
}, 120_000);
afterAll(async () => svc?.close());

const b64 = (data: Buffer | string) => Buffer.from(data).toString('base64');
const sha = (alg: string, data: string) => createHash(alg).update(data).digest();
/** The bytes of a `vault:v<N>:<base64>` signature (base64url too: Buffer reads both). */
const sigBytes = (text: string) => Buffer.from(text.split(':')[2] as string, 'base64');

async function one(token: string | null, method: HvacMethod, kwargs = {}) {
  const [result] = await runHvac(url, token, [{ method, kwargs }]);
  if (!result) throw new Error('hvac printed nothing');
  return result;
}

/** Signed audit entries of a tenant: a refusal must add none. */
async function signedCount(tenant: string): Promise<number> {
  const entries = await svc.store.audit.read(0, 1_000_000);
  return entries.filter((e) => e.tenantId === tenant && e.outcome === 'signed').length;
}

describe.skipIf(missing)('Vault transit with hvac', () => {
  it('reads a key as Vault describes it: type, versions with PEM public keys, what it supports', async () => {
    const rsa = await one(signers['v-rsa'] as string, 'read_key', { name: 'v-rsa' });
    expect(rsa.error).toBeUndefined();
    const data = rsa.ok.data;
    expect(data).toMatchObject({
      name: 'v-rsa',
      type: 'rsa-2048',
      latest_version: 1,
      min_available_version: 1,
      supports_signing: true,
      supports_encryption: false,
      exportable: false,
      deletion_allowed: false,
      derived: false,
    });
    expect(data.keys['1'].public_key).toBe(pems['v-rsa']);
    expect(data.keys['1'].name).toBe('rsa-2048');
    expect(Date.parse(data.keys['1'].creation_time)).not.toBeNaN();
    const ec = await one(signers['v-ec'] as string, 'read_key', { name: 'v-ec' });
    expect(ec.ok.data.type).toBe('ecdsa-p256');
    expect(ec.ok.data.keys['1'].name).toBe('P-256');
    const ml = await one(signers['v-ml'] as string, 'read_key', { name: 'v-ml' });
    expect(ml.ok.data.type).toBe('mldsa-65');
  });

  it("lists keys with hvac's LIST: a tenant key sees its tenant, a key bound to none sees every tenant", async () => {
    const own = await one(signers['v-ec'] as string, 'list_keys');
    expect(own.error).toBeUndefined();
    expect(own.ok.data.keys).toEqual(['v-ec']);
    // In one hvac session: the connection the LIST closes does not stop the calls after it.
    const session = await runHvac(url, admin, [
      { method: 'list_keys' },
      { method: 'read_key', kwargs: { name: 'v-ec' } },
      { method: 'list_keys' },
    ]);
    expect(session[0]?.ok.data.keys).toEqual(Object.keys(TENANTS).sort());
    expect(session[1]?.ok.data.type).toBe('ecdsa-p256');
    expect(session[2]?.ok.data.keys).toEqual(Object.keys(TENANTS).sort());
  });

  it('signs with RSA PKCS#1 v1.5 and PSS, the data or its digest, each checked by node:crypto', async () => {
    const message = 'release 1.4.2 of the tool';
    const results = await runHvac(url, signers['v-rsa'] as string, [
      { method: 'sign_data', kwargs: { name: 'v-rsa', hash_input: b64(message), signature_algorithm: 'pkcs1v15' } },
      { method: 'sign_data', kwargs: { name: 'v-rsa', hash_input: b64(message), hash_algorithm: 'sha2-384' } },
      {
        method: 'sign_data',
        kwargs: {
          name: 'v-rsa',
          hash_input: b64(sha('sha512', message)),
          prehashed: true,
          hash_algorithm: 'sha2-512',
          signature_algorithm: 'pkcs1v15',
        },
      },
    ]);
    const [pkcs1, pss, prehashed] = results.map((r) => {
      expect(r.error).toBeUndefined();
      expect(r.ok.data.key_version).toBe(1);
      expect(r.ok.data.signature).toMatch(/^vault:v1:[A-Za-z0-9+/]+=*$/);
      return sigBytes(r.ok.data.signature);
    });
    const key = createPublicKey(pems['v-rsa'] as string);
    expect(verify('sha256', Buffer.from(message), key, pkcs1 as Buffer)).toBe(true);
    // Vault's default salt_length, auto: the longest salt the key holds (256 - 48 - 2 bytes with SHA-384).
    const pssKey = { key, padding: cryptoConstants.RSA_PKCS1_PSS_PADDING, saltLength: 206 };
    expect(verify('sha384', Buffer.from(message), pssKey, pss as Buffer)).toBe(true);
    expect(verify('sha512', Buffer.from(message), key, prehashed as Buffer)).toBe(true);
    expect(verify('sha256', Buffer.from(`${message}!`), key, pkcs1 as Buffer)).toBe(false);
  });

  it('signs with P-256 in asn1 (DER) and jws (r||s, base64url), prehashed or not', async () => {
    const message = 'container image digest';
    const results = await runHvac(url, signers['v-ec'] as string, [
      { method: 'sign_data', kwargs: { name: 'v-ec', hash_input: b64(message) } },
      {
        method: 'sign_data',
        kwargs: { name: 'v-ec', hash_input: b64(sha('sha256', message)), prehashed: true, marshaling_algorithm: 'jws' },
      },
    ]);
    const [asn1, jws] = results.map((r) => r.ok.data.signature as string);
    const key = createPublicKey(pems['v-ec'] as string);
    expect(verify('sha256', Buffer.from(message), key, sigBytes(asn1 as string))).toBe(true);
    // And transit's own verify takes both back (jws needs the marshaling named, as in Vault).
    const checks = await runHvac(url, signers['v-ec'] as string, [
      { method: 'verify_signed_data', kwargs: { name: 'v-ec', hash_input: b64(message), signature: asn1 } },
      {
        method: 'verify_signed_data',
        kwargs: { name: 'v-ec', hash_input: b64(message), signature: jws, marshaling_algorithm: 'jws' },
      },
      {
        method: 'verify_signed_data',
        kwargs: { name: 'v-ec', hash_input: b64(sha('sha256', 'other')), signature: asn1, prehashed: true },
      },
    ]);
    expect(checks.map((c) => c.ok?.data.valid)).toEqual([true, true, false]);
    expect(jws).toMatch(/^vault:v1:[A-Za-z0-9_-]{86}$/);
    const raw = Buffer.from((jws as string).split(':')[2] as string, 'base64url');
    expect(raw.length).toBe(64);
    expect(verify('sha256', Buffer.from(message), { key, dsaEncoding: 'ieee-p1363' }, raw)).toBe(true);
  });

  it('signs the message with ML-DSA (mu made by the service from the public key), checked by node:crypto', async () => {
    const message = 'post-quantum release';
    const signed = await one(signers['v-ml'] as string, 'sign_data', { name: 'v-ml', hash_input: b64(message) });
    expect(signed.error).toBeUndefined();
    const key = createPublicKey(pems['v-ml'] as string);
    expect(verify(null, Buffer.from(message), key, sigBytes(signed.ok.data.signature))).toBe(true);
    const checked = await runHvac(url, signers['v-ml'] as string, [
      {
        method: 'verify_signed_data',
        kwargs: { name: 'v-ml', hash_input: b64(message), signature: signed.ok.data.signature },
      },
      {
        method: 'verify_signed_data',
        kwargs: { name: 'v-ml', hash_input: b64('other'), signature: signed.ok.data.signature },
      },
    ]);
    expect(checked.map((c) => c.ok?.data.valid)).toEqual([true, false]);
  });

  it('signs the message with SM2 (e = SM3(Z_A || M) made by the service), checked by sm-crypto; jws is r||s', async () => {
    const message = 'guomi release';
    const results = await runHvac(url, signers['v-sm2'] as string, [
      { method: 'sign_data', kwargs: { name: 'v-sm2', hash_input: b64(message) } },
      { method: 'sign_data', kwargs: { name: 'v-sm2', hash_input: b64(message), marshaling_algorithm: 'jws' } },
    ]);
    const [asn1, jws] = results.map((r) => r.ok?.data.signature as string);
    const point = sm2PublicPoint({ keySpec: 'SM2', publicKeyPem: pems['v-sm2'] as string }).toString('hex');
    const check = (signature: Buffer, der: boolean) =>
      smCrypto.sm2.doVerifySignature(Array.from(Buffer.from(message)), signature.toString('hex'), point, {
        hash: true,
        der,
      });
    expect(check(sigBytes(asn1 as string), true)).toBe(true);
    const raw = Buffer.from((jws as string).split(':')[2] as string, 'base64url');
    expect(raw.length).toBe(64);
    expect(check(raw, false)).toBe(true);
    const verified = await one(signers['v-sm2'] as string, 'verify_signed_data', {
      name: 'v-sm2',
      hash_input: b64(message),
      signature: jws,
      marshaling_algorithm: 'jws',
    });
    expect(verified.ok?.data.valid).toBe(true);
  });

  it('signs a batch: each input its own signature and log index, a bad item fails alone', async () => {
    const res = await fetch(`${url}/v1/transit/sign/v-ec`, {
      method: 'POST',
      headers: { 'x-vault-token': signers['v-ec'] as string, 'content-type': 'application/json' },
      body: JSON.stringify({
        prehashed: true,
        batch_input: [
          { input: b64(sha('sha256', 'first')), reference: 'a' },
          { input: 'not base64!', reference: 'b' },
          { input: b64(Buffer.alloc(20)), reference: 'c' },
          { input: b64(sha('sha256', 'third')) },
        ],
      }),
    });
    expect(res.status).toBe(200);
    const results = ((await res.json()) as { data: { batch_results: Record<string, unknown>[] } }).data.batch_results;
    expect(results).toHaveLength(4);
    const key = createPublicKey(pems['v-ec'] as string);
    for (const [i, text] of [
      [0, 'first'],
      [3, 'third'],
    ] as const) {
      const r = results[i] as { signature: string; key_version: number; log_index: number };
      expect(r.key_version).toBe(1);
      expect(Number.isInteger(r.log_index)).toBe(true);
      expect(verify('sha256', Buffer.from(text), key, sigBytes(r.signature))).toBe(true);
    }
    expect(results[0]?.reference).toBe('a');
    expect(results[1]).toEqual({ error: 'unable to decode batch_input[1].input as base64', reference: 'b' });
    expect(results[2]?.error).toMatch(/32-byte digest/);
    expect(results[2]?.signature).toBeUndefined();
  });

  it('verifies: valid, invalid for other data, and an older version still verifies after a rotation', async () => {
    const message = 'verify me';
    const signed = await one(signers['v-rsa'] as string, 'sign_data', {
      name: 'v-rsa',
      hash_input: b64(message),
      signature_algorithm: 'pkcs1v15',
    });
    const signature = signed.ok.data.signature as string;
    const checks = await runHvac(url, signers['v-rsa'] as string, [
      {
        method: 'verify_signed_data',
        kwargs: { name: 'v-rsa', hash_input: b64(message), signature, signature_algorithm: 'pkcs1v15' },
      },
      {
        method: 'verify_signed_data',
        kwargs: { name: 'v-rsa', hash_input: b64('other'), signature, signature_algorithm: 'pkcs1v15' },
      },
      { method: 'verify_signed_data', kwargs: { name: 'v-rsa', hash_input: b64(message), signature } },
    ]);
    expect(checks.map((c) => c.ok?.data.valid)).toEqual([true, false, false]);
    const rotated = await callAction(svc.app, admin, 'rotate_key', { tenant_id: 'v-rsa' });
    expect(rotated.status).toBe(200);
    const after = await runHvac(url, signers['v-rsa'] as string, [
      {
        method: 'verify_signed_data',
        kwargs: { name: 'v-rsa', hash_input: b64(message), signature, signature_algorithm: 'pkcs1v15' },
      },
      { method: 'sign_data', kwargs: { name: 'v-rsa', hash_input: b64(message) } },
      { method: 'sign_data', kwargs: { name: 'v-rsa', hash_input: b64(message), key_version: 1 } },
      { method: 'read_key', kwargs: { name: 'v-rsa' } },
    ]);
    expect(after[0]?.ok.data.valid).toBe(true);
    expect(after[1]?.ok.data).toMatchObject({ key_version: 2 });
    expect(after[1]?.ok.data.signature).toMatch(/^vault:v2:/);
    expect(after[2]?.error?.type).toBe('InvalidRequest');
    expect(after[2]?.error?.errors[0]).toMatch(/signs only with the latest version .* \(2\)/);
    expect(Object.keys(after[3]?.ok.data.keys)).toEqual(['1', '2']);
    expect(after[3]?.ok.data).toMatchObject({ latest_version: 2, min_available_version: 1 });
    const pss = await one(signers['v-rsa'] as string, 'verify_signed_data', {
      name: 'v-rsa',
      hash_input: b64(message),
      signature: after[1]?.ok.data.signature,
    });
    expect(pss.ok.data.valid).toBe(true);
  });
});

describe.skipIf(missing)('Vault transit refusals, in Vault shape, signing nothing', () => {
  it('no token, a wrong token, a revoked key: 403 permission denied', async () => {
    const before = await signedCount('v-ec');
    const revoked = await svc.apiKey('signer', 'v-ec');
    await svc.store.apiKeys.revoke(revoked.split('_')[1] as string, new Date().toISOString());
    const wrong = `${(signers['v-ec'] as string).slice(0, -4)}AAAA`;
    for (const token of [null, wrong, revoked, 'sbk_nonsense']) {
      const result = await one(token, 'sign_data', { name: 'v-ec', hash_input: b64('x') });
      expect(result.error, String(token)).toMatchObject({ type: 'Forbidden', errors: ['permission denied'] });
    }
    const raw = await fetch(`${url}/v1/transit/keys/v-ec`);
    expect(raw.status).toBe(403);
    expect(raw.headers.get('content-type')).toMatch(/application\/json/);
    expect(await raw.json()).toEqual({ errors: ['permission denied'] });
    expect(await signedCount('v-ec')).toBe(before);
  });

  it("another tenant's key: 403, for sign, read and verify", async () => {
    const token = signers['v-ec'] as string;
    const results = await runHvac(url, token, [
      { method: 'sign_data', kwargs: { name: 'v-rsa', hash_input: b64('x') } },
      { method: 'read_key', kwargs: { name: 'v-rsa' } },
      { method: 'verify_signed_data', kwargs: { name: 'v-rsa', hash_input: b64('x'), signature: 'vault:v1:AAAA' } },
    ]);
    for (const r of results) {
      expect(r.error?.type).toBe('Forbidden');
      expect(r.error?.errors[0]).toBe('permission denied');
      expect(r.error?.errors[1]).toMatch(/another tenant/);
    }
  });

  it('denied by policy: 403 with the rule, the reason, the vulnerability and its fix', async () => {
    const result = await one(signers['v-deny'] as string, 'sign_data', { name: 'v-deny', hash_input: b64('x') });
    expect(result.error?.type).toBe('Forbidden');
    const [text] = result.error?.errors ?? [];
    expect(text).toMatch(/denied by signbridge policy: vuln-block: the artifact has a critical vulnerability/);
    expect(text).toMatch(/vuln_id CVE-2026-4242, fix_version 2\.0\.1/);
    expect(await signedCount('v-deny')).toBe(0);
  });

  it('held for approval: the call waits, then names the request; approved, the same call gets the signature', async () => {
    const call = { name: 'v-held', hash_input: b64('needs approval') };
    const started = Date.now();
    const held = await one(signers['v-held'] as string, 'sign_data', call);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1400); // heldWaitMs
    expect(held.error?.type).toBe('InvalidRequest');
    const [text] = held.error?.errors ?? [];
    const requestId = /signing request ([0-9a-f-]{36}) is pending_approval/.exec(text as string)?.[1];
    expect(requestId, text).toBeDefined();
    expect(text).toContain(`${PUBLIC_URL}/console/requests#`);
    expect(await signedCount('v-held')).toBe(0);
    const approver = await svc.apiKey('approver', 'v-held');
    const approved = await callAction(svc.app, approver, 'approve_sign', {
      tenant_id: 'v-held',
      request_id: requestId,
    });
    expect(approved.status, JSON.stringify(approved.body)).toBe(200);
    const again = await one(signers['v-held'] as string, 'sign_data', call);
    expect(again.error).toBeUndefined();
    const key = createPublicKey(pems['v-held'] as string);
    expect(verify('sha256', Buffer.from('needs approval'), key, sigBytes(again.ok.data.signature))).toBe(true);
    expect(await signedCount('v-held')).toBe(1);
  });

  it('a held batch waits for its one request (collected whole while it waits), then every item names it', async () => {
    const before = await signedCount('v-held');
    const res = await fetch(`${url}/v1/transit/sign/v-held`, {
      method: 'POST',
      headers: { 'x-vault-token': signers['v-held'] as string, 'content-type': 'application/json' },
      body: JSON.stringify({ batch_input: [{ input: b64('held one') }, { input: b64('held two'), reference: 'r' }] }),
    });
    expect(res.status).toBe(200);
    const results = ((await res.json()) as { data: { batch_results: Array<{ error: string; reference?: string }> } })
      .data.batch_results;
    const ids = results.map((r) => /signing request ([0-9a-f-]{36}) is pending_approval/.exec(r.error)?.[1]);
    expect(ids[0], JSON.stringify(results)).toBeDefined();
    expect(ids[1]).toBe(ids[0]);
    expect(results[1]?.reference).toBe('r');
    const request = await svc.store.requests.get('v-held', ids[0] as string);
    expect(request?.batch?.hashes).toHaveLength(2);
    expect(await signedCount('v-held')).toBe(before);
  });

  it('a rejected request: the repeated call gets the rejection at once', async () => {
    const call = { name: 'v-held', hash_input: b64('will be rejected') };
    const held = await one(signers['v-held'] as string, 'sign_data', call);
    const requestId = /signing request ([0-9a-f-]{36})/.exec(held.error?.errors[0] as string)?.[1];
    const approver = await svc.apiKey('approver', 'v-held');
    const rejected = await callAction(svc.app, approver, 'approve_sign', {
      tenant_id: 'v-held',
      request_id: requestId,
      decision: 'reject',
      reason: 'not this one',
    });
    expect(rejected.status).toBe(200);
    const started = Date.now();
    const again = await one(signers['v-held'] as string, 'sign_data', call);
    expect(Date.now() - started).toBeLessThan(1400);
    expect(again.error?.type).toBe('Forbidden');
    expect(again.error?.errors[0]).toMatch(
      new RegExp(`request ${requestId} for this hash was rejected at .*: not this one`),
    );
  });

  it('bad input: unknown hash, bad base64, another key version, a wrong digest length: 400, nothing signed', async () => {
    const before = await signedCount('v-ec');
    const token = signers['v-ec'] as string;
    const results = await runHvac(url, token, [
      { method: 'sign_data', kwargs: { name: 'v-ec', hash_input: b64('x'), hash_algorithm: 'sha2-224' } },
      { method: 'sign_data', kwargs: { name: 'v-ec', hash_input: 'not base64!' } },
      { method: 'sign_data', kwargs: { name: 'v-ec', hash_input: b64('x'), key_version: 7 } },
      { method: 'sign_data', kwargs: { name: 'v-ec', hash_input: b64('x'), prehashed: true } },
    ]);
    const anyTenant = await one(await svc.apiKey('signer', null), 'sign_data', {
      name: 'no-such-tenant',
      hash_input: b64('x'),
    });
    results.push(anyTenant);
    const texts = results.map((r) => {
      expect(r.error?.type, JSON.stringify(r)).toBe('InvalidRequest');
      return r.error?.errors[0];
    });
    expect(texts[0]).toBe('unsupported hash_algorithm "sha2-224"; signbridge supports sha2-256, sha2-384, sha2-512');
    expect(texts[1]).toBe('unable to decode input as base64');
    expect(texts[2]).toMatch(/key_version 7 cannot sign/);
    expect(texts[3]).toMatch(/32-byte digest/);
    expect(texts[4]).toMatch(/no-such-tenant does not exist/);
    const raw = await fetch(`${url}/v1/transit/sign/v-ec/sha3-256`, {
      method: 'POST',
      headers: { 'x-vault-token': token, 'content-type': 'application/json' },
      body: JSON.stringify({ input: b64('x') }),
    });
    expect(raw.status).toBe(400);
    expect(await raw.json()).toEqual({
      errors: ['unsupported hash_algorithm "sha3-256"; signbridge supports sha2-256, sha2-384, sha2-512'],
    });
    const typed = await fetch(`${url}/v1/transit/sign/v-ec`, {
      method: 'POST',
      headers: { 'x-vault-token': token, 'content-type': 'application/json' },
      body: JSON.stringify({ input: b64('x'), prehashed: 'yes' }),
    });
    expect(typed.status).toBe(400);
    expect(((await typed.json()) as { errors: string[] }).errors[0]).toMatch(/^prehashed must be boolean/);
    const missingKey = await one(token, 'read_key', { name: 'v-gone' });
    expect(missingKey.error).toMatchObject({ type: 'Forbidden' }); // another tenant's name, even when none exists
    const adminMissing = await one(admin, 'read_key', { name: 'v-gone' });
    expect(adminMissing.error).toMatchObject({ type: 'InvalidPath', errors: [] });
    expect(await signedCount('v-ec')).toBe(before);
  });
});

describe.skipIf(missing)('Vault transit when the key store or the database cannot serve', () => {
  it('a key store outage: 503 in Vault shape saying to retry, with Retry-After; then it signs again', async () => {
    const sign = svc.keyStore.sign;
    svc.keyStore.sign = async () => {
      throw new ApiError('key_store_unavailable', 'the PKCS#11 token cannot be reached');
    };
    try {
      const result = await one(signers['v-ec'] as string, 'sign_data', { name: 'v-ec', hash_input: b64('outage') });
      expect(result.error?.type).toBe('VaultDown');
      expect(result.error?.errors).toEqual(['the PKCS#11 token cannot be reached; retry']);
      const raw = await fetch(`${url}/v1/transit/sign/v-ec`, {
        method: 'POST',
        headers: { 'x-vault-token': signers['v-ec'] as string, 'content-type': 'application/json' },
        body: JSON.stringify({ input: b64('outage') }),
      });
      expect(raw.status).toBe(503);
      expect(raw.headers.get('retry-after')).toBe('5');
    } finally {
      svc.keyStore.sign = sign;
    }
    const again = await one(signers['v-ec'] as string, 'sign_data', { name: 'v-ec', hash_input: b64('outage') });
    expect(again.error).toBeUndefined();
  });

  it('a database fault: 503 saying to retry', async () => {
    const currentKey = svc.store.tenants.currentKey;
    const fault = Object.assign(new Error('database is locked'), { code: 'SQLITE_BUSY' });
    svc.store.tenants.currentKey = async () => {
      throw fault;
    };
    try {
      const result = await one(signers['v-ec'] as string, 'sign_data', { name: 'v-ec', hash_input: b64('db') });
      expect(result.error?.type).toBe('VaultDown');
      expect(result.error?.errors[0]).toMatch(/the database cannot serve right now \(SQLITE_BUSY\).*; retry$/);
    } finally {
      svc.store.tenants.currentKey = currentKey;
    }
  });
});

/**
 * A request as Vault's Go client (github.com/hashicorp/vault/api) puts it on the wire:
 * - api/logical.go (commit 0050583, lines 24-26): Write is `NewRequest("PUT", "/v1/"+path)` with SetJSONBody; Read
 *   is a GET with no body.
 * - api/request.go (commit dc215f9, lines 44-53): SetJSONBody is `json.Marshal(val)`: compact, map keys sorted, no
 *   trailing newline; toRetryableHTTP sets the token as `X-Vault-Token` and sets no Content-Type.
 * - api/client.go (commit 043ca62, NewRequest): the method and path as given, the token, the client's headers.
 *   `X-Vault-Request: true` (what Vault Agent's require_request_header asks for, sent by current clients) is added
 *   from memory of newer releases, not from the revision read here; the server ignores it either way.
 * - Go's net/http writes Host, User-Agent `Go-http-client/1.1`, Content-Length (for a body), the client's headers
 *   in sorted order, and `Accept-Encoding: gzip`; HTTP/1.1 keep-alive (no Connection header).
 * The body here is built as json.Marshal builds it: `JSON.stringify` of an object whose keys are already sorted.
 */
function goClientRequest(method: 'GET' | 'PUT', path: string, token: string, data?: Record<string, unknown>): string {
  const body =
    data === undefined
      ? ''
      : JSON.stringify(Object.fromEntries(Object.entries(data).sort(([a], [b]) => (a < b ? -1 : 1))));
  return (
    `${method} /v1/${path} HTTP/1.1\r\nHost: ${new URL(url).host}\r\nUser-Agent: Go-http-client/1.1\r\n` +
    (data === undefined ? '' : `Content-Length: ${Buffer.byteLength(body)}\r\n`) +
    `X-Vault-Request: true\r\nX-Vault-Token: ${token}\r\nAccept-Encoding: gzip\r\n\r\n${body}`
  );
}

async function goClient(method: 'GET' | 'PUT', path: string, token: string, data?: Record<string, unknown>) {
  const answer = await rawExchange(Number(new URL(url).port), [goClientRequest(method, path, token, data)]);
  // biome-ignore lint/suspicious/noExplicitAny: Vault's answers are untyped JSON
  return { status: answer.status, headers: answer.headers, json: JSON.parse(answer.body) as any };
}

describe("Vault's Go client (Logical().Write is PUT, JSON with no Content-Type)", () => {
  it('signs and verifies with PUT, with and without the hash in the path; reads stay GET', async () => {
    const token = signers['g-ec'] as string;
    const key = await goClient('GET', 'transit/keys/g-ec', token);
    expect(key.status).toBe(200);
    const pem = key.json.data.keys['1'].public_key as string;
    for (const path of ['transit/sign/g-ec', 'transit/sign/g-ec/sha2-256']) {
      const signed = await goClient('PUT', path, token, { input: b64('go client release') });
      expect(signed.status, JSON.stringify(signed.json)).toBe(200);
      expect(signed.headers['content-type']).toBe('application/json');
      const signature = signed.json.data.signature as string;
      expect(verify('sha256', Buffer.from('go client release'), createPublicKey(pem), sigBytes(signature))).toBe(true);
      const verified = await goClient('PUT', path.replace('/sign/', '/verify/'), token, {
        input: b64('go client release'),
        signature,
      });
      expect(verified.status).toBe(200);
      expect(verified.json).toEqual({ data: { valid: true } });
    }
    // A read with PUT is no write transit has: Vault's own 405-less answer is an unsupported path here.
    const readWithPut = await goClient('PUT', 'transit/keys/g-ec', token, {});
    expect(readWithPut.status).toBe(404);
    expect(readWithPut.json).toEqual({ errors: ['unsupported path'] });
  });

  it("the vault CLI's `vault write transit/sign/<key> input=... prehashed=true hash_algorithm=sha2-256`: every value a string", async () => {
    // command/write.go parses each key=value into map[string]interface{} as a string and calls Logical().Write.
    const token = signers['g-rsa'] as string;
    const digest = sha('sha256', 'cli artifact');
    const signed = await goClient('PUT', 'transit/sign/g-rsa', token, {
      input: b64(digest),
      prehashed: 'true',
      hash_algorithm: 'sha2-256',
      signature_algorithm: 'pkcs1v15',
    });
    expect(signed.status, JSON.stringify(signed.json)).toBe(200);
    const pem = pems['g-rsa'] as string;
    expect(
      verify('sha256', Buffer.from('cli artifact'), createPublicKey(pem), sigBytes(signed.json.data.signature)),
    ).toBe(true);
    const notABool = await goClient('PUT', 'transit/sign/g-rsa', token, { input: b64(digest), prehashed: 'yes' });
    expect(notABool.status).toBe(400);
    expect(notABool.json.errors[0]).toMatch(/^prehashed must be boolean/);
  });
});

describe("cosign's hashivault:// signer, end to end", () => {
  // sigstore/sigstore pkg/signature/kms/hashivault/client.go (v1.4.0, summarised in
  // test/fixtures/sigstore-go/README.md): fetchPublicKey reads `keys/<name>` with Logical().Read and takes
  // data.keys[<data.latest_version>].public_key; sign() writes `sign/<name>/sha2-256` with Logical().Write
  // {"input": base64 of the digest, "prehashed": true, "key_version": "0"} and strips `vault:vN:` from
  // data.signature; verify() writes `verify/<name>/sha2-256` with {"input", "prehashed": true, "signature"} and reads
  // data.valid. No signature_algorithm is sent: an RSA key signs PSS, Vault's default.
  for (const tenant of ['g-ec', 'g-rsa']) {
    it(`signs a digest with ${tenant} and the signature verifies with the public key it read`, async () => {
      const token = signers[tenant] as string;
      const key = await goClient('GET', `transit/keys/${tenant}`, token);
      expect(key.status).toBe(200);
      const latest = key.json.data.latest_version as number;
      expect(typeof latest).toBe('number');
      const publicKey = createPublicKey(key.json.data.keys[String(latest)].public_key as string);
      const payload = Buffer.from('{"critical":{"image":{"docker-manifest-digest":"sha256:abc"}}}');
      const digest = createHash('sha256').update(payload).digest();
      const signed = await goClient('PUT', `transit/sign/${tenant}/sha2-256`, token, {
        input: b64(digest),
        key_version: '0',
        prehashed: true,
      });
      expect(signed.status, JSON.stringify(signed.json)).toBe(200);
      const encoded = (signed.json.data.signature as string).replace(/vault:v[0-9]+:/, '');
      const signature = Buffer.from(encoded, 'base64');
      const verifyKey =
        tenant === 'g-rsa'
          ? {
              key: publicKey,
              padding: cryptoConstants.RSA_PKCS1_PSS_PADDING,
              saltLength: cryptoConstants.RSA_PSS_SALTLEN_AUTO,
            }
          : publicKey;
      expect(verify('sha256', payload, verifyKey, signature)).toBe(true);
      const verified = await goClient('PUT', `transit/verify/${tenant}/sha2-256`, token, {
        input: b64(digest),
        prehashed: true,
        signature: `vault:v1:${encoded}`,
      });
      expect(verified.json).toEqual({ data: { valid: true } });
    });
  }
});

// jsign's requests as its source builds them: jsign-crypto/src/main/java/net/jsign/jca/HashiCorpVaultSigningService.java
// (ebourg/jsign, commit 3179d354): the token as `Authorization: Bearer` (line 65); `GET keys?list=true` (line 87);
// `GET keys/<name>` for `type` (line 117); `POST sign/<name>` (line 168) with `key_version` the part of the alias
// after ':' as a JSON string (lines 147-152; JsonWriter.java quotes a String), `input`, `prehashed: true`,
// `hash_algorithm`, and `signature_algorithm: pkcs1v15` for RSA (lines 157-163); the signature is the third field of
// `vault:vN:<base64>` (line 178).
describe.skipIf(missing)("jsign's HASHICORPVAULT requests (Authorization: Bearer)", () => {
  const jsign = (token: string, path: string, body?: unknown) =>
    fetch(`${url}/v1/transit/${path}`, {
      method: body === undefined ? 'GET' : 'POST',
      headers: {
        authorization: `Bearer ${token}`,
        ...(body !== undefined && { 'content-type': 'application/json' }),
      },
      ...(body !== undefined && { body: JSON.stringify(body) }),
    });

  it('lists, reads the type, signs a prehashed digest with pkcs1v15 and gets the log index', async () => {
    const token = signers['v-rsa'] as string;
    const list = await jsign(token, 'keys?list=true');
    expect(list.status).toBe(200);
    expect(await list.json()).toMatchObject({ data: { keys: ['v-rsa'] } });
    const read = await jsign(token, 'keys/v-rsa');
    const key = ((await read.json()) as { data: { type: string; latest_version: number } }).data;
    expect(key.type).toBe('rsa-2048');
    const digest = sha('sha256', 'app.exe');
    const signed = await jsign(token, 'sign/v-rsa', {
      key_version: String(key.latest_version),
      input: b64(digest),
      prehashed: true,
      hash_algorithm: 'sha2-256',
      signature_algorithm: 'pkcs1v15',
    });
    expect(signed.status).toBe(200);
    const index = Number(signed.headers.get('signbridge-log-index'));
    expect(Number.isInteger(index)).toBe(true);
    const data = ((await signed.json()) as { data: { signature: string; key_version: number } }).data;
    expect(data.key_version).toBe(key.latest_version);
    const current = (await callAction(svc.app, admin, 'get_public_key', { tenant_id: 'v-rsa' })).body;
    expect(
      verify(
        'sha256',
        Buffer.from('app.exe'),
        createPublicKey(current.public_key_pem as string),
        sigBytes(data.signature),
      ),
    ).toBe(true);
    const audit = await svc.store.audit.read(index, 1);
    expect(audit[0]).toMatchObject({ tenantId: 'v-rsa', outcome: 'signed' });
  });

  it('a wrong Bearer token: 403 permission denied', async () => {
    const res = await jsign('sbk_0000000000000000_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', 'keys?list=true');
    expect(res.status).toBe(403);
    expect(await res.json()).toEqual({ errors: ['permission denied'] });
  });
});

describe.skipIf(missing)('Vault transit on another mount (kmsApi.vaultMount)', () => {
  it('answers under /v1/<mount>/ only, hvac with mount_point, LIST included', async () => {
    const other = await startTestService({ kmsApi: { enabled: true, heldWaitMs: 0, vaultMount: 'signing/transit' } });
    try {
      const base = await other.app.listen({ host: '127.0.0.1', port: 0 });
      await callAction(other.app, other.operator, 'create_tenant', { tenant_id: 'm-ec', key_spec: 'ECC_NIST_P256' });
      const token = await other.apiKey('signer', 'm-ec');
      const mount = { mount_point: 'signing/transit' };
      const results = await runHvac(base, token, [
        { method: 'list_keys', kwargs: mount },
        { method: 'read_key', kwargs: { name: 'm-ec', ...mount } },
        { method: 'sign_data', kwargs: { name: 'm-ec', hash_input: b64('mounted'), ...mount } },
        { method: 'read_key', kwargs: { name: 'm-ec' } },
      ]);
      expect(results[0]?.ok.data.keys).toEqual(['m-ec']);
      expect(results[1]?.ok.data.type).toBe('ecdsa-p256');
      const pem = results[1]?.ok.data.keys['1'].public_key as string;
      expect(
        verify('sha256', Buffer.from('mounted'), createPublicKey(pem), sigBytes(results[2]?.ok.data.signature)),
      ).toBe(true);
      // /v1/transit/ is no Vault mount here: the service's ordinary 404 (not Vault's shape), which hvac reports.
      expect(results[3]?.error?.type).toBe('InvalidPath');
    } finally {
      await other.close();
    }
  });
});
