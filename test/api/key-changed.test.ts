// The key a client names is the key that signs: a request pinned to a key version (/v1 key_id; the version a KMS
// KeyId or a Vault key resolved to, whose digest the door built from it) is refused, with nothing signed and no
// `signed` entry, when that version is no longer current: rotated in the window between the door resolving the key
// and the signer reading it (the beforeSigningKeyRead seam rotates there), or before the request (a real rotate_key,
// then the old key_id). For RSA, P-256, ML-DSA and SM2, on /v1 sign, pkcs11_sign and sign_batch, KMS Sign (boto3)
// and Vault transit sign (hvac). Before issue 45 KMS and Vault signed with the new version (for ML-DSA and SM2 a
// signature that verifies under neither), /v1 had no key_id (400); an old KMS key ARN (DisabledException) and an
// old Vault key_version were refused already, and stay so.
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAwsApiKey } from '../../src/auth/aws-credentials/aws-credentials.js';
import type { KeySpec, SigningAlgorithm } from '../../src/crypto/algorithms.js';
import { type Boto3Call, botocoreMissing, runBoto3Kms } from '../helpers/botocore.js';
import { hvacMissing, runHvac } from '../helpers/hvac.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

const missing = botocoreMissing() ?? hvacMissing();

/** One tenant per key spec, with the digest and algorithm /v1 sends and the algorithm KMS is asked for. */
const TENANTS: Record<string, { spec: KeySpec; digestBytes: number; algorithm: SigningAlgorithm }> = {
  'kc-rsa': { spec: 'RSA_2048', digestBytes: 32, algorithm: 'RSASSA_PKCS1_V1_5_SHA_256' },
  'kc-p256': { spec: 'ECC_NIST_P256', digestBytes: 32, algorithm: 'ECDSA_SHA_256' },
  'kc-mldsa': { spec: 'ML_DSA_44', digestBytes: 64, algorithm: 'ML_DSA_SHAKE_256' },
  'kc-sm2': { spec: 'SM2', digestBytes: 32, algorithm: 'SM2DSA' },
};
const tenantNames = Object.keys(TENANTS);

let svc: TestService;
let url: string;
const signers: Record<string, string> = {};
const admins: Record<string, string> = {};
const aws: Record<string, { access_key: string; secret_key: string }> = {};

/** Tenants whose key the seam rotates once, just before the signer reads the current key. */
const rotateInTheWindow = new Set<string>();

beforeAll(async () => {
  if (missing) return;
  svc = await startTestService({
    kmsApi: { enabled: true, heldWaitMs: 0, vaultMount: 'transit' },
    beforeSigningKeyRead: async (tenantId) => {
      if (!rotateInTheWindow.delete(tenantId)) return;
      const rotated = await callAction(svc.app, admins[tenantId], 'rotate_key', { tenant_id: tenantId });
      if (rotated.status !== 200) throw new Error(`rotate_key in the window: ${JSON.stringify(rotated.body)}`);
    },
  });
  url = await svc.app.listen({ host: '127.0.0.1', port: 0 });
  for (const [tenant, { spec }] of Object.entries(TENANTS)) {
    const made = await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: tenant, key_spec: spec });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    signers[tenant] = await svc.apiKey('signer', tenant);
    admins[tenant] = await svc.apiKey('admin', tenant);
    const key = await createAwsApiKey(svc.store, svc.keyStore, 'signer', tenant, `test ${tenant}`);
    aws[tenant] = { access_key: key.accessKeyId, secret_key: key.secretAccessKey };
  }
}, 120_000);
afterAll(async () => svc?.close());

const digestFor = (tenant: string) =>
  createHash('sha512').update(`artifact of ${tenant}`).digest().subarray(0, TENANTS[tenant]?.digestBytes);

async function currentKeyId(tenant: string): Promise<string> {
  const got = await callAction(svc.app, admins[tenant], 'get_public_key', { tenant_id: tenant });
  expect(got.status, JSON.stringify(got.body)).toBe(200);
  return got.body.key_id as string;
}

/** What a refused request must leave as it was: the tenant's signatures and its `signed` audit entries. */
async function signedState(tenant: string): Promise<{ signatures: number; signedEntries: number }> {
  const entries = await svc.store.audit.read(0, 1_000_000);
  return {
    signatures: (await svc.store.signatures.list(tenant, 100_000)).length,
    signedEntries: entries.filter((e) => e.tenantId === tenant && e.outcome === 'signed').length,
  };
}

