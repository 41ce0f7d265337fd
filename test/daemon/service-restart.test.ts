// A service restart is invisible to signing tools, as a daemon restart is (restart.test.ts): 16 threads of a C
// program sign without pause through the real module and a real `signbridge daemon` while the SERVICE (a real
// `signbridge server` child on SQLite and its embedded SoftHSM) is stopped with SIGTERM and started again on the
// same port and data dir, twice. The daemon sends each signature again, with its Idempotency-Key, until the service
// answers: nothing fails, every signature verifies, and the service's audit log (`admin audit export`) has exactly
// one `signed` entry per signature the threads received.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import { createApiKeyCli, postAction, runCli, type ServerProcess, startServerProcess } from '../helpers/cli.js';
import { ensurePeercredBuilt, startDaemonProcess, tempSocketPath } from './helpers.js';
import { startSignLoop } from './sign-loop.js';

const TENANT = 'svc-restart';
const THREADS = 16;
/** Signatures to see between two events; the load is bounded by this count and by the stop file, never by time. */
const BETWEEN = 40;

let dataDir: string;
let dir: string;
let server: ServerProcess;
let listen: string;

beforeAll(async () => {
  ensurePeercredBuilt();
  dataDir = mkdtempSync(join(tmpdir(), 'sb-svc-restart-data-'));
  dir = mkdtempSync(join(tmpdir(), 'sb-svc-restart-'));
  server = await startServerProcess(['--data-dir', dataDir]);
  listen = new URL(server.url).host;
  const operator = createApiKeyCli(dataDir, 'operator');
  const created = await postAction(server.url, 'create_tenant', operator, { tenant_id: TENANT, key_spec: 'RSA_2048' });
  expect(created.status).toBe(201);
  writeFileSync(join(dir, 'api-key'), `${createApiKeyCli(dataDir, 'signer', TENANT)}\n`, { mode: 0o600 });
}, 120_000);
afterAll(async () => {
  await server?.stop();
});

/** `signbridge daemon` for TENANT on `socket`, sending to the service again for up to `retrySeconds`. */
function startDaemonOn(socket: string, configName: string, retrySeconds: number) {
  const config = join(dir, configName);
  const lines = ['service:', `  url: ${server.url}`, '  apiKeyFile: api-key', `  retrySeconds: ${retrySeconds}`];
  writeFileSync(config, [`socket: ${socket}`, ...lines, 'tenants:', `  - id: ${TENANT}`].join('\n'));
  return startDaemonProcess(['--config', config]);
}

describe('threads signing through the module across a service restart', () => {
  it('lose nothing, and nothing is signed twice', async () => {
    const socket = tempSocketPath();
    // The retry window outlasts a service start on a busy machine (this test is about losing nothing, not about
    // the 20 s default); the module's wait for an answer outlasts the window plus one request's timeout.
    const daemon = await startDaemonOn(socket, 'daemon.yaml', 240);
    const loop = startSignLoop(dir, TENANT, THREADS, { SIGNBRIDGE_SOCKET: socket, SIGNBRIDGE_TIMEOUT: '600' });
    try {
      await loop.waitForSigned(BETWEEN);
      for (let restart = 0; restart < 2; restart++) {
        // Its exit code is not asserted: the service gives in-flight requests 10 s before it exits with 1, and how
        // long they take depends on the machine; either way the daemon must lose nothing.
        await server.stop('SIGTERM');
        const before = loop.progress().signed;
        server = await startServerProcess(['--data-dir', dataDir, '--listen', listen]);
        await loop.waitForSigned(before + BETWEEN);
      }
    } catch (err) {
      await loop.stop();
      throw err;
    }
    const stopped = await loop.stop();
    expect(stopped.code, stopped.stderr).toBe(0);
    const daemonLog = daemon.output();
    await daemon.stop();
    const { result } = stopped;
    expect(stopped.stderr).toBe('');
    expect(result.failed).toBe(0);
    expect(result.bad).toBe(0);
    expect(result.signed).toBeGreaterThanOrEqual(3 * BETWEEN);
    // The daemon did wait for the service (the restarts happened under load), and said so.
    expect(daemonLog).toMatch(/the service cannot answer; sending the request again until it can/);
    // Each signature the threads received is recorded once: none was lost, none made twice. A signature is its own
    // `signed` entry or an item of a batch's (the daemon coalesces concurrent C_Sign calls into a sign_batch, one
    // entry whose details.batch.signed counts its items: docs/transparency.md).
    const exported = runCli(['admin', 'audit', 'export', '--data-dir', dataDir]);
    expect(exported.code, exported.stderr).toBe(0);
    const entries = exported.stdout
      .split('\n')
      .filter(Boolean)
      .map(
        (line) => JSON.parse(line) as { tenant_id: string; outcome: string; details: { batch?: { signed: number } } },
      );
    const recorded = entries
      .filter((e) => e.tenant_id === TENANT && e.outcome === 'signed')
      .reduce((sum, e) => sum + (e.details.batch?.signed ?? 1), 0);
    expect(recorded).toBe(result.signed);
    expect(runCli(['admin', 'audit', 'verify', '--data-dir', dataDir]).code).toBe(0);
  }, 600_000);

  it('a service that stays down past retrySeconds: the signature fails with a retryable error that says so', async () => {
    const socket = tempSocketPath();
    const daemon = await startDaemonOn(socket, 'daemon-short.yaml', 1);
    const work = mkdtempSync(join(dir, 'down-'));
    writeFileSync(join(work, 'file.txt'), 'signed while the service is down\n');
    const env = { ...process.env, SIGNBRIDGE_SOCKET: socket };
    const pkcs11Tool = (args: string[]) =>
      spawnSync('pkcs11-tool', ['--module', MODULE_PATH, '--token-label', TENANT, ...args], {
        cwd: work,
        env,
        encoding: 'utf8',
      });
    try {
      // The daemon learns the tenant's key while the service is up.
      const listed = pkcs11Tool(['--list-objects']);
      expect(listed.status, listed.stderr).toBe(0);
      await server.stop('SIGTERM');
      const res = pkcs11Tool([
        '--sign',
        '--mechanism',
        'SHA256-RSA-PKCS',
        '--input-file',
        'file.txt',
        '--output-file',
        'file.sig',
      ]);
      expect(res.status).not.toBe(0);
      expect(res.stderr).toMatch(
        new RegExp(
          `signbridge: the signing service cannot be reached \\(retry later\\) for tenant ${TENANT}: ` +
            'cannot reach the service at http://127\\.0\\.0\\.1:\\d+: ECONNREFUSED \\(sent \\d+ times over \\d+\\.\\d s\\) \\(UNAVAILABLE',
        ),
      );
    } finally {
      await daemon.stop();
      server = await startServerProcess(['--data-dir', dataDir, '--listen', listen]);
    }
  }, 300_000);
});
