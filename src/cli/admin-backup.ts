// `signbridge admin backup`: a consistent copy of a SQLite data dir while the service keeps signing
// (docs/deployment.md, "Backup and restore"). The database is copied with VACUUM INTO, one read transaction: in
// WAL mode a reader never makes a writer wait, and the copy is one snapshot however many commits land meanwhile.
// (SQLite's online backup API, and so `sqlite3 .backup` and better-sqlite3's db.backup(), starts over whenever
// another connection writes, so under steady signing it finished only once the load ended.) The token folder is
// copied after the database: a key made in between is in the token copy without a tenant that uses it, which is
// harmless, where the other order could restore a tenant whose key is missing.
import { closeSync, cpSync, existsSync, mkdirSync, openSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { ServiceConfig } from '../config/config.js';
import { ensurePrivateDir } from '../fs-private.js';
import { openSqlite } from '../store/sqlite/sqlite-driver.js';

export class BackupError extends Error {}

export interface BackupReport {
  database: string;
  tokenFolder: string | undefined;
  /** How long the database copy took (the read transaction was open this long; writers never waited on it). */
  databaseMs: number;
}

/** How long the copy waits for a lock it cannot have at once (a checkpoint starting the WAL over: milliseconds). */
const BUSY_TIMEOUT_MS = 10_000;

export function backupDataDir(config: ServiceConfig, to: string): BackupReport {
  if (config.store.type !== 'sqlite') {
    throw new BackupError(
      'admin backup copies a SQLite data dir; on PostgreSQL back up the database with pg_dump and the token folder ' +
        '<data dir>/softhsm/ with it (docs/deployment.md, "Backup and restore")',
    );
  }
  const source = config.store.path;
  if (!existsSync(source)) throw new BackupError(`no database at ${source}: is --data-dir the service's data dir?`);
  if (existsSync(to) && (!statSync(to).isDirectory() || readdirSync(to).length > 0)) {
    throw new BackupError(`${to} exists and is not an empty folder: back up into a new one`);
  }
  mkdirSync(to, { recursive: true, mode: 0o700 });
  ensurePrivateDir(to);
  const database = join(to, 'signbridge.db');
  // Made empty and private first (VACUUM INTO writes into an empty file): the copy holds API key hashes and the
  // audit log, and would otherwise get the umask's mode.
  closeSync(openSync(database, 'wx', 0o600));
  const started = performance.now();
  const db = openSqlite(source, { fileMustExist: true });
  try {
    db.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
    db.prepare('VACUUM INTO ?').run(database);
  } finally {
    db.close();
  }
  const databaseMs = performance.now() - started;
  const tokens = join(config.dataDir, 'softhsm');
  let tokenFolder: string | undefined;
  if (existsSync(tokens)) {
    tokenFolder = join(to, 'softhsm');
    // The PIN files and the token objects, modes kept (0600 / 0700). The lock file is only for a first start.
    cpSync(tokens, tokenFolder, {
      recursive: true,
      preserveTimestamps: true,
      filter: (path) => !path.endsWith('token-init.lock'),
    });
  }
  return { database, tokenFolder, databaseMs };
}
