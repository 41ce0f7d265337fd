// `signbridge daemon`, `status` and `module-path` as a user runs them: the compiled CLI in child processes,
// against the real service (this file's SoftHSM token) over HTTP.
import { spawn } from 'node:child_process';
import { existsSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import { CLI, runCli } from '../helpers/cli.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';
import { ensurePeercredBuilt, startDaemonProcess, tempDir, tempSocketPath } from './helpers.js';

let svc: TestService;
let url: string;
let dir: string;
let keyFile: string;

beforeAll(async () => {
  ensurePeercredBuilt();
  svc = await startTestService();
  url = await svc.app.listen({ host: '127.0.0.1', port: 0 });
  for (const [tenant, spec] of [
    ['acme', 'ECC_NIST_P384'],
    ['beta', 'RSA_2048'],
  ]) {
    const res = await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: tenant, key_spec: spec });
    expect(res.status).toBe(201);
  }
  dir = tempDir('sbd-cli-');
  keyFile = join(dir, 'api-key');
  writeFileSync(keyFile, `${await svc.apiKey('signer', 'acme')}\n`, { mode: 0o600 });
  writeFileSync(join(dir, 'beta-key'), `${await svc.apiKey('signer', 'beta')}\n`, { mode: 0o600 });
});
afterAll(async () => svc?.close());

/** Starts `signbridge daemon` and waits for its "listening" line (async: the service runs in this process). */
/** runCli, but without blocking this process's event loop (the service answers from here). */
function runCliAsync(args: string[], env: NodeJS.ProcessEnv = {}) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => {
      stdout += c.toString();
    });
    child.stderr.on('data', (c: Buffer) => {
      stderr += c.toString();
    });
    child.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

describe('signbridge daemon + status', () => {
  it('serves the configured tenants; status lists them; SIGTERM removes the socket', async () => {
    const socket = tempSocketPath();
    const config = join(dir, 'daemon.yaml');
    writeFileSync(
      config,
      [
        `socket: ${socket}`,
        `service:`,
        `  url: ${url}`,
        `  apiKeyFile: api-key`,
        `tenants:`,
        `  - id: acme`,
        `    label: ACME release`,
        `  - id: beta`,
        `    apiKeyFile: beta-key`,
        `cacheSeconds: 30`,
      ].join('\n'),
    );
    const daemon = await startDaemonProcess(['--config', config, '--log-level', 'info']);
    try {
      expect(statSync(socket).mode & 0o777).toBe(0o600);
      const status = await runCliAsync(['status', '--socket', socket]);
      expect(status.code, status.stdout + status.stderr).toBe(0);
      expect(status.stdout).toMatch(/daemon: {2}reachable/);
      expect(status.stdout).toMatch(/service: reachable/);
      expect(status.stdout).toMatch(/token "ACME release" \(tenant acme\)/);
      expect(status.stdout).toMatch(/ECC_NIST_P384 {2}CKA_ID [0-9a-f]{32}/);
      expect(status.stdout).toMatch(/token "beta" \(tenant beta\)/);
      expect(status.stdout).toMatch(/RSA_2048/);
      const json = JSON.parse((await runCliAsync(['status', '--json'], { SIGNBRIDGE_SOCKET: socket })).stdout);
      expect(json.tokens).toHaveLength(2);
      // The API key never reaches the log.
      const secret = (await import('node:fs')).readFileSync(keyFile, 'utf8').trim();
      expect(daemon.output()).not.toContain(secret);
    } finally {
      expect(await daemon.stop('SIGTERM')).toBe(0);
    }
    expect(existsSync(socket)).toBe(false);
  });

  it('status reports an unreachable service and a missing daemon, with exit code 1', async () => {
    const socket = tempSocketPath();
    const daemon = await startDaemonProcess([
      '--socket',
      socket,
      '--service-url',
      'http://127.0.0.1:9',
      '--tenant',
      'acme',
      '--api-key-file',
      keyFile,
    ]);
    try {
      const status = await runCliAsync(['status', '--socket', socket]);
      expect(status.code).toBe(1);
      expect(status.stdout).toMatch(/daemon: {2}reachable/);
      expect(status.stdout).toMatch(/service: unreachable/);
      expect(status.stdout).toMatch(/UNAVAILABLE: cannot reach the service/);
    } finally {
      expect(await daemon.stop('SIGINT')).toBe(0);
    }
    const none = await runCliAsync(['status', '--socket', socket]);
    expect(none.code).toBe(1);
    expect(none.stdout).toMatch(/daemon: {2}unreachable/);
  });

  it('status says so when the service refuses the credentials (reachable, but exit code 1)', async () => {
    const socket = tempSocketPath();
    const revoked = join(dir, 'revoked-key');
    writeFileSync(revoked, 'sbk_0000000000000000_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n', { mode: 0o600 });
    const daemon = await startDaemonProcess([
      '--socket',
      socket,
      '--service-url',
      url,
      '--tenant',
      'acme',
      '--api-key-file',
      revoked,
    ]);
    try {
      const status = await runCliAsync(['status', '--socket', socket]);
      expect(status.code).toBe(1);
      expect(status.stdout).toMatch(/service: reachable/);
      expect(status.stdout).toMatch(/error: {3}UNAUTHENTICATED: unauthorized: API key is invalid or revoked/);
    } finally {
      await daemon.stop();
    }
  });

  it('refuses an API key file readable by others, and a config without tenants', () => {
    const loose = join(dir, 'loose-key');
    writeFileSync(loose, 'sbk_x\n', { mode: 0o644 });
    const res = runCli([
      'daemon',
      '--service-url',
      url,
      '--tenant',
      'acme',
      '--api-key-file',
      loose,
      '--socket',
      tempSocketPath(),
    ]);
    expect(res.code).toBe(1);
    expect(res.stderr).toMatch(/mode 644; it must be 600/);
    const none = runCli(['daemon', '--service-url', url, '--api-key-file', keyFile, '--socket', tempSocketPath()], {
      SIGNBRIDGE_API_KEY: '',
    });
    expect(none.code).toBe(1);
    expect(none.stderr).toMatch(/no tenants to expose/);
  });
});

describe('signbridge module-path', () => {
  it('prints the module path when it is built, or says it is not built', () => {
    const res = runCli(['module-path']);
    if (existsSync(MODULE_PATH)) {
      expect(res.code).toBe(0);
      expect(res.stdout.trim()).toBe(MODULE_PATH);
    } else {
      expect(res.code).toBe(1);
      expect(res.stdout).toBe('');
      expect(res.stderr).toMatch(/not built .*libsignbridge-pkcs11\.so/);
    }
  });
});
