// A deployment moves from the embedded default to AWS KMS (the KMS double): the service is started on SoftHSM,
// tenants are made there (an EC key in the token, an ML-DSA key in the software store it seals), then restarted
// with SIGNBRIDGE_KEY_STORE=aws-kms. The old tenants keep signing from the token, new keys (new tenants and
// rotations) go to KMS, and the in-process daemon opens the same data dir on aws-kms and signs both kinds.
// KMS is found the SDK's standard way here: AWS_ENDPOINT_URL_KMS, AWS_REGION and credentials in the environment.
import { createHash } from 'node:crypto';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InProcessUpstream } from '../../daemon/upstream/in-process-upstream.js';
import { createApiKey } from '../../src/auth/api-keys.js';
import { resolveConfig } from '../../src/config/config.js';
import { type RunningServer, startServer } from '../../src/server.js';
import type { KyselyStore } from '../../src/store/kysely-store.js';
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { signingInput, verifiesIndependently } from '../helpers/independent-verify.js';
import { type KmsDouble, startKmsDouble } from '../helpers/kms-double/kms-double.js';
import { callAction, makeTempDir } from '../helpers/service.js';

const dataDir = makeTempDir('sb-kms-move-');
const message = Buffer.from('signed before and after the move to KMS\n');
let double: KmsDouble;
let store: KyselyStore;

beforeAll(async () => {
  double = await startKmsDouble();
  Object.assign(process.env, {
    AWS_ENDPOINT_URL_KMS: double.url,
    AWS_REGION: 'us-east-1',
    AWS_ACCESS_KEY_ID: 'test',
    AWS_SECRET_ACCESS_KEY: 'test',
  });
});
afterAll(async () => {
  await store?.close();
  await double?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

async function start(env: NodeJS.ProcessEnv): Promise<RunningServer> {
  const config = resolveConfig({ dataDir, listen: '127.0.0.1:0', env: { SIGNBRIDGE_LOG_LEVEL: 'silent', ...env } });
  return startServer(config);
}

async function signAndVerify(server: RunningServer, tenant: string, spec: 'ECC_NIST_P256' | 'ML_DSA_65' | 'RSA_2048') {
  const signer = (await createApiKey(store, 'signer', tenant, 'ci')).token;
  const pub = await callAction(server.app, signer, 'get_public_key', { tenant_id: tenant });
  expect(pub.status).toBe(200);
  const pem = pub.body.public_key_pem as string;
  const algorithm =
    spec === 'ML_DSA_65' ? 'ML_DSA_SHAKE_256' : spec === 'RSA_2048' ? 'RSASSA_PSS_SHA_256' : 'ECDSA_SHA_256';
  const hash = signingInput(pem, algorithm, message);
  const signed = await callAction(server.app, signer, 'sign', {
    tenant_id: tenant,
    algorithm,
    hash: hash.toString('base64'),
  });
  expect(signed.status, JSON.stringify(signed.body)).toBe(200);
  const signature = Buffer.from(signed.body.signature as string, 'base64');
  expect(verifiesIndependently(spec, pem, algorithm, message, signature)).toBe(true);
  return pem;
}

describe('moving from the embedded default to AWS KMS', () => {
  const pems = new Map<string, string>();

  it('tenants made on SoftHSM sign there', async () => {
    const server = await start({});
    try {
      store = openSqliteStore(join(dataDir, 'signbridge.db'));
      const operator = (await createApiKey(store, 'operator', null, 'op')).token;
      for (const [tenant, spec] of [
        ['before-ec', 'ECC_NIST_P256'],
        ['before-pq', 'ML_DSA_65'],
      ] as const) {
        expect(
          (await callAction(server.app, operator, 'create_tenant', { tenant_id: tenant, key_spec: spec })).status,
        ).toBe(201);
        pems.set(tenant, await signAndVerify(server, tenant, spec));
      }
      expect((await store.tenants.listKeys('before-ec')).map((k) => k.keyStore)).toEqual(['pkcs11']);
      expect(double.keys.size).toBe(0);
    } finally {
      await server.close();
    }
  });

  it('restarted on aws-kms: old tenants still sign from the token; new keys go to KMS; /readyz checks both', async () => {
    const server = await start({ SIGNBRIDGE_KEY_STORE: 'aws-kms' });
    try {
      expect((await server.app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
      for (const [tenant, spec] of [
        ['before-ec', 'ECC_NIST_P256'],
        ['before-pq', 'ML_DSA_65'],
      ] as const) {
        expect(await signAndVerify(server, tenant, spec)).toBe(pems.get(tenant));
      }
      const operator = (await createApiKey(store, 'operator', null, 'op')).token;
      const created = await callAction(server.app, operator, 'create_tenant', {
        tenant_id: 'after',
        key_spec: 'RSA_2048',
      });
      expect(created.status).toBe(201);
      await signAndVerify(server, 'after', 'RSA_2048');
      expect((await store.tenants.listKeys('after')).map((k) => k.keyStore)).toEqual(['aws-kms']);
      // A rotation of an old tenant makes its new key in KMS; the old version stays readable.
      const admin = (await createApiKey(store, 'admin', 'before-ec', 'admin')).token;
      expect((await callAction(server.app, admin, 'rotate_key', { tenant_id: 'before-ec' })).status).toBe(200);
      const keys = await store.tenants.listKeys('before-ec');
      expect(keys.map((k) => k.keyStore)).toEqual(['pkcs11', 'aws-kms']);
      pems.set('before-ec', await signAndVerify(server, 'before-ec', 'ECC_NIST_P256'));
      const old = await callAction(server.app, admin, 'get_public_key', {
        tenant_id: 'before-ec',
        key_id: keys[0]?.id,
      });
      expect(old.status).toBe(200);
      expect(double.keys.size).toBe(2);
    } finally {
      await server.close();
    }
  });

  it('the in-process daemon on the same data dir, configured for aws-kms, signs KMS and token keys', async () => {
    const configFile = join(dataDir, 'service.yaml');
    writeFileSync(configFile, 'keyStore:\n  type: aws-kms\n');
    const upstream = await InProcessUpstream.open({ dataDir, configFile });
    try {
      expect(upstream.description).toMatch(/aws-kms.*pkcs11/);
      for (const [tenant, spec] of [
        ['after', 'RSA_2048'],
        ['before-pq', 'ML_DSA_65'],
      ] as const) {
        const key = await upstream.getPublicKey(tenant);
        const algorithm = spec === 'ML_DSA_65' ? 'ML_DSA_SHAKE_256' : 'RSASSA_PKCS1_V1_5_SHA_256';
        const digest =
          spec === 'ML_DSA_65'
            ? signingInput(key.publicKeyPem, algorithm, message)
            : createHash('sha256').update(message).digest();
        const result = await upstream.pkcs11Sign({ tenantId: tenant, digest, keySpec: spec, pss: false, context: {} });
        if (result.kind !== 'signed') throw new Error(`not signed: ${JSON.stringify(result)}`);
        expect(verifiesIndependently(spec, key.publicKeyPem, algorithm, message, result.signature)).toBe(true);
      }
    } finally {
      await upstream.close();
    }
  });
});
