// A tool that lists tokens while no daemon runs: the module waits SIGNBRIDGE_DAEMON_WAIT_SECONDS only for a
// daemon that is restarting (a socket file nobody listens on), and about 2 s when there is no socket file at all,
// so that programs loading every registered module (p11-kit) do not stall for the whole wait. Real pkcs11-tool.
import { execFile, execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import { makeTempDir } from '../helpers/service.js';

const run = promisify(execFile);

async function listSlots(socketPath: string, env: Record<string, string> = {}) {
  const started = Date.now();
  const out = await run('pkcs11-tool', ['--module', MODULE_PATH, '--list-slots'], {
    env: { ...process.env, SIGNBRIDGE_SOCKET: socketPath, SIGNBRIDGE_LOG: 'info', ...env },
    encoding: 'utf8',
    timeout: 30_000,
  });
  return { ...out, seconds: (Date.now() - started) / 1000 };
}

describe.skipIf(!existsSync(MODULE_PATH))('no daemon running', () => {
  it('with no socket file, a first listing gives up after the short first-contact wait, not the whole wait', async () => {
    // A whole wait far longer than the first-contact wait (2 s), so that a slow machine cannot blur the two.
    const { stdout, stderr } = await listSlots(join(makeTempDir(), 'daemon.sock'), {
      SIGNBRIDGE_DAEMON_WAIT_SECONDS: '120',
    });
    expect(stdout).toMatch(/signbridge: daemon not running/);
    const waited = /cannot connect to the signbridge daemon \(No such file or directory\).*\(waited (\d+\.\d) s\)/.exec(
      stderr,
    );
    expect(waited, stderr).not.toBeNull();
    expect(Number(waited?.[1])).toBeGreaterThanOrEqual(1.9);
    expect(Number(waited?.[1])).toBeLessThan(60); // the module's own count: gave up long before the whole wait
  });

  it('with a socket file nobody listens on (a daemon restarting), the listing waits the whole wait', async () => {
    const socketPath = join(makeTempDir(), 'daemon.sock');
    // A socket bound and left behind by a process that is gone, as a daemon between stop and start leaves it.
    execFileSync('python3', ['-c', 'import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])', socketPath]);
    const { stdout, stderr, seconds } = await listSlots(socketPath, { SIGNBRIDGE_DAEMON_WAIT_SECONDS: '3' });
    expect(stdout).toMatch(/signbridge: daemon not running/);
    expect(stderr).toMatch(/Connection refused.*\(waited 3\.\d s\)/);
    expect(seconds).toBeGreaterThanOrEqual(2.9);
  });
});
