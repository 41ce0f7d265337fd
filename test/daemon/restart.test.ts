// A daemon restart is invisible to signing tools: 8 threads of a C program sign without pause through the real
// module (each signature verified) while `signbridge daemon` is stopped with SIGTERM and started again. Nothing
// fails, and the service made exactly as many signatures as the threads received (no SIGN was served twice).
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openSqlite } from '../../src/store/sqlite/sqlite-driver.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';
import { ensurePeercredBuilt, startDaemonProcess, tempDir, tempSocketPath } from './helpers.js';
import { startSignLoop } from './sign-loop.js';

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

describe('threads signing through the module across a daemon restart', () => {
  it('lose nothing, and nothing is signed twice', async () => {
    let daemon = await startDaemon();
    // The wait outlasts a daemon start on a busy machine: this test is about losing nothing, not the default.
    const loop = startSignLoop(dir, 'restart', 8, { SIGNBRIDGE_SOCKET: socket, SIGNBRIDGE_DAEMON_WAIT_SECONDS: '120' });
    try {
      // Progress is counted, never timed: wait for signatures, however slow the machine is.
      await loop.waitForSigned(40);
      for (let restart = 0; restart < 2; restart++) {
        expect(await daemon.stop()).toBe(0);
        const before = loop.progress().signed;
        daemon = await startDaemon();
        await loop.waitForSigned(before + 40);
      }
    } catch (err) {
      await loop.stop();
      throw err;
    }
    const stopped = await loop.stop();
    expect(stopped.code, stopped.stderr).toBe(0);
    await daemon.stop();
    const { result } = stopped;
    expect(stopped.stderr).toBe('');
    expect(result.failed).toBe(0);
    expect(result.bad).toBe(0);
    expect(result.signed).toBeGreaterThanOrEqual(120);
    // The service's audit log records each signature the threads received once: none was made twice. A signature
    // is its own `signed` entry or an item of a batch's (the daemon coalesces concurrent C_Sign calls into a
    // sign_batch, recorded as one entry whose details.batch.signed counts its items: docs/transparency.md).
    const db = openSqlite(join(svc.dataDir, 'signbridge.db'), { readonly: true });
    try {
      const row = db
        .prepare(
          "SELECT coalesce(sum(coalesce(json_extract(details, '$.batch.signed'), 1)), 0) AS n FROM audit_log " +
            "WHERE tenant_id = 'restart' AND outcome = 'signed'",
        )
        .get() as { n: number };
      expect(row.n).toBe(result.signed);
    } finally {
      db.close();
    }
  }, 180_000);
});
