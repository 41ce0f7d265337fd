// `signbridge login`, `logout` and the login part of `status`, as a user runs them (the compiled CLI in a child
// process), against the device-flow stand-in (test/helpers/device-flow-stand-in.ts) that produces slow_down, 429,
// HTML 5xx, dropped connections, expiry and denial on demand. Each test has its own config folder
// (XDG_CONFIG_HOME) under a temp dir.
import {
  chmodSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { defaultLoginFiles, keyFingerprint, writeLogin } from '../../daemon/login-files.js';
import { runCliChild, startCli } from '../helpers/cli-child.js';
import { type StandIn, startDeviceFlowStandIn } from '../helpers/device-flow-stand-in.js';

const root = mkdtempSync(join(tmpdir(), 'sb-login-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let standIn: StandIn | undefined;
afterEach(async () => {
  await standIn?.close();
  standIn = undefined;
});

let n = 0;
/** A fresh XDG_CONFIG_HOME, and the environment that points the CLI at it (no browser, no daemon). */
function home() {
  const dir = join(root, `home-${++n}`);
  const env = {
    XDG_CONFIG_HOME: dir,
    BROWSER: '',
    DISPLAY: '',
    WAYLAND_DISPLAY: '',
    SIGNBRIDGE_SERVICE_URL: '',
    SIGNBRIDGE_SOCKET: join(dir, 'no-daemon.sock'),
  };
  return { env, files: defaultLoginFiles(env) };
}

const KEY = 'sbk_0123456789abcdef_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa';
const grant = (over: Partial<StandIn['grant']> = {}) => ({
  apiKey: KEY,
  tenantId: 'acme',
  roles: ['signer'],
  email: 'alice@example.com',
  expiresInS: 12 * 3600,
  ...over,
});
const gaps = (s: StandIn) => s.polls.slice(1).map((p, i) => p.at - (s.polls[i]?.at ?? 0));

describe('signbridge login', () => {
  it('runs the device flow, opens $BROWSER with the page, and stores a 0600 key and its metadata', async () => {
    standIn = await startDeviceFlowStandIn({ intervalS: 0.2 });
    standIn.script = ['pending', 'pending'];
    standIn.grant = grant();
    const { env, files } = home();
    const opened = join(root, `browser-${n}.txt`);
    const browser = join(root, `browser-${n}.sh`);
    writeFileSync(browser, `#!/bin/sh\necho "$@" > ${opened}\n`);
    chmodSync(browser, 0o755);

    const res = await runCliChild(['login', '--service-url', standIn.url, '--tenant', 'acme'], {
      ...env,
      BROWSER: browser,
    });
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).toBe(''); // nothing on stdout, the key least of all
    expect(res.stderr).not.toContain(KEY);
    expect(res.stderr).toContain(`${standIn.url}/device`);
    expect(res.stderr).toContain('BCDF-GHJK');
    expect(res.stderr).toMatch(/Signed in: alice@example\.com, tenant acme \(signer\)/);

    expect(statSync(files.dir).mode & 0o777).toBe(0o700);
    expect(statSync(files.keyFile).mode & 0o777).toBe(0o600);
    expect(readFileSync(files.keyFile, 'utf8').trim()).toBe(KEY);
    const meta = JSON.parse(readFileSync(files.metadataFile, 'utf8'));
    expect(meta).toMatchObject({
      service_url: standIn.url,
      tenant_id: 'acme',
      roles: ['signer'],
      email: 'alice@example.com',
      key_fingerprint: keyFingerprint(KEY),
    });
    expect(Date.parse(meta.expires_at) - Date.now()).toBeGreaterThan(11 * 3600 * 1000);
    expect(readFileSync(files.metadataFile, 'utf8')).not.toContain(KEY);
    expect(statSync(files.metadataFile).mode & 0o777).toBe(0o600);
    expect(readdirSync(files.dir).sort()).toEqual(['api-key', 'login.json']); // no temp files left behind

    expect(standIn.starts[0]).toMatchObject({ tenant_id: 'acme' });
    expect(String(standIn.starts[0]?.client_name)).toMatch(/^signbridge login on /);
    expect(standIn.polls.map((p) => p.answered)).toEqual(['pending', 'pending', 'grant']);
    for (const gap of gaps(standIn)) expect(gap).toBeGreaterThanOrEqual(190); // never faster than `interval`
    // The browser got the page with the code filled in (the page still asks to confirm it).
    expect(readFileSync(opened, 'utf8').trim()).toBe(`${standIn.url}/device?user_code=BCDF-GHJK`);
  });

  it('slow_down adds 5 s to the interval, for good', async () => {
    standIn = await startDeviceFlowStandIn({ intervalS: 0.2 });
    standIn.script = ['slow_down', 'pending'];
    standIn.grant = grant();
    const { env, files } = home();
    const res = await runCliChild(['login', '--service-url', standIn.url, '--no-browser'], env);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stderr).toMatch(/poll less often: every 5\.2 s/);
    expect(standIn.polls.map((p) => p.answered)).toEqual(['slow_down', 'pending', 'grant']);
    const [afterSlowDown, afterPending] = gaps(standIn);
    expect(afterSlowDown).toBeGreaterThanOrEqual(5100);
    expect(afterPending).toBeGreaterThanOrEqual(5100); // still slower after an ordinary answer
    expect(readFileSync(files.keyFile, 'utf8').trim()).toBe(KEY);
  }, 40_000);

  it('backs off on 429, an HTML 502 and a dropped connection, and goes on polling', async () => {
    standIn = await startDeviceFlowStandIn({ intervalS: 0.2 });
    standIn.script = ['429', 'html502', 'drop', 'pending'];
    standIn.grant = grant();
    const { env, files } = home();
    const res = await runCliChild(['login', '--service-url', standIn.url, '--no-browser'], env);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stderr).toMatch(/rate_limited: stand-in: too many requests\); trying again in 0\.4 s/);
    expect(res.stderr).toMatch(/HTTP 502 without a JSON body\); trying again in 0\.8 s/);
    expect(standIn.polls.map((p) => p.answered)).toEqual(['429', 'html502', 'drop', 'pending', 'grant']);
    const g = gaps(standIn);
    // Exponential: 0.4 s after the 429, 0.8 s after the 502, 1.6 s after the drop; then the interval again.
    expect(g[0]).toBeGreaterThanOrEqual(390);
    expect(g[1]).toBeGreaterThanOrEqual(790);
    expect(g[2]).toBeGreaterThanOrEqual(1590);
    expect(existsSync(files.keyFile)).toBe(true);
  });

  it('retries the start on an HTML 503 and then signs in', async () => {
    standIn = await startDeviceFlowStandIn({ intervalS: 0.1, startFailures: 2 });
    standIn.grant = grant();
    const { env, files } = home();
    const res = await runCliChild(['login', '--service-url', standIn.url, '--no-browser'], env);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stderr).toMatch(/HTTP 503 without a JSON body\); trying again in 1 s/);
    expect(res.stderr).toMatch(/HTTP 503 without a JSON body\); trying again in 2 s/);
    expect(res.stderr).not.toMatch(/opening a browser/); // --no-browser
    expect(standIn.starts).toHaveLength(1);
    expect(existsSync(files.keyFile)).toBe(true);
  });

  it('access_denied: a clear message, exit 1, nothing written', async () => {
    standIn = await startDeviceFlowStandIn({ intervalS: 0.2 });
    standIn.script = ['pending', 'denied'];
    const { env, files } = home();
    const res = await runCliChild(['login', '--service-url', standIn.url, '--no-browser'], env);
    expect(res.code).toBe(1);
    expect(res.stderr).toMatch(/signbridge login: the sign-in was denied \(access_denied/);
    expect(existsSync(files.keyFile)).toBe(false);
    expect(existsSync(files.metadataFile)).toBe(false);
  });

  it('expired_token: says to run login again, exit 1, nothing written', async () => {
    standIn = await startDeviceFlowStandIn({ intervalS: 0.2 });
    standIn.script = ['expired'];
    const { env, files } = home();
    const res = await runCliChild(['login', '--service-url', standIn.url, '--no-browser'], env);
    expect(res.code).toBe(1);
    expect(res.stderr).toMatch(/the code expired before the sign-in was confirmed.*run `signbridge login` again/);
    expect(existsSync(files.keyFile)).toBe(false);
  });

  it('polls for the whole expires_in, then stops with the expiry message', async () => {
    standIn = await startDeviceFlowStandIn({ intervalS: 0.3, expiresInS: 2 });
    const { env, files } = home();
    const started = Date.now();
    const res = await runCliChild(['login', '--service-url', standIn.url, '--no-browser'], env);
    expect(res.code).toBe(1);
    expect(res.stderr).toMatch(/the code expired/);
    expect(Date.now() - started).toBeGreaterThanOrEqual(2000);
    expect(standIn.polls.length).toBeGreaterThanOrEqual(3);
    expect(existsSync(files.keyFile)).toBe(false);
  });

  it('Ctrl-C (SIGINT) while waiting stops at once, exit 130, nothing written', async () => {
    standIn = await startDeviceFlowStandIn({ intervalS: 0.2 });
    const { env, files } = home();
    const cli = startCli(['login', '--service-url', standIn.url, '--no-browser'], env);
    await cli.waitForStderr(/waiting for the confirmation/);
    cli.child.kill('SIGINT');
    const res = await cli.done;
    expect(res.code).toBe(130);
    expect(res.stderr).toMatch(/cancelled; nothing was written/);
    expect(existsSync(files.keyFile)).toBe(false);
    expect(existsSync(files.metadataFile)).toBe(false);
  });

  it('a service without an identity provider: says what its operator must configure', async () => {
    standIn = await startDeviceFlowStandIn({ notConfigured: true });
    const { env, files } = home();
    const res = await runCliChild(['login', '--service-url', standIn.url, '--no-browser'], env);
    expect(res.code).toBe(1);
    expect(res.stderr).toMatch(/no identity provider configured \(oauth_not_configured/);
    expect(res.stderr).toMatch(/SIGNBRIDGE_OIDC_ISSUER, SIGNBRIDGE_OIDC_CLIENT_ID, SIGNBRIDGE_OIDC_CLIENT_SECRET/);
    expect(existsSync(files.keyFile)).toBe(false);
  });

  it('refuses plain http to another host and a missing --service-url (exit 2, no network)', async () => {
    const { env } = home();
    const http = await runCliChild(['login', '--service-url', 'http://signbridge.example.com'], env);
    expect(http.code).toBe(2);
    expect(http.stderr).toMatch(/plain http to another host/);
    const none = await runCliChild(['login'], env);
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/pass --service-url URL/);
  });

  it('a second login replaces the first (the service URL is remembered)', async () => {
    standIn = await startDeviceFlowStandIn({ intervalS: 0.1 });
    standIn.grant = grant();
    const { env, files } = home();
    expect((await runCliChild(['login', '--service-url', standIn.url, '--no-browser'], env)).code).toBe(0);
    const second = `${KEY.slice(0, -1)}b`;
    standIn.grant = grant({ apiKey: second, tenantId: 'beta', email: 'bob@example.com' });
    const res = await runCliChild(['login', '--no-browser'], env);
    expect(res.code, res.stderr).toBe(0);
    expect(readFileSync(files.keyFile, 'utf8').trim()).toBe(second);
    expect(JSON.parse(readFileSync(files.metadataFile, 'utf8'))).toMatchObject({ tenant_id: 'beta' });
  });
});

