// The service on AWS KMS (the KMS double, test/helpers/kms-double/): every one of the twelve key specs created,
// signed, verified independently, rotated (the alias moves; the old version still answers get_public_key) and
// signed again through the HTTP API, as test/api/key-specs.test.ts does on the embedded default; and what a caller
// sees when KMS will not sign: 409 key_not_usable for a disabled key, 503 with Retry-After while KMS throttles,
// fails or is too slow, recovery when that ends, /readyz 503 while KMS cannot be reached.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { createApiKey } from '../../src/auth/api-keys.js';
import { defaultAlgorithm, KEY_SPECS, type KeySpec, type SigningAlgorithm } from '../../src/crypto/algorithms.js';
import { AwsKmsKeyStore } from '../../src/keys/aws-kms/aws-kms-key-store.js';
import { KeyStores } from '../../src/keys/key-store.js';
import type { KyselyStore } from '../../src/store/kysely-store.js';
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { signingInput, tampered, verifiesIndependently } from '../helpers/independent-verify.js';
import { type KmsDouble, startKmsDouble } from '../helpers/kms-double/kms-double.js';
import { callAction, makeTempDir } from '../helpers/service.js';

let double: KmsDouble;
let store: KyselyStore;
let kms: AwsKmsKeyStore;
let app: FastifyInstance;
let impatientKms: AwsKmsKeyStore;
let impatientApp: FastifyInstance;
let operator: string;
const dataDir = makeTempDir('sb-kms-service-');
const message = Buffer.from('an artifact to sign in AWS KMS\n');

