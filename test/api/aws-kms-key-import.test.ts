// Key import end to end on AWS KMS (the KMS double, test/helpers/kms-double/, which stands in for KMS's
// CreateKey Origin=EXTERNAL, GetParametersForImport and ImportKeyMaterial with a real unwrap): get_import_params
// and import_key through the HTTP API with material wrapped by openssl and by Node, for RSA, EC, ML-DSA and SM2
// material; the blob passes through untouched, KMS unwraps it; signatures verified with the original public key.
// KMS's refusals come back as our codes, and a refused import changes nothing.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { createApiKey } from '../../src/auth/api-keys.js';
import type { KeySpec } from '../../src/crypto/algorithms.js';
import { AwsKmsKeyStore } from '../../src/keys/aws-kms/aws-kms-key-store.js';
import { wrapKeyMaterial } from '../../src/keys/import/client-wrap.js';
import { KeyStores, type WrappingAlgorithm, type WrappingKeySpec } from '../../src/keys/key-store.js';
import type { KyselyStore } from '../../src/store/kysely-store.js';
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import {
  importKeyMaterial,
  importParams,
  material,
  signWithTenant,
  verifiesWithOriginal,
  wrapWithOpenssl,
} from '../helpers/key-import.js';
import { type KmsDouble, startKmsDouble } from '../helpers/kms-double/kms-double.js';
import { callAction, makeTempDir } from '../helpers/service.js';

let double: KmsDouble;
let store: KyselyStore;
let kms: AwsKmsKeyStore;
let app: FastifyInstance;
let operator: string;
const dataDir = makeTempDir('sb-kms-import-');

beforeAll(async () => {
  double = await startKmsDouble();
  store = openSqliteStore(join(dataDir, 'signbridge.db'));
  await store.migrate();
  kms = new AwsKmsKeyStore({
    endpoint: double.url,
    region: 'us-east-1',
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    requestTimeoutMs: 20_000,
  });
  app = await buildApp({ store, keyStore: new KeyStores([kms]) });
  await app.ready();
  operator = (await createApiKey(store, 'operator', null, 'op')).token;
});
afterAll(async () => {
  await app?.close();
  await kms?.close();
  await store?.close();
  await double?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

let tenants = 0;
async function tenant() {
  const id = `kms-imp-${++tenants}`;
  expect((await callAction(app, operator, 'create_tenant', { tenant_id: id, key_spec: 'ECC_NIST_P256' })).status).toBe(
    201,
  );
  return {
    id,
    admin: (await createApiKey(store, 'admin', id, 'admin')).token,
    signer: (await createApiKey(store, 'signer', id, 'ci')).token,
  };
}

const CASES: [KeySpec, WrappingAlgorithm, WrappingKeySpec, 'openssl' | 'node'][] = [
  ['RSA_2048', 'RSA_AES_KEY_WRAP_SHA_256', 'RSA_3072', 'openssl'],
  ['RSA_3072', 'RSA_AES_KEY_WRAP_SHA_1', 'RSA_2048', 'node'],
  ['ECC_NIST_P256', 'RSAES_OAEP_SHA_256', 'RSA_2048', 'openssl'],
  ['ECC_NIST_P521', 'RSAES_OAEP_SHA_1', 'RSA_3072', 'node'],
  ['ECC_NIST_P384', 'RSA_AES_KEY_WRAP_SHA_256', 'RSA_4096', 'node'],
  ['ML_DSA_65', 'RSA_AES_KEY_WRAP_SHA_256', 'RSA_2048', 'node'],
  ['SM2', 'RSAES_OAEP_SHA_256', 'RSA_2048', 'openssl'],
];

describe('key import on AWS KMS, through the API', () => {
  it.each(
    CASES,
  )('%s wrapped with %s under %s (by %s): imported in KMS, signs, verifies with the original key', async (spec, algorithm, wrappingKeySpec, wrapper) => {
    const t = await tenant();
    const key = material(spec);
    const params = await importParams(app, t.admin, t.id, spec, algorithm, wrappingKeySpec);
    expect(params.status, JSON.stringify(params.body)).toBe(200);
    const wrappingPublicKey = Buffer.from(params.body.public_key as string, 'base64');
    const blob =
      wrapper === 'openssl'
        ? wrapWithOpenssl(wrappingPublicKey, algorithm, key.pkcs8)
        : wrapKeyMaterial(wrappingPublicKey, algorithm, key.pkcs8);
    const imported = await importKeyMaterial(app, t.admin, t.id, {
      kms_key_id: params.body.kms_key_id,
      import_token: params.body.import_token,
      encrypted_key_material: blob.toString('base64'),
    });
    expect(imported.status, JSON.stringify(imported.body)).toBe(200);
    const pub = await callAction(app, t.admin, 'get_public_key', { tenant_id: t.id });
    expect(pub.body).toMatchObject({ key_spec: spec, current: true, key_store: 'aws-kms' });
    expect(pub.body.public_key_pem).toBe(key.publicKeyPem);
    const signed = await signWithTenant(app, t.signer, t.id, spec, key.publicKeyPem);
    expect(signed.status, JSON.stringify(signed.body)).toBe(200);
    expect(verifiesWithOriginal(spec, key.publicKeyPem, signed.signature)).toBe(true);
    // The double saw KMS's own import calls: the key exists there with origin EXTERNAL.
    expect(double.calls.get('ImportKeyMaterial') ?? 0).toBeGreaterThan(0);
  });

  it('answers a tampered blob with invalid_ciphertext from KMS and keeps the key awaiting material', async () => {
    const t = await tenant();
    const key = material('ECC_NIST_P256');
    const params = await importParams(app, t.admin, t.id, 'ECC_NIST_P256', 'RSAES_OAEP_SHA_256', 'RSA_2048');
    const blob = wrapKeyMaterial(
      Buffer.from(params.body.public_key as string, 'base64'),
      'RSAES_OAEP_SHA_256',
      key.pkcs8,
    );
    const bad = Buffer.from(blob);
    bad.writeUInt8(bad.readUInt8(10) ^ 1, 10);
    const body = { kms_key_id: params.body.kms_key_id, import_token: params.body.import_token };
    const refused = await importKeyMaterial(app, t.admin, t.id, {
      ...body,
      encrypted_key_material: bad.toString('base64'),
    });
    expect(refused.status).toBe(400);
    expect(refused.body.error).toBe('invalid_ciphertext');
    const before = await callAction(app, t.admin, 'get_public_key', { tenant_id: t.id });
    expect(before.body.key_spec).toBe('ECC_NIST_P256');
    expect(before.body.public_key_pem).not.toBe(key.publicKeyPem);
    // The right blob with the same token still imports.
    const ok = await importKeyMaterial(app, t.admin, t.id, {
      ...body,
      encrypted_key_material: blob.toString('base64'),
    });
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
  });
});