describe('signbridge logout and status', () => {
  const signIn = (files: ReturnType<typeof defaultLoginFiles>, url: string, expiresAt: string | null) =>
    writeLogin(files, KEY, {
      service_url: url,
      tenant_id: 'acme',
      roles: ['signer'],
      email: 'alice@example.com',
      expires_at: expiresAt,
      created_at: new Date().toISOString(),
    });

  it('logout revokes the key at the service and removes both files', async () => {
    standIn = await startDeviceFlowStandIn();
    standIn.keys.set(KEY, { ...grant(), expiresAt: null });
    const { env, files } = home();
    signIn(files, standIn.url, null);
    const res = await runCliChild(['logout'], env);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stderr).toMatch(/the key was revoked at/);
    expect(standIn.revoked).toEqual([KEY]);
    expect(existsSync(files.keyFile)).toBe(false);
    expect(existsSync(files.metadataFile)).toBe(false);
    const again = await runCliChild(['logout'], env);
    expect(again.code).toBe(0);
    expect(again.stderr).toMatch(/not signed in/);
  });

  it('logout with the service down: removes the files, says the key is still valid, exit 1', async () => {
    const closedPort = await freePort();
    const { env, files } = home();
    const expiresAt = new Date(Date.now() + 3600_000).toISOString();
    signIn(files, `http://127.0.0.1:${closedPort}`, expiresAt);
    const res = await runCliChild(['logout'], env);
    expect(res.code).toBe(1);
    expect(res.stderr).toMatch(
      /the key could not be revoked at http:\/\/127\.0\.0\.1:\d+ \(unreachable: ECONNREFUSED\)/,
    );
    expect(res.stderr).toContain(`it stays valid until ${expiresAt}`);
    expect(existsSync(files.keyFile)).toBe(false);
    expect(existsSync(files.metadataFile)).toBe(false);
  });

  it('status shows who is signed in from the service, and falls back to login.json when it is away', async () => {
    standIn = await startDeviceFlowStandIn();
    const { env, files } = home();
    const expiresAt = new Date(Date.now() + 2 * 3600_000).toISOString();
    // The service knows better than the file: its answer wins (roles differ on purpose).
    standIn.keys.set(KEY, { ...grant(), roles: ['signer', 'approver'], expiresAt });
    signIn(files, standIn.url, expiresAt);
    const live = await runCliChild(['status'], env);
    expect(live.stdout).toMatch(
      new RegExp(
        `login: {3}alice@example\\.com, tenant acme \\(signer, approver\\) at ${standIn.url}; key expires at ${expiresAt} \\(in (1 h 59 min|2 h)\\)`,
      ),
    );
    const json = JSON.parse((await runCliChild(['status', '--json'], env)).stdout);
    expect(json.login).toMatchObject({ tenant: 'acme', source: 'service', roles: ['signer', 'approver'] });

    await standIn.close();
    standIn = undefined;
    const away = await runCliChild(['status'], env);
    expect(away.stdout).toMatch(/login: {3}alice@example\.com, tenant acme \(signer\)/);
    expect(away.stdout).toMatch(
      /\(from .*login\.json; the service could not confirm it \(unreachable: ECONNREFUSED\)\)/,
    );
  });

  it('status says to sign in again when the key expired or the service refuses it (exit 1)', async () => {
    standIn = await startDeviceFlowStandIn();
    const { env, files } = home();
    signIn(files, standIn.url, new Date(Date.now() - 60_000).toISOString());
    const refused = await runCliChild(['status'], env);
    expect(refused.code).toBe(1);
    expect(refused.stdout).toMatch(/the service refuses the key \(unauthorized: .*\): run `signbridge login`/);
  });
});

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}
