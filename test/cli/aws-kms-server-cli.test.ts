// `signbridge server` as a real process on AWS KMS (the KMS double in this process), configured only the standard
// ways: SIGNBRIDGE_KEY_STORE=aws-kms and the AWS SDK's own variables. The admin CLI makes the API keys on the same
// data dir; a tenant's key is made in KMS and signs; /readyz follows KMS's reachability; no SoftHSM token is made.
import { createHash, createPublicKey, verify } from 'node:crypto';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createApiKeyCli, postAction, type ServerProcess, startServerProcess } from '../helpers/cli.js';
import { loginEnv, runCliChild } from '../helpers/cli-child.js';
import { material } from '../helpers/key-import.js';
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

it('signbridge key import brings a key into KMS through the service and proves it with a signature', async () => {
  const operator = createApiKeyCli(dataDir, 'operator');
  expect(
    (await postAction(server.url, 'create_tenant', operator, { tenant_id: 'cli-kms-imp', key_spec: 'ECC_NIST_P256' }))
      .status,
  ).toBe(201);
  const dir = makeTempDir('sb-kms-cli-import-');
  const file = (name: string, content: string | Buffer) => {
    const path = join(dir, name);
    writeFileSync(path, content, { mode: 0o600 });
    return path;
  };
  const adminFile = file('admin.key', createApiKeyCli(dataDir, 'admin', 'cli-kms-imp'));
  const signerFile = file('signer.key', createApiKeyCli(dataDir, 'signer', 'cli-kms-imp'));
  const m = material('ECC_NIST_P384');
  const keyFile = file('p384.der', m.pkcs8);
  const keysBefore = double.keys.size;
  const res = await runCliChild(
    [
      'key',
      'import',
      '--service-url',
      server.url,
      '--api-key-file',
      adminFile,
      '--signer-api-key-file',
      signerFile,
      '--tenant',
      'cli-kms-imp',
      '--key-file',
      keyFile,
    ],
    loginEnv(dir),
  );
  expect(res.code, res.stderr + res.stdout).toBe(0);
  expect(res.stdout).toMatch(/proven: a \S+ signature by key \S+ verifies/);
  // The key now lives in KMS (one more key there), and the service hands out the file's public half.
  expect(double.keys.size).toBe(keysBefore + 1);
  const pub = await postAction(server.url, 'get_public_key', createApiKeyCli(dataDir, 'admin', 'cli-kms-imp'), {
    tenant_id: 'cli-kms-imp',
  });
  expect(pub.body.public_key_pem).toBe(m.publicKeyPem);
});
