// The service on "another PKCS#11 HSM": a token made outside signbridge (softhsm2-util, as an HSM admin would),
// reached only through the keyStore configuration block (module path, token label, PIN file). It also covers
// signThreads: 0, the mode for modules that must be called from one thread (C_Sign on libuv's pool).
import { execFileSync } from 'node:child_process';
import { createHash, createPublicKey, verify } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { findSoftHsmModule } from '../../src/keys/pkcs11/softhsm.js';
import { createApiKeyCli, postAction, runCli, type ServerProcess, startServerProcess } from '../helpers/cli.js';
import { makeTempDir } from '../helpers/service.js';

const dir = makeTempDir('sb-hsm-');
const conf = join(dir, 'softhsm2.conf');
let server: ServerProcess;

beforeAll(async () => {
  mkdirSync(join(dir, 'tokens'), { mode: 0o700 });
  writeFileSync(conf, `directories.tokendir = ${join(dir, 'tokens')}\nobjectstore.backend = file\nlog.level = ERROR\n`);
  execFileSync(
    'softhsm2-util',
    ['--init-token', '--free', '--label', 'vendor-token', '--pin', '246810', '--so-pin', '13579'],
    {
      env: { ...process.env, SOFTHSM2_CONF: conf },
      stdio: 'ignore',
    },
  );
  writeFileSync(join(dir, 'hsm.pin'), '246810\n', { mode: 0o600 });
  const config = join(dir, 'signbridge.yaml');
  writeFileSync(
    config,
    `dataDir: ${join(dir, 'data')}\nkeyStore:\n  type: pkcs11\n  module: ${findSoftHsmModule()}\n  tokenLabel: vendor-token\n  pinFile: ${join(dir, 'hsm.pin')}\n  sessions: 2\n  signThreads: 0\n`,
  );
  server = await startServerProcess(['--config', config], { SOFTHSM2_CONF: conf });
});
afterAll(async () => {
  await server?.stop();
});

it('creates keys in the configured token and signs with them', async () => {
  const operator = createApiKeyCli(join(dir, 'data'), 'operator');
  const call = (action: string, token: string, body: object) => postAction(server.url, action, token, body);
  expect((await call('create_tenant', operator, { tenant_id: 'ext', key_spec: 'RSA_3072' })).status).toBe(201);
  const signer = createApiKeyCli(join(dir, 'data'), 'signer', 'ext');
  const message = Buffer.from('vendor hsm');
  const res = await call('sign', signer, {
    tenant_id: 'ext',
    algorithm: 'RSASSA_PSS_SHA_256',
    hash: createHash('sha256').update(message).digest('base64'),
  });
  expect(res.status).toBe(200);
  const signature = res.body.signature as string;
  const pub = await call('get_public_key', signer, { tenant_id: 'ext' });
  const key = createPublicKey(pub.body.public_key_pem as string);
  expect(verify('sha256', message, { key, padding: 6, saltLength: 32 }, Buffer.from(signature, 'base64'))).toBe(true);
  // The key lives in the vendor token: the HSM's own tool lists it.
  const objects = execFileSync(
    'pkcs11-tool',
    [
      '--module',
      findSoftHsmModule(),
      '--token-label',
      'vendor-token',
      '--login',
      '--pin',
      '246810',
      '--list-objects',
      '--type',
      'privkey',
    ],
    {
      env: { ...process.env, SOFTHSM2_CONF: conf },
      encoding: 'utf8',
    },
  );
  expect(objects).toMatch(/Private Key Object; RSA/);
  expect(objects).toContain('label:      ext/');
});

it('refuses to start when the token does not exist, naming the tokens present', () => {
  const config = join(dir, 'wrong.yaml');
  writeFileSync(
    config,
    `dataDir: ${join(dir, 'data2')}\nkeyStore: {type: pkcs11, module: ${findSoftHsmModule()}, tokenLabel: nope, pin: "1"}\n`,
  );
  const res = runCli(['server', '--config', config, '--listen', '127.0.0.1:0'], { SOFTHSM2_CONF: conf });
  expect(res.code).not.toBe(0);
  expect(res.stderr).toContain('no PKCS#11 token labelled "nope"');
  expect(res.stderr).toContain('"vendor-token"');
});