beforeAll(async () => {
  double = await startKmsDouble();
  store = openSqliteStore(join(dataDir, 'signbridge.db'));
  await store.migrate();
  // The double makes an RSA-4096 key in seconds on a loaded machine: this app gives KMS 20 s an attempt.
  kms = kmsStore({ requestTimeoutMs: 20_000 });
  app = await buildApp({ store, keyStore: new KeyStores([kms]) });
  await app.ready();
  // A short timeout and few attempts keep the fault tests quick; the defaults are 5000 ms and 3.
  impatientKms = kmsStore({ requestTimeoutMs: 2500, maxAttempts: 2, pingTimeoutMs: 1500 });
  impatientApp = await buildApp({ store, keyStore: new KeyStores([impatientKms]) });
  await impatientApp.ready();
  operator = (await createApiKey(store, 'operator', null, 'op')).token;
});
afterAll(async () => {
  await app?.close();
  await impatientApp?.close();
  await kms?.close();
  await impatientKms?.close();
  await store?.close();
  await double?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

function kmsStore(options: Partial<ConstructorParameters<typeof AwsKmsKeyStore>[0]>): AwsKmsKeyStore {
  return new AwsKmsKeyStore({
    endpoint: double.url,
    region: 'us-east-1',
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    ...options,
  });
}

/** An algorithm per spec that shows the most: PSS for RSA, for P-384 a SHA-256 digest (KMS takes only SHA-384). */
function algorithmFor(spec: KeySpec): SigningAlgorithm {
  if (spec.startsWith('RSA')) return 'RSASSA_PSS_SHA_384';
  if (spec === 'ECC_NIST_P384') return 'ECDSA_SHA_256';
  return defaultAlgorithm(spec);
}

async function tenantKeys(tenant: string) {
  const admin = (await createApiKey(store, 'admin', tenant, 'admin')).token;
  const signer = (await createApiKey(store, 'signer', tenant, 'ci')).token;
  return { admin, signer };
}

describe.each(KEY_SPECS.map((s) => [s]))('%s in KMS', (spec) => {
  const tenant = `kms-${spec.toLowerCase().replaceAll('_', '-')}`;
  it('is created, signs, verifies independently, rotates, and old and new keys both stay readable', async () => {
    const created = await callAction(app, operator, 'create_tenant', { tenant_id: tenant, key_spec: spec });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const { admin, signer } = await tenantKeys(tenant);
    const algorithm = algorithmFor(spec);
    const pems: string[] = [];
    for (const round of [1, 2]) {
      const pub = await callAction(app, admin, 'get_public_key', { tenant_id: tenant });
      expect(pub.status).toBe(200);
      const pem = pub.body.public_key_pem as string;
      pems.push(pem);
      const hash = signingInput(pem, algorithm, message);
      const signed = await callAction(app, signer, 'sign', {
        tenant_id: tenant,
        hash: hash.toString('base64'),
        algorithm,
      });
      expect(signed.status, JSON.stringify(signed.body)).toBe(200);
      const signature = Buffer.from(signed.body.signature as string, 'base64');
      expect(verifiesIndependently(spec, pem, algorithm, message, signature), `round ${round}`).toBe(true);
      expect(verifiesIndependently(spec, pem, algorithm, message, tampered(signature))).toBe(false);
      if (round === 1) {
        const rotated = await callAction(app, admin, 'rotate_key', { tenant_id: tenant });
        expect(rotated.status, JSON.stringify(rotated.body)).toBe(200);
      }
    }
    const keys = await store.tenants.listKeys(tenant);
    expect(keys.map((k) => k.keyStore)).toEqual(['aws-kms', 'aws-kms']);
    const [first, second] = keys as [(typeof keys)[0], (typeof keys)[0]];
    // The keyRef is the key's ARN, and the tenant's alias points at the newest key.
    expect(first.keyRef).toMatch(/^arn:aws:kms:/);
    expect(double.aliases.get(`alias/signbridge/${tenant}`)).toBe(double.key(second.keyRef).id);
    expect(double.key(first.keyRef).tags).toContainEqual({ TagKey: 'signbridge:tenant', TagValue: tenant });
    // The old version is still readable with key_id, with the public key it had.
    const old = await callAction(app, admin, 'get_public_key', { tenant_id: tenant, key_id: first.id });
    expect(old.status).toBe(200);
    expect(old.body.public_key_pem).toBe(pems[0]);
    expect(pems[0]).not.toBe(pems[1]);
  });
});

it('SM2 where KMS does not offer it (outside the China Regions) is 400 unsupported_key_spec, not a 500', async () => {
  const elsewhere = await startKmsDouble({ unavailableSpecs: ['SM2'] });
  const kmsElsewhere = new AwsKmsKeyStore({
    endpoint: elsewhere.url,
    region: 'eu-west-1',
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
  });
  const other = await buildApp({ store, keyStore: new KeyStores([kmsElsewhere]) });
  try {
    const res = await callAction(other, operator, 'create_tenant', { tenant_id: 'kms-sm2-elsewhere', key_spec: 'SM2' });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ error: 'unsupported_key_spec' });
    expect(String(res.body.reason)).toMatch(/SM2/);
    expect(await store.tenants.get('kms-sm2-elsewhere')).toBeUndefined();
  } finally {
    await other.close();
    await kmsElsewhere.close();
    await elsewhere.close();
  }
});

it("RSA PSS through Vault transit: KMS's salt (the hash's length) signs; another salt_length is 400, nothing signed", async () => {
  const tenant = 'kms-vault-pss';
  const created = await callAction(app, operator, 'create_tenant', { tenant_id: tenant, key_spec: 'RSA_2048' });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  const { signer } = await tenantKeys(tenant);
  const sign = (fields: object) =>
    app.inject({
      method: 'POST',
      url: `/v1/transit/sign/${tenant}`,
      headers: { 'x-vault-token': signer },
      payload: { input: message.toString('base64'), ...fields },
    });
  const hash = await sign({ salt_length: 'hash' });
  expect(hash.statusCode, hash.body).toBe(200);
  const entries = async () => (await store.audit.read(0, 1_000_000)).filter((e) => e.tenantId === tenant);
  const before = await entries();
  expect(before.filter((e) => e.outcome === 'signed')).toHaveLength(1);
  // Vault's default, auto, asks for the longest salt: KMS cannot make it, and the door says so before the policy.
  for (const fields of [{}, { salt_length: '20' }]) {
    const refused = await sign(fields);
    expect(refused.statusCode).toBe(400);
    expect(refused.json().errors[0]).toMatch(/AWS KMS, which signs RSA PSS only with a salt as long as the hash/);
  }
  expect(await entries()).toEqual(before);
  // The key store refuses it too, for any caller that would ask.
  const [key] = await store.tenants.listKeys(tenant);
  await expect(
    kms.sign(key?.keyRef as string, 'RSA_2048', 'RSASSA_PSS_SHA_256', Buffer.alloc(32), { pssSaltLength: 20 }),
  ).rejects.toThrow(/signs RSA PSS only with a salt as long as the hash \(32 bytes\), not 20/);
});

