import { closeSync, openSync } from 'node:fs';
import BetterSqlite3 from 'better-sqlite3';
import { Kysely, SqliteDialect } from 'kysely';
import { type Database, KyselyStore } from './kysely-store.js';

/** The embedded default store: one SQLite file in the data dir, WAL mode, private to its owner. */
export function openSqliteStore(path: string): KyselyStore {
  // Create the file 0600 first: SQLite gives its -wal and -shm files the database file's mode.
  closeSync(openSync(path, 'a', 0o600));
  const sqlite = new BetterSqlite3(path);
  // WAL lets /readyz and reads proceed during a write; NORMAL sync is durable across process crashes in WAL mode.
  sqlite.pragma('journal_mode = WAL');
  sqlite.pragma('synchronous = NORMAL');
  sqlite.pragma('foreign_keys = ON');
  sqlite.pragma('busy_timeout = 5000');
  const db = new Kysely<Database>({ dialect: new SqliteDialect({ database: sqlite }) });
  return new KyselyStore(db, `sqlite:${path}`);
}
