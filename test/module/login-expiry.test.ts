// The real module (pkcs11js, in this process) -> a real `signbridge daemon` whose key comes from `signbridge login`
// -> a real `signbridge server` (both child processes: the module's calls block this process). A key that expired
// since the module listed its tokens, and a key the service revoked, both fail C_Sign with CKR_USER_NOT_LOGGED_IN,
// and the module's log says to run `signbridge login`.
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash, createPublicKey, verify } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pkcs11js from 'pkcs11js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultLoginFiles, type LoginFiles, writeLogin } from '../../daemon/login-files.js';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import { ckr } from '../helpers/ckr.js';
import { CLI, createApiKeyCli, postAction, runCli, type ServerProcess, startServerProcess } from '../helpers/cli.js';
import { makeTempDir } from '../helpers/service.js';
import { waitForSocket } from './harness.js';

const P = pkcs11js;
const TENANT = 'login-p256';
let server: ServerProcess;
let daemon: ChildProcess;
let dataDir: string;
let files: LoginFiles;
let moduleLog: string;
let publicKeyPem: string;
let lib: pkcs11js.PKCS11;
let session: Buffer;
let key: Buffer;

const signIn = (apiKey: string, expiresAt: string) =>
  writeLogin(files, apiKey, {
    service_url: server.url,
    tenant_id: TENANT,
    roles: ['signer'],
    email: 'alice@example.com',
    expires_at: expiresAt,
    created_at: new Date().toISOString(),
  });
const later = () => new Date(Date.now() + 2 * 3600_000).toISOString();

function sign(message: Buffer): Buffer {
  lib.C_SignInit(session, { mechanism: P.CKM_ECDSA }, key);
  return lib.C_Sign(session, createHash('sha256').update(message).digest(), Buffer.alloc(64));
}

beforeAll(async () => {
  const dir = makeTempDir('sb-login-module-');
  dataDir = join(dir, 'data');
  server = await startServerProcess(['--data-dir', dataDir], { SIGNBRIDGE_LOG_LEVEL: 'warn' });
  const operator = createApiKeyCli(dataDir, 'operator');
  const created = await postAction(server.url, 'create_tenant', operator, {
    tenant_id: TENANT,
    key_spec: 'ECC_NIST_P256',
  });
  expect(created.status).toBe(201);
  const signer = createApiKeyCli(dataDir, 'signer', TENANT);
  publicKeyPem = (await postAction(server.url, 'get_public_key', signer, { tenant_id: TENANT })).body
    .public_key_pem as string;

  const env = { XDG_CONFIG_HOME: join(dir, 'config') };
  files = defaultLoginFiles(env);
  signIn(signer, later());
  const socket = join(makeTempDir('sbm-'), 'run', 'daemon.sock');
  const config = join(dir, 'daemon.yaml');
  // No key cache: each signature's key look-up goes to the service.
  writeFileSync(config, `socket: ${socket}\nlogLevel: warn\ncacheSeconds: 0\n`);
  daemon = spawn(process.execPath, [CLI, 'daemon', '--config', config], {
    env: { ...process.env, ...env, SIGNBRIDGE_SERVICE_URL: '', SIGNBRIDGE_API_KEY: '', SIGNBRIDGE_API_KEY_FILE: '' },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  await waitForSocket(socket);

  moduleLog = join(dir, 'module.log');
  process.env.SIGNBRIDGE_SOCKET = socket;
  process.env.SIGNBRIDGE_LOG = `error:${moduleLog}`;
  lib = new P.PKCS11();
  lib.load(MODULE_PATH);
  lib.C_Initialize({ flags: P.CKF_OS_LOCKING_OK });
  const [slot] = lib.C_GetSlotList(true);
  session = lib.C_OpenSession(slot as Buffer, P.CKF_SERIAL_SESSION);
  lib.C_FindObjectsInit(session, [{ type: P.CKA_CLASS, value: P.CKO_PRIVATE_KEY }]);
  [key] = lib.C_FindObjects(session, 1) as [Buffer];
  lib.C_FindObjectsFinal(session);
}, 180_000);

afterAll(async () => {
  try {
    lib?.C_Finalize();
  } catch {
    // not initialised
  }
  if (daemon && daemon.exitCode === null) {
    await new Promise<void>((resolve) => {
      daemon.once('exit', () => resolve());
      daemon.kill('SIGTERM');
    });
  }
  await server?.stop();
});

describe('C_Sign with the key from `signbridge login`', () => {
  it('signs while the key is valid', () => {
    expect(key).toBeDefined();
    const message = Buffer.from('signed while logged in');
    const raw = sign(message);
    expect(raw.length).toBe(64);
    expect(verify('sha256', message, { key: createPublicKey(publicKeyPem), dsaEncoding: 'ieee-p1363' }, raw)).toBe(
      true,
    );
  });

  it('an expired key: CKR_USER_NOT_LOGGED_IN, and the log says to run signbridge login', () => {
    const signer = readFileSync(files.keyFile, 'utf8').trim();
    signIn(signer, new Date(Date.now() - 60_000).toISOString());
    expect(ckr(() => sign(Buffer.from('after expiry')))).toBe('CKR_USER_NOT_LOGGED_IN');
    const log = readFileSync(moduleLog, 'utf8');
    expect(log).toMatch(
      /UNAUTHENTICATED: the API key from `signbridge login` \(tenant login-p256, alice@example\.com\) expired at/,
    );
    expect(log).toMatch(/run `signbridge login --service-url http:\/\/127\.0\.0\.1:\d+` to sign in again/);
    expect(log).not.toContain(signer);

    // A new login: the same loaded module signs again, no restart of anything.
    signIn(createApiKeyCli(dataDir, 'signer', TENANT), later());
    expect(sign(Buffer.from('after a new login')).length).toBe(64);
  });

  it('a key the service revoked: CKR_USER_NOT_LOGGED_IN, and the log says to run signbridge login', () => {
    const signer = readFileSync(files.keyFile, 'utf8').trim();
    const id = /^sbk_([0-9a-f]{16})_/.exec(signer)?.[1] as string;
    const revoked = runCli(['admin', 'api-key', 'revoke', id, '--data-dir', dataDir]);
    expect(revoked.code, revoked.stderr).toBe(0);
    expect(ckr(() => sign(Buffer.from('after revocation')))).toBe('CKR_USER_NOT_LOGGED_IN');
    expect(readFileSync(moduleLog, 'utf8')).toMatch(
      /UNAUTHENTICATED: unauthorized: [^\n]*; run `signbridge login` to sign in again/,
    );
  });
});
