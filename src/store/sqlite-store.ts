import { closeSync, openSync } from 'node:fs';
import BetterSqlite3 from 'better-sqlite3';
import { Kysely, type SqliteDatabase, SqliteDialect, type SqliteStatement } from 'kysely';
import { chainAuditRows, type Database, KyselyStore, toApiKey, toKey } from './kysely-store.js';
import type { ApiKeyRecord, AuditEntryInput, KeyRecord } from './store.js';

const STATEMENT_CACHE_SIZE = 256;

/**
 * Kysely prepares every query anew; on the signing path that was the largest single cost. The store's queries are
 * a small fixed set, so their prepared statements are kept (better-sqlite3 statements are reusable).
 */
function withStatementCache(db: BetterSqlite3.Database): SqliteDatabase {
  const cache = new Map<string, SqliteStatement>();
  return {
    close: () => db.close(),
    prepare(sql: string): SqliteStatement {
      let stmt = cache.get(sql);
      if (!stmt) {
        stmt = db.prepare(sql) as unknown as SqliteStatement;
        if (cache.size >= STATEMENT_CACHE_SIZE) cache.delete(cache.keys().next().value as string);
        cache.set(sql, stmt);
      }
      return stmt;
    },
  };
}

/**
 * The signing path's statements, prepared once: the two reads every signature makes (the caller's API key, the
 * tenant's current key) and the group commit of signature records and audit entries. Kysely's query building and
 * its promise chain cost more than SQLite's own work here (the commit went from about 0.45 ms to under 0.1 ms a
 * signature). Same SQL as KyselyStore's; every other query stays there.
 */
class SqliteStore extends KyselyStore {
  private apiKeyById?: BetterSqlite3.Statement<[string], Database['api_keys']>;
  private currentKeyByTenant?: BetterSqlite3.Statement<[string], Database['keys']>;
  private writeBatch?: (signatures: Database['signatures'][], audits: AuditEntryInput[]) => void;

  constructor(
    db: Kysely<Database>,
    description: string,
    private readonly sqlite: BetterSqlite3.Database,
  ) {
    super(db, description);
  }

  // Prepared on first use: the tables exist only after migrate().
  override async getApiKey(id: string): Promise<ApiKeyRecord | undefined> {
    this.apiKeyById ??= this.sqlite.prepare('SELECT * FROM api_keys WHERE id = ?');
    const row = this.apiKeyById.get(id);
    return row && toApiKey(row);
  }

  override async getCurrentKey(tenantId: string): Promise<KeyRecord | undefined> {
    this.currentKeyByTenant ??= this.sqlite.prepare(
      'SELECT keys.* FROM tenants JOIN keys ON keys.id = tenants.current_key_id WHERE tenants.id = ?',
    );
    const row = this.currentKeyByTenant.get(tenantId);
    return row && toKey(row);
  }

  protected override async commitWrites(signatures: Database['signatures'][], audits: AuditEntryInput[]) {
    if (!this.writeBatch) {
      const insertSignature = this.sqlite.prepare<Database['signatures']>(
        'INSERT INTO signatures (id, tenant_id, key_id, algorithm, hash, caller, created_at) ' +
          'VALUES (@id, @tenant_id, @key_id, @algorithm, @hash, @caller, @created_at)',
      );
      const head = this.sqlite.prepare<[], { seq: number; hash: string }>(
        'SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1',
      );
      const insertAudit = this.sqlite.prepare<Database['audit_log']>(
        'INSERT INTO audit_log (seq, at, tenant_id, actor, action, outcome, details, prev_hash, hash) ' +
          'VALUES (@seq, @at, @tenant_id, @actor, @action, @outcome, @details, @prev_hash, @hash)',
      );
      const batch = this.sqlite.transaction((sigs: Database['signatures'][], entries: AuditEntryInput[]) => {
        for (const row of sigs) insertSignature.run(row);
        if (entries.length > 0) for (const row of chainAuditRows(head.get(), entries)) insertAudit.run(row);
      });
      // IMMEDIATE: take the write lock before reading the chain's head, so another process cannot append between
      // the read and the write (a deferred transaction would fail to upgrade with SQLITE_BUSY instead).
      this.writeBatch = (sigs, entries) => batch.immediate(sigs, entries);
    }
    this.writeBatch(signatures, audits);
  }
}

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
  const db = new Kysely<Database>({ dialect: new SqliteDialect({ database: withStatementCache(sqlite) }) });
  const store = new SqliteStore(db, `sqlite:${path}`, sqlite);
  return store;
}
