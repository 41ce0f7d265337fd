// A daemon restart is invisible to signing tools: 8 threads of a C program sign without pause through the real
// module (each signature verified) while `signbridge daemon` is stopped with SIGTERM and started again. Nothing
// fails, and the service made exactly as many signatures as the threads received (no SIGN was served twice).
import { spawn } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import { packagePath } from '../../src/paths.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';
import { ensurePeercredBuilt, startDaemonProcess, tempDir, tempSocketPath } from './helpers.js';

const SIGN_LOOP = packagePath('build', 'native', 'test', 'sbp11_sign_loop');
if (!existsSync(SIGN_LOOP)) throw new Error(`${SIGN_LOOP} is not built: run scripts/setup.sh`);

let svc: TestService;
let dir: string;
let config: string;
let socket: string;

beforeAll(async () => {
  ensurePeercredBuilt();
  svc = await startTestService();
  const url = await svc.app.listen({ host: '127.0.0.1', port: 0 });
  const res = await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'restart', key_spec: 'RSA_2048' });
  expect(res.status).toBe(201);
  dir = tempDir('sbd-restart-');
  writeFileSync(join(dir, 'api-key'), `${await svc.apiKey('signer', 'restart')}\n`, { mode: 0o600 });
  socket = tempSocketPath();
  config = join(dir, 'daemon.yaml');
  writeFileSync(
    config,
    [`socket: ${socket}`, 'service:', `  url: ${url}`, '  apiKeyFile: api-key', 'tenants:', '  - id: restart'].join(
      '\n',
    ),
  );
});
afterAll(async () => svc?.close());

/** `signbridge daemon` on this test's configuration, as a child process. */
const startDaemon = () => startDaemonProcess(['--config', config]);

/** The sign loop's progress: its last "signed N failed F bad B" line. */
function progressOf(out: string) {
  const lines = [...out.matchAll(/signed (\d+) failed (\d+) bad (\d+)/g)];
  const last = lines.at(-1);
  return { signed: Number(last?.[1] ?? 0), failed: Number(last?.[2] ?? 0), bad: Number(last?.[3] ?? 0) };
}

describe('threads signing through the module across a daemon restart', () => {
  it('lose nothing, and nothing is signed twice', async () => {
    let daemon = await startDaemon();
    const stopFile = join(dir, 'stop');
    const loop = spawn(SIGN_LOOP, [MODULE_PATH, 'restart', '8', stopFile], {
      // The wait outlasts a daemon start on a busy machine: this test is about losing nothing, not the default.
      env: {
        ...process.env,
        SIGNBRIDGE_SOCKET: socket,
        SIGNBRIDGE_LOG: `info:${join(dir, 'module.log')}`,
        SIGNBRIDGE_DAEMON_WAIT_SECONDS: '120',
      },
    });
    let out = '';
    let err = '';
    loop.stdout.on('data', (c: Buffer) => {
      out += c.toString();
    });
    loop.stderr.on('data', (c: Buffer) => {
      err += c.toString();
    });
    const loopExit = new Promise<number | null>((resolve) => loop.once('exit', (code) => resolve(code)));
    // Progress is counted, never timed: wait for signatures, however slow the machine is.
    const waitForSigned = async (n: number) => {
      while (progressOf(out).signed < n) {
        if (loop.exitCode !== null) throw new Error(`sign loop ended early:\n${out}\n${err}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    try {
      await waitForSigned(40);
      for (let restart = 0; restart < 2; restart++) {
        expect(await daemon.stop()).toBe(0);
        const before = progressOf(out).signed;
        daemon = await startDaemon();
        await waitForSigned(before + 40);
      }
    } finally {
      writeFileSync(stopFile, '');
    }
    expect(await loopExit, err).toBe(0);
    await daemon.stop();
    const result = progressOf(out);
    expect(err).toBe('');
    expect(result.failed).toBe(0);
    expect(result.bad).toBe(0);
    expect(result.signed).toBeGreaterThanOrEqual(120);
    // The service's audit log has one "signed" entry per signature the threads received: none was made twice.
    const db = new BetterSqlite3(join(svc.dataDir, 'signbridge.db'), { readonly: true });
    try {
      const row = db
        .prepare("SELECT count(*) AS n FROM audit_log WHERE tenant_id = 'restart' AND outcome = 'signed'")
        .get() as { n: number };
      expect(row.n).toBe(result.signed);
    } finally {
      db.close();
    }
  }, 180_000);
});