/** The three /v1 signing actions, each pinned to key_id. */
function v1Bodies(tenant: string, keyId: string): Array<[string, Record<string, unknown>]> {
  const t = TENANTS[tenant]!;
  const hash = digestFor(tenant).toString('base64');
  return [
    ['sign', { tenant_id: tenant, hash, algorithm: t.algorithm, key_id: keyId }],
    ['pkcs11_sign', { tenant_id: tenant, hash, key_id: keyId }],
    ['sign_batch', { tenant_id: tenant, hashes: [hash, hash], key_id: keyId }],
  ];
}

function kmsSign(tenant: string, keyId: string): Boto3Call {
  return {
    name: tenant,
    ...aws[tenant]!,
    region: 'eu-west-1',
    op: 'sign',
    params: {
      KeyId: keyId,
      Message: Buffer.from(`release of ${tenant}`).toString('base64'),
      MessageType: 'RAW',
      SigningAlgorithm: TENANTS[tenant]!.algorithm,
    },
  };
}

describe.skipIf(missing)('a pinned key version that is no longer current signs nothing', () => {
  it('/v1 sign, pkcs11_sign, sign_batch: rotated between the key read by the client and the signer: 409 key_changed', async () => {
    for (const tenant of tenantNames) {
      for (const [action, body] of v1Bodies(tenant, await currentKeyId(tenant))) {
        const before = await signedState(tenant);
        const asked = body.key_id as string;
        rotateInTheWindow.add(tenant);
        const res = await callAction(svc.app, signers[tenant], action, body);
        expect(rotateInTheWindow.has(tenant), 'the seam rotated').toBe(false);
        expect(res.status, `${tenant} ${action}: ${JSON.stringify(res.body)}`).toBe(409);
        expect(res.body.error).toBe('key_changed');
        expect(res.body.reason).toContain(asked);
        expect(await signedState(tenant)).toEqual(before);
        // Named again with the key now current, the same request signs.
        const again = await callAction(svc.app, signers[tenant], action, {
          ...body,
          key_id: await currentKeyId(tenant),
        });
        expect(again.status, `${tenant} ${action} again: ${JSON.stringify(again.body)}`).toBe(200);
      }
    }
  }, 120_000);

  it('/v1: an old key_id after a real rotate_key is 409 key_changed on each action; without key_id the current key signs', async () => {
    for (const tenant of tenantNames) {
      const old = await currentKeyId(tenant);
      expect((await callAction(svc.app, admins[tenant], 'rotate_key', { tenant_id: tenant })).status).toBe(200);
      const before = await signedState(tenant);
      for (const [action, body] of v1Bodies(tenant, old)) {
        const res = await callAction(svc.app, signers[tenant], action, body);
        expect(res.status, `${tenant} ${action}: ${JSON.stringify(res.body)}`).toBe(409);
        expect(res.body).toMatchObject({ error: 'key_changed' });
      }
      expect(await signedState(tenant)).toEqual(before);
      const { key_id: _unpinned, ...unpinned } = v1Bodies(tenant, old)[0]![1];
      const signed = await callAction(svc.app, signers[tenant], 'sign', unpinned);
      expect(signed.status).toBe(200);
      expect(signed.body.key_id).toBe(await currentKeyId(tenant));
    }
  }, 120_000);

  it('KMS Sign (boto3): the version the KeyId resolved to is rotated out before it signs: KMSInvalidStateException naming its ARN', async () => {
    const resolved: Record<string, string> = {};
    const before: Record<string, unknown> = {};
    for (const tenant of tenantNames) {
      resolved[tenant] = await currentKeyId(tenant);
      before[tenant] = await signedState(tenant);
      rotateInTheWindow.add(tenant);
    }
    const got = await runBoto3Kms(
      url,
      tenantNames.map((tenant) => kmsSign(tenant, `alias/${tenant}`)),
    );
    for (const tenant of tenantNames) {
      expect(rotateInTheWindow.has(tenant), 'the seam rotated').toBe(false);
      const outcome = got[tenant];
      expect(outcome, `${tenant}: ${JSON.stringify(outcome)}`).toMatchObject({
        ok: false,
        code: 'KMSInvalidStateException',
        status: 400,
      });
      if (outcome?.ok !== false) continue;
      expect(outcome.message).toContain(`arn:aws:kms:eu-west-1:${tenant}:key/${resolved[tenant]}`);
      expect(await signedState(tenant)).toEqual(before[tenant]);
    }
    // The same call again resolves the alias to the new version and signs with it.
    const again = await runBoto3Kms(
      url,
      tenantNames.map((tenant) => kmsSign(tenant, `alias/${tenant}`)),
    );
    for (const tenant of tenantNames) {
      const outcome = again[tenant];
      expect(outcome?.ok, `${tenant}: ${JSON.stringify(outcome)}`).toBe(true);
      if (outcome?.ok) expect(outcome.answer.KeyId).toContain(`:key/${await currentKeyId(tenant)}`);
    }
  }, 180_000);

  it('KMS Sign (boto3): the ARN of a version rotated out before the call is refused, nothing signed', async () => {
    const old: Record<string, string> = {};
    const before: Record<string, unknown> = {};
    for (const tenant of tenantNames) {
      old[tenant] = await currentKeyId(tenant);
      expect((await callAction(svc.app, admins[tenant], 'rotate_key', { tenant_id: tenant })).status).toBe(200);
      before[tenant] = await signedState(tenant);
    }
    const got = await runBoto3Kms(
      url,
      tenantNames.map((tenant) => kmsSign(tenant, old[tenant] as string)),
    );
    for (const tenant of tenantNames) {
      expect(got[tenant], `${tenant}: ${JSON.stringify(got[tenant])}`).toMatchObject({ ok: false, status: 400 });
      expect(await signedState(tenant)).toEqual(before[tenant]);
    }
  }, 180_000);

  it("Vault sign (hvac): the version checked is rotated out before it signs: Vault's 400 naming key_changed's reason", async () => {
    for (const tenant of tenantNames) {
      const resolved = await currentKeyId(tenant);
      const before = await signedState(tenant);
      rotateInTheWindow.add(tenant);
      const [result] = await runHvac(url, signers[tenant] as string, [
        { method: 'sign_data', kwargs: { name: tenant, hash_input: Buffer.from('release').toString('base64') } },
      ]);
      expect(rotateInTheWindow.has(tenant), 'the seam rotated').toBe(false);
      expect(result?.error, `${tenant}: ${JSON.stringify(result)}`).toMatchObject({ type: 'InvalidRequest' });
      expect(result?.error?.errors.join(' ')).toContain(`key ${resolved} is no longer tenant ${tenant}'s current key`);
      expect(await signedState(tenant)).toEqual(before);
    }
  }, 180_000);

  it('Vault sign with batch_input (hvac): the batch is pinned to the version checked; rotated out, every item is refused', async () => {
    for (const tenant of tenantNames) {
      const resolved = await currentKeyId(tenant);
      const before = await signedState(tenant);
      rotateInTheWindow.add(tenant);
      // hvac's sign_data knows no batch_input: the body goes through hvac's own adapter.
      const [result] = await runHvac(url, signers[tenant] as string, [
        {
          method: 'post',
          path: `/v1/transit/sign/${tenant}`,
          json: { batch_input: ['one', 'two', 'three'].map((t) => ({ input: Buffer.from(t).toString('base64') })) },
        },
      ]);
      expect(rotateInTheWindow.has(tenant), 'the seam rotated').toBe(false);
      const results = result?.ok?.data.batch_results as Array<{ error?: string }>;
      expect(results, `${tenant}: ${JSON.stringify(result)}`).toHaveLength(3);
      for (const item of results) {
        expect(item.error).toContain(`key ${resolved} is no longer tenant ${tenant}'s current key`);
      }
      expect(await signedState(tenant)).toEqual(before);
    }
  }, 180_000);

  it('Vault sign (hvac): key_version of a version rotated out before the call is refused, nothing signed', async () => {
    for (const tenant of tenantNames) {
      const described = await runHvac(url, signers[tenant] as string, [
        { method: 'read_key', kwargs: { name: tenant } },
      ]);
      const oldVersion = described[0]?.ok.data.latest_version as number;
      expect((await callAction(svc.app, admins[tenant], 'rotate_key', { tenant_id: tenant })).status).toBe(200);
      const before = await signedState(tenant);
      const [result] = await runHvac(url, signers[tenant] as string, [
        {
          method: 'sign_data',
          kwargs: { name: tenant, hash_input: Buffer.from('release').toString('base64'), key_version: oldVersion },
        },
      ]);
      expect(result?.error, `${tenant}: ${JSON.stringify(result)}`).toMatchObject({ type: 'InvalidRequest' });
      expect(await signedState(tenant)).toEqual(before);
    }
  }, 180_000);
});
