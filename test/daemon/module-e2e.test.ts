// End to end through the real PKCS#11 module: pkcs11-tool loads build/native/libsignbridge-pkcs11.so, which talks
// to the daemon, which talks to the service. Skips (with the reason) until the C module is built.
import { execFile } from 'node:child_process';
import { createPublicKey } from 'node:crypto';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningDaemon } from '../../daemon/daemon.js';
import { ckaIdFor } from '../../daemon/key-id.js';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import { digestOf } from '../helpers/crypto.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';
import { ensurePeercredBuilt, remoteConfig, startTestDaemon } from './helpers.js';

const run = promisify(execFile);
// SIGNBRIDGE_TEST_PKCS11_MODULE: a module built elsewhere (e.g. a sanitizer build) instead of build/native.
const MODULE = process.env.SIGNBRIDGE_TEST_PKCS11_MODULE ?? MODULE_PATH;
const built = existsSync(MODULE);

describe.skipIf(!built)(`pkcs11-tool -> ${MODULE} -> daemon -> service`, () => {
  let svc: TestService;
  let daemon: RunningDaemon;
  let keyId: string;
  let pem: string;
  let dir: string;
  // Asynchronous child processes: the daemon and the service answer from this process.
  const tool = (...args: string[]) =>
    run('pkcs11-tool', ['--module', MODULE, ...args], {
      env: { ...process.env, SIGNBRIDGE_SOCKET: daemon.socketPath },
      encoding: 'utf8',
      timeout: 30_000,
    });

  beforeAll(async () => {
    ensurePeercredBuilt();
    svc = await startTestService();
    const url = await svc.app.listen({ host: '127.0.0.1', port: 0 });
    const created = await callAction(svc.app, svc.operator, 'create_tenant', {
      tenant_id: 'e2e',
      key_spec: 'ECC_NIST_P256',
    });
    expect(created.status).toBe(201);
    const signer = await svc.apiKey('signer', 'e2e');
    const pub = await callAction(svc.app, signer, 'get_public_key', { tenant_id: 'e2e' });
    keyId = pub.body.key_id as string;
    pem = pub.body.public_key_pem as string;
    daemon = await startTestDaemon(remoteConfig(url, [{ tenantId: 'e2e', label: 'e2e token', apiKey: signer }]));
    dir = mkdtempSync('/tmp/sbd-e2e-');
  });
  afterAll(async () => {
    await daemon?.close();
    await svc?.close();
  });

  it('lists the tenant as a token and its key by CKA_ID', async () => {
    const slots = await tool('--list-slots');
    expect(slots.stdout).toContain('e2e token');
    const objects = await tool('--list-objects');
    expect(objects.stdout.toLowerCase()).toContain(ckaIdFor(keyId).toString('hex'));
  });

  it('signs a digest with ECDSA; openssl verifies it', async () => {
    const message = Buffer.from('signed through the module');
    writeFileSync(join(dir, 'msg'), message);
    writeFileSync(join(dir, 'digest'), digestOf('ECDSA_SHA_256', message));
    writeFileSync(join(dir, 'pub.pem'), createPublicKey(pem).export({ type: 'spki', format: 'pem' }));
    await tool(
      '--sign',
      '--id',
      ckaIdFor(keyId).toString('hex'),
      '-m',
      'ECDSA',
      '--signature-format',
      'openssl',
      '--input-file',
      join(dir, 'digest'),
      '--output-file',
      join(dir, 'sig'),
    );
    const { stdout } = await run(
      'openssl',
      ['dgst', '-sha256', '-verify', join(dir, 'pub.pem'), '-signature', join(dir, 'sig'), join(dir, 'msg')],
      { encoding: 'utf8' },
    );
    expect(stdout.trim()).toBe('Verified OK');
  });
});

describe.skipIf(built)('pkcs11-tool end to end', () => {
  it.skip(`the PKCS#11 module is not built yet (${MODULE})`, () => undefined);
});
