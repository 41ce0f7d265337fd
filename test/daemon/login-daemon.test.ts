// A real `signbridge daemon` (child process) started with nothing but what `signbridge login` stored: the login's
// service URL (the device-flow stand-in, which forwards /v1 to the real service of this file), tenant and key. New
// logins (a rotated key, another tenant) are picked up without a restart; a key the service refuses and an expired
// key say to run `signbridge login`; the log warns before the key expires.
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultLoginFiles, writeLogin } from '../../daemon/login-files.js';
import { CLI } from '../helpers/cli.js';
import { loginEnv, runCliChild } from '../helpers/cli-child.js';
import { type StandIn, startDeviceFlowStandIn } from '../helpers/device-flow-stand-in.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';
import { waitForSocket } from '../module/harness.js';
import { ensurePeercredBuilt, tempDir } from './helpers.js';

let svc: TestService;
let standIn: StandIn;
let env: NodeJS.ProcessEnv;
let socket: string;
let daemonLog = '';
let stopDaemon: () => Promise<void>;
const keys: Record<string, string> = {};

const login = (tenant: string, apiKey: string, expiresInS: number) => {
  standIn.grant = { apiKey, tenantId: tenant, roles: ['signer'], email: 'alice@example.com', expiresInS };
  return runCliChild(['login', '--service-url', standIn.url, '--no-browser'], env);
};
const status = () => runCliChild(['status', '--socket', socket], env);

/** Waits until the daemon's log matches (the expiry check runs right after a change is seen). */
async function daemonLogged(pattern: RegExp, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!pattern.test(daemonLog)) {
    if (Date.now() > deadline) throw new Error(`daemon log without ${pattern}:\n${daemonLog}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

beforeAll(async () => {
  ensurePeercredBuilt();
  svc = await startTestService();
  const url = await svc.app.listen({ host: '127.0.0.1', port: 0 });
  for (const [tenant, spec] of [
    ['acme', 'ECC_NIST_P256'],
    ['beta', 'RSA_2048'],
  ] as const) {
    expect(
      (await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: tenant, key_spec: spec })).status,
    ).toBe(201);
  }
  keys.acme1 = await svc.apiKey('signer', 'acme');
  keys.acme2 = await svc.apiKey('signer', 'acme');
  keys.beta = await svc.apiKey('signer', 'beta');
  standIn = await startDeviceFlowStandIn({ intervalS: 0.1, upstream: url });
  const dir = tempDir('sbd-login-');
  socket = join(dir, 'run', 'daemon.sock');
  env = loginEnv(dir);
}, 120_000);

afterAll(async () => {
  await stopDaemon?.();
  await standIn?.close();
  await svc?.close();
});

describe('the daemon follows `signbridge login`', () => {
  it('starts from the login alone and picks up a new key and a new tenant without a restart', async () => {
    const first = await login('acme', keys.acme1 as string, 12 * 3600);
    expect(first.code, first.stderr).toBe(0);

    // No service, tenant or key: everything comes from the login. (No key cache, so each status asks the service.)
    const config = join(tempDir('sbd-login-conf-'), 'daemon.yaml');
    writeFileSync(config, `socket: ${socket}\nlogLevel: info\ncacheSeconds: 0\n`);
    const daemon = spawn(process.execPath, [CLI, 'daemon', '--config', config], { env: { ...process.env, ...env } });
    daemon.stderr.on('data', (c: Buffer) => {
      daemonLog += c.toString();
    });
    const exited = new Promise<void>((resolve) => daemon.once('exit', () => resolve()));
    stopDaemon = async () => {
      if (daemon.exitCode === null) {
        daemon.kill('SIGTERM');
        await exited;
      }
    };
    await waitForSocket(socket).catch((err: Error) => {
      throw new Error(`${err.message}\n${daemonLog}`);
    });

    let s = await status();
    expect(s.code, s.stdout + s.stderr + daemonLog).toBe(0);
    expect(s.stdout).toMatch(/token "acme" \(tenant acme\)/);
    expect(s.stdout).toMatch(/ECC_NIST_P256/);
    expect(s.stdout).toMatch(/login: {3}alice@example\.com, tenant acme \(signer\)/);

    // The key is revoked at the service: the daemon says to sign in again.
    const id = /^sbk_([0-9a-f]{16})_/.exec(keys.acme1 as string)?.[1] as string;
    expect(await svc.store.apiKeys.revoke(id, new Date().toISOString())).toBe(true);
    s = await status();
    expect(s.code).toBe(1);
    expect(s.stdout).toMatch(/UNAUTHENTICATED: unauthorized: .*; run `signbridge login` to sign in again/);

    // A new login (rename over the old files) works at the next request, and its near expiry is warned about.
    const second = await login('acme', keys.acme2 as string, 30 * 60);
    expect(second.code, second.stderr).toBe(0);
    s = await status();
    expect(s.code, s.stdout + daemonLog).toBe(0);
    expect(s.stdout).toMatch(/token "acme" \(tenant acme\)/);
    await daemonLogged(/expires in (29|30) min: run `signbridge login` to renew it/);

    // A login for another tenant: the daemon now exposes that tenant instead.
    const third = await login('beta', keys.beta as string, 12 * 3600);
    expect(third.code, third.stderr).toBe(0);
    s = await status();
    expect(s.code, s.stdout + daemonLog).toBe(0);
    expect(s.stdout).toMatch(/token "beta" \(tenant beta\)/);
    expect(s.stdout).toMatch(/RSA_2048/);
    expect(s.stdout).not.toMatch(/tenant acme\)/);
    await daemonLogged(/new login: now serving another tenant/);
    expect(daemon.exitCode).toBe(null); // the same process all along
  });

  it('an expired key is refused before it reaches the service, with a message that says to run login', async () => {
    const files = defaultLoginFiles(env);
    writeLogin(files, keys.beta as string, {
      service_url: standIn.url,
      tenant_id: 'beta',
      roles: ['signer'],
      email: 'alice@example.com',
      expires_at: new Date(Date.now() - 1000).toISOString(),
      created_at: new Date().toISOString(),
    });
    const s = await status();
    expect(s.code).toBe(1);
    expect(s.stdout).toMatch(
      /UNAUTHENTICATED: the API key from `signbridge login` \(tenant beta, alice@example\.com\) expired at .*: run `signbridge login --service-url http:\/\/127\.0\.0\.1:\d+` to sign in again/,
    );
    await daemonLogged(/the API key from `signbridge login` has expired/);
    expect(daemonLog).not.toContain(keys.beta as string); // never a key in a log line
  });

  it('logout: the daemon then says it is not signed in', async () => {
    const out = await runCliChild(['logout'], env);
    expect(out.stderr).toMatch(/removed|revoked/);
    const s = await status();
    expect(s.code).toBe(1);
    expect(s.stdout).toMatch(/UNAUTHENTICATED: not signed in \(no key at .*\): run `signbridge login`/);
  });
});
