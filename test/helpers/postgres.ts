// A private PostgreSQL cluster for a test run: initdb and pg_ctl on a free loopback port in a temp dir, fsync on,
// run as the `postgres` user when we are root (PostgreSQL refuses to run as root). Nothing of the machine's own
// clusters is touched.
import { execFileSync } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface PostgresCluster {
  /** postgres://postgres@127.0.0.1:PORT/postgres */
  url: string;
  port: number;
  dir: string;
  /** A fresh database on this cluster (each test file its own), as a URL. */
  createDatabase(name: string): string;
  stop(): void;
  /** Stops the server but keeps the data (a fault test starts it again). */
  pause(): void;
  resume(): void;
}

/** The newest PostgreSQL server binaries Debian installed, or undefined. */
export function postgresBinDir(): string | undefined {
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return undefined;
  const versions = readdirSync(root)
    .filter((v) => existsSync(join(root, v, 'bin', 'pg_ctl')))
    .sort((a, b) => Number(b) - Number(a));
  return versions[0] && join(root, versions[0], 'bin');
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() =>
        typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port')),
      );
    });
  });
}

function asPostgres(bin: string, args: string[]): void {
  const isRoot = process.getuid?.() === 0;
  const [cmd, argv] = isRoot ? ['runuser', ['-u', 'postgres', '--', bin, ...args]] : [bin, args];
  execFileSync(cmd, argv, { stdio: ['ignore', 'pipe', 'pipe'] });
}

/** `settings`: more server settings (`name=value`, e.g. TLS for the TLS test). */
export async function startPostgresCluster(settings: string[] = []): Promise<PostgresCluster> {
  const bin = postgresBinDir();
  if (!bin) throw new Error('PostgreSQL is not installed: scripts/setup.sh installs it (apt-get install postgresql)');
  const dir = mkdtempSync(join(tmpdir(), 'signbridge-pg-'));
  if (process.getuid?.() === 0) {
    const uid = Number(execFileSync('id', ['-u', 'postgres']).toString());
    const gid = Number(execFileSync('id', ['-g', 'postgres']).toString());
    chownSync(dir, uid, gid);
  }
  const data = join(dir, 'data');
  asPostgres(join(bin, 'initdb'), ['-D', data, '-U', 'postgres', '-A', 'trust', '-E', 'UTF8', '--no-sync']);
  const port = await freePort();
  const options = [
    `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=on`,
    ...settings.map((setting) => `-c ${setting}`),
  ].join(' ');
  const start = () =>
    asPostgres(join(bin, 'pg_ctl'), ['-D', data, '-l', join(dir, 'log'), '-w', '-o', options, 'start']);
  const stop = () => asPostgres(join(bin, 'pg_ctl'), ['-D', data, '-m', 'fast', '-w', 'stop']);
  start();
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  return {
    url,
    port,
    dir,
    createDatabase(name: string) {
      asPostgres(join(bin, 'psql'), [
        '-h',
        '127.0.0.1',
        '-p',
        String(port),
        '-U',
        'postgres',
        '-c',
        `CREATE DATABASE "${name}"`,
      ]);
      return `postgres://postgres@127.0.0.1:${port}/${name}`;
    },
    pause: stop,
    resume: start,
    stop() {
      try {
        stop();
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}

/** The run's cluster (test/global-setup.ts), or undefined when PostgreSQL is not installed here. */
export function testPostgresUrl(): string | undefined {
  return process.env.SIGNBRIDGE_TEST_POSTGRES_URL;
}

/** A fresh database on the run's cluster, for one test file. */
export function createTestDatabase(prefix: string): string {
  const url = testPostgresUrl();
  if (!url) throw new Error('no PostgreSQL cluster for this run');
  const name = `${prefix}_${process.pid}_${Date.now().toString(36)}`.toLowerCase().replace(/[^a-z0-9_]/g, '_');
  const admin = new URL(url);
  execFileSync('psql', [admin.toString(), '-q', '-c', `CREATE DATABASE "${name}"`], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  admin.pathname = `/${name}`;
  return admin.toString();
}