describe('when KMS will not sign', () => {
  const tenant = 'kms-faults';
  let signer: string;
  let pem: string;
  const sign = () =>
    callAction(impatientApp, signer, 'sign', {
      tenant_id: tenant,
      algorithm: 'ECDSA_SHA_256',
      hash: signingInput(pem, 'ECDSA_SHA_256', message).toString('base64'),
    });

  beforeAll(async () => {
    const created = await callAction(impatientApp, operator, 'create_tenant', {
      tenant_id: tenant,
      key_spec: 'ECC_NIST_P256',
    });
    expect(created.status).toBe(201);
    signer = (await tenantKeys(tenant)).signer;
    pem = (await callAction(impatientApp, signer, 'get_public_key', { tenant_id: tenant })).body
      .public_key_pem as string;
  });

  it('a disabled key is 409 key_not_usable saying so; enabled again, it signs', async () => {
    const [key] = await store.tenants.listKeys(tenant);
    double.key(key?.keyRef as string).state = 'Disabled';
    const res = await sign();
    expect(res.status).toBe(409);
    expect(res.body).toMatchObject({ error: 'key_not_usable' });
    expect(String(res.body.reason)).toMatch(/disabled/);
    double.key(key?.keyRef as string).state = 'Enabled';
    expect((await sign()).status).toBe(200);
  });

  it.each([
    ['throttles', 'throttle'],
    ['answers 500', 'internal'],
  ] as const)('KMS %s on every attempt: 503 key_store_unavailable with Retry-After; it signs again when that ends', async (_what, kind) => {
    double.addFault({ op: 'Sign', kind, times: -1 });
    try {
      const res = await sign();
      expect(res.status).toBe(503);
      expect(res.body).toMatchObject({ error: 'key_store_unavailable' });
      expect(res.headers['retry-after']).toBe('5');
    } finally {
      double.clearFaults();
    }
    const back = await sign();
    expect(back.status).toBe(200);
    expect(
      verifiesIndependently(
        'ECC_NIST_P256',
        pem,
        'ECDSA_SHA_256',
        message,
        Buffer.from(back.body.signature as string, 'base64'),
      ),
    ).toBe(true);
  });

  it('an answer slower than the request timeout is 503, not a hang or a 500', async () => {
    double.addFault({ op: 'Sign', kind: 'delay', ms: 4000, times: -1 });
    try {
      const res = await sign();
      expect(res.status).toBe(503);
      expect(res.body).toMatchObject({ error: 'key_store_unavailable' });
    } finally {
      double.clearFaults();
    }
    expect((await sign()).status).toBe(200);
  });

  it('/readyz is 503 with key_store unavailable while KMS cannot be reached, 200 again after', async () => {
    expect((await impatientApp.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
    double.addFault({ op: '*', kind: 'drop', times: -1 });
    try {
      const ready = await impatientApp.inject({ method: 'GET', url: '/readyz' });
      expect(ready.statusCode).toBe(503);
      expect(ready.json()).toMatchObject({ key_store: 'unavailable', store: 'ok' });
      expect((await sign()).status).toBe(503);
    } finally {
      double.clearFaults();
    }
    expect((await impatientApp.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
  });
});
