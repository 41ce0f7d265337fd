// `signbridge server` with an IdP configured through the config file and the environment: the settings reach the
// routes (discovery from the server process, URLs from the public URL), and device codes stay out of the log.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli, type ServerProcess, startServerProcess } from '../helpers/cli.js';
import { makeTempDir } from '../helpers/service.js';
import { listenTestIdp, TEST_CLIENT, type TestIdp } from '../helpers/test-idp.js';

const PUBLIC_URL = 'http://signbridge.test:8443';
let idp: TestIdp;
let server: ServerProcess;
let config: string;

beforeAll(async () => {
  idp = await listenTestIdp({});
  idp.start(`${PUBLIC_URL}/oauth/callback`);
  const dir = makeTempDir();
  config = join(dir, 'signbridge.yaml');
  writeFileSync(config, `dataDir: ${join(dir, 'data')}\noidc:\n  allowInsecureIssuer: true\n  personKeyHours: 8\n`);
  server = await startServerProcess(['--config', config], {
    SIGNBRIDGE_OIDC_ISSUER: idp.issuer,
    SIGNBRIDGE_OIDC_CLIENT_ID: TEST_CLIENT.id,
    SIGNBRIDGE_OIDC_CLIENT_SECRET: TEST_CLIENT.secret,
    SIGNBRIDGE_PUBLIC_URL: PUBLIC_URL,
    SIGNBRIDGE_LOG_LEVEL: 'info',
  });
});
afterAll(async () => {
  await server?.stop();
  await idp?.close();
});

describe('signbridge server with an identity provider', () => {
  it('device start answers URLs on the public URL; the poll waits; the device code is never logged', async () => {
    const start = await fetch(`${server.url}/oauth/device/start`, { method: 'POST' });
    expect(start.status).toBe(200);
    const body = (await start.json()) as Record<string, string>;
    expect(body.verification_uri).toBe(`${PUBLIC_URL}/oauth/device`);
    expect(body.verification_uri_complete).toBe(`${PUBLIC_URL}/oauth/device?user_code=${body.user_code}`);
    const poll = await fetch(`${server.url}/oauth/device/poll?device_code=${body.device_code}`, { method: 'POST' });
    expect(poll.status).toBe(400);
    expect(((await poll.json()) as { error: string }).error).toBe('authorization_pending');
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(server.output()).toContain('/oauth/device/poll?device_code=[redacted]');
    expect(server.output()).not.toContain(body.device_code as string);
  });

  it('the user code never reaches the log: not in the verification URL, not inside the sign-in redirect', async () => {
    const start = await fetch(`${server.url}/oauth/device/start`, { method: 'POST' });
    const { user_code: userCode } = (await start.json()) as { user_code: string };
    // Opened without a session: redirected to the sign-in, which carries the page (and so the code) in return_to.
    const page = await fetch(`${server.url}/oauth/device?user_code=${userCode}`, { redirect: 'manual' });
    expect(page.status).toBe(303);
    const signIn = page.headers.get('location') as string;
    expect(signIn).toContain(encodeURIComponent(`user_code=${userCode}`));
    expect((await fetch(new URL(signIn, server.url), { redirect: 'manual' })).status).toBe(302);
    // The log lines of both requests are written; wait for them rather than for a fixed time.
    const deadline = Date.now() + 30_000;
    while (!server.output().includes('user_code%3D[redacted]') && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(server.output()).toContain('/oauth/device?user_code=[redacted]');
    expect(server.output()).toContain('user_code%3D[redacted]');
    expect(server.output()).not.toContain(userCode);
    expect(server.output()).not.toContain(userCode.replace('-', ''));
  });

  it('GET /oauth/start redirects to the configured IdP with the public callback URL', async () => {
    const res = await fetch(`${server.url}/oauth/start`, { redirect: 'manual' });
    expect(res.status).toBe(302);
    const location = new URL(res.headers.get('location') as string);
    expect(location.origin).toBe(idp.issuer);
    expect(location.searchParams.get('redirect_uri')).toBe(`${PUBLIC_URL}/oauth/callback`);
    expect(location.searchParams.get('client_id')).toBe(TEST_CLIENT.id);
  });

  it('a half configuration stops the server with a message naming the setting', () => {
    const res = runCli(['server', '--config', config, '--listen', '127.0.0.1:0'], {
      SIGNBRIDGE_OIDC_ISSUER: idp.issuer,
      SIGNBRIDGE_OIDC_CLIENT_ID: '',
      SIGNBRIDGE_PUBLIC_URL: PUBLIC_URL,
    });
    expect(res.code).not.toBe(0);
    expect(res.stderr).toContain('SIGNBRIDGE_OIDC_CLIENT_ID');
  });
});
