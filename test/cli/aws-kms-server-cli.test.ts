// `signbridge server` as a real process on AWS KMS (the KMS double in this process), configured only the standard
// ways: SIGNBRIDGE_KEY_STORE=aws-kms and the AWS SDK's own variables. The admin CLI makes the API keys on the same
// data dir; a tenant's key is made in KMS and signs; /readyz follows KMS's reachability; no SoftHSM token is made.
import { createHash, createPublicKey, verify } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createApiKeyCli, postAction, type ServerProcess, startServerProcess } from '../helpers/cli.js';
import { type KmsDouble, startKmsDouble } from '../helpers/kms-double/kms-double.js';
import { makeTempDir } from '../helpers/service.js';

const dataDir = makeTempDir('sb-kms-cli-');
let double: KmsDouble;
let server: ServerProcess;

beforeAll(async () => {
  double = await startKmsDouble();
  // Inherited by the server and the admin CLI processes.
  Object.assign(process.env, {
    SIGNBRIDGE_KEY_STORE: 'aws-kms',
    AWS_ENDPOINT_URL_KMS: double.url,
    AWS_REGION: 'us-east-1',
    AWS_ACCESS_KEY_ID: 'test',
    AWS_SECRET_ACCESS_KEY: 'test',
  });
  server = await startServerProcess(['--data-dir', dataDir]);
});
afterAll(async () => {
  await server?.stop();
  await double?.close();
});

it('creates the tenant key in KMS and signs with it; no SoftHSM token is made', async () => {
  const operator = createApiKeyCli(dataDir, 'operator');
  const created = await postAction(server.url, 'create_tenant', operator, {
    tenant_id: 'cli-kms',
    key_spec: 'ECC_NIST_P256',
  });
  expect(created.status).toBe(201);
  expect(double.keys.size).toBe(1);
  expect(double.aliases.has('alias/signbridge/cli-kms')).toBe(true);
  const signer = createApiKeyCli(dataDir, 'signer', 'cli-kms');
  const pub = await postAction(server.url, 'get_public_key', signer, { tenant_id: 'cli-kms' });
  const message = Buffer.from('signed by a service process on KMS');
  const hash = createHash('sha256').update(message).digest('base64');
  const signed = await postAction(server.url, 'sign', signer, {
    tenant_id: 'cli-kms',
    algorithm: 'ECDSA_SHA_256',
    hash,
  });
  expect(signed.status).toBe(200);
  const key = createPublicKey(String(pub.body.public_key_pem));
  expect(verify('sha256', message, key, Buffer.from(String(signed.body.signature), 'base64'))).toBe(true);
  expect(existsSync(join(dataDir, 'softhsm'))).toBe(false);
});

it('/readyz is 503 while KMS drops every connection and 200 again after', async () => {
  expect((await fetch(`${server.url}/readyz`)).status).toBe(200);
  double.addFault({ op: '*', kind: 'drop', times: -1 });
  try {
    const res = await fetch(`${server.url}/readyz`);
    expect(res.status).toBe(503);
    expect(await res.json()).toMatchObject({ key_store: 'unavailable' });
  } finally {
    double.clearFaults();
  }
  expect((await fetch(`${server.url}/readyz`)).status).toBe(200);
});
