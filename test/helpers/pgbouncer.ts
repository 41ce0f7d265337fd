// A private PgBouncer for a test file, in front of a private PostgreSQL cluster: Debian's `pgbouncer` binary with
// its own ini and userlist in a temp dir, on a free loopback port, run as the `postgres` user when we are root
// (PgBouncer refuses to run as root), stopped by its pid. Every setting not given is PgBouncer's default (in
// particular no ignore_startup_parameters). The machine's own pgbouncer service is never touched.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './postgres.js';

export const PGBOUNCER_BIN = '/usr/sbin/pgbouncer';

export function pgbouncerInstalled(): boolean {
  return existsSync(PGBOUNCER_BIN);
}

export interface PgBouncer {
  port: number;
  /** `url` (a postgres:// URL of the cluster) with host and port turned to this PgBouncer. */
  through(url: string): string;
  /** Everything PgBouncer logged so far. */
  log(): string;
  stop(): Promise<void>;
}

/**
 * `settings`: lines for the [pgbouncer] section, e.g. `pool_mode = transaction`. `serverPort`: the PostgreSQL
 * cluster's port on 127.0.0.1; every database name is passed through to it, as user postgres (trust).
 */
export async function startPgBouncer(serverPort: number, settings: string[]): Promise<PgBouncer> {
  if (!pgbouncerInstalled()) throw new Error('pgbouncer is not installed: scripts/setup.sh installs it');
  const dir = mkdtempSync(join(tmpdir(), 'signbridge-pgbouncer-'));
  const port = await freePort();
  const ini = join(dir, 'pgbouncer.ini');
  writeFileSync(join(dir, 'userlist.txt'), '"postgres" ""\n');
  writeFileSync(
    ini,
    [
      '[databases]',
      `* = host=127.0.0.1 port=${serverPort}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = trust',
      `auth_file = ${join(dir, 'userlist.txt')}`,
      ...settings,
      '',
    ].join('\n'),
  );
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    const uid = Number(execFileSync('id', ['-u', 'postgres']).toString());
    const gid = Number(execFileSync('id', ['-g', 'postgres']).toString());
    chownSync(dir, uid, gid);
  }
  let output = '';
  const child: ChildProcess = spawn(PGBOUNCER_BIN, [...(asRoot ? ['-u', 'postgres'] : []), ini], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout?.on('data', (d) => {
    output += d;
  });
  child.stderr?.on('data', (d) => {
    output += d;
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  // Listening once a TCP connection is accepted (condition, not a fixed sleep; generous deadline).
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`pgbouncer exited at start:\n${output}`);
    if (await accepts(port)) break;
    if (Date.now() > deadline) throw new Error(`pgbouncer did not listen on ${port}:\n${output}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    port,
    through(url: string) {
      const u = new URL(url);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      return u.toString();
    },
    log: () => output,
    async stop() {
      if (child.exitCode === null) {
        child.kill('SIGTERM');
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}
