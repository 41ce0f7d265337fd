import { closeSync, openSync } from 'node:fs';
import { createRequire } from 'node:module';
import type BetterSqlite3 from 'better-sqlite3';
import { Kysely, type SqliteDatabase, SqliteDialect, type SqliteStatement } from 'kysely';
import { packagePath } from '../../paths.js';
import { type AuditRow, chainAuditRows } from '../audit/audit-chain.js';
import { entryPacking } from '../audit/audit-rows.js';
import { lookupRowOf, type SignatureLookup } from '../audit/signature-store.js';
import type { CommitSink } from '../commit/commit-sink.js';
import {
  type BatchItemOnEntry,
  type CompletedRequestRow,
  completedRequestRow,
  idempotencyRow,
  type LookupRow,
  signatureHashesOf,
  UPSERT_IDEMPOTENCY_SQL,
  type Write,
  type WriteBatch,
} from '../commit/group-commit.js';
import type { OutboxRow } from '../events/event-store.js';
import { KyselyStore } from '../kysely-store.js';
import { API_KEY_WITH_OWNER, type ApiKeyRow, toApiKey } from '../people/api-key-store.js';
import type { ApiKeyRecord } from '../records/api-key.js';
import type { AuditEntryInput } from '../records/audit-entry.js';
import type { KeyRecord } from '../records/tenant-key.js';
import type { Database } from '../tables.js';
import { toKey } from '../tenants/tenant-store.js';
import { Checkpointer, type CheckpointerStats, RESTART_FRAMES } from './checkpointer-thread.js';
import { openSqlite } from './sqlite-driver.js';
import { BUSY_TIMEOUT_MS, COMMITS_PER_PASS } from './sqlite-threads.js';
import { StoreWriter } from './writer-thread.js';

const STATEMENT_CACHE_SIZE = 256;

/** The packed entries' dictionary on a connection (audit-words.cjs, shared with the writer thread). */
interface AuditWords {
  idOf(text: string): number;
  textOf(id: number): string;
  committed(): void;
  rolledBack(): void;
}
const { sqliteWords } = createRequire(import.meta.url)(packagePath('src', 'store', 'sqlite', 'audit-words.cjs')) as {
  sqliteWords(db: BetterSqlite3.Database): AuditWords;
};

/**
 * Kysely prepares every query anew; on the signing path that was the largest single cost. The store's queries are
 * a small fixed set, so their prepared statements are kept (better-sqlite3 statements are reusable).
 */
/**
 * Kysely's `rollback` after a failed transaction, skipped when SQLite has ended the transaction itself: on
 * SQLITE_FULL, SQLITE_IOERR and a few others SQLite rolls back on its own, and a second rollback would throw
 * "cannot rollback - no transaction is active" in place of the error that says what happened (SQLITE_FULL: a 503
 * with Retry-After, not a 500).
 */
function rollbackUnlessEnded(db: BetterSqlite3.Database): SqliteStatement {
  return {
    reader: false,
    all: () => [],
    run: () => (db.inTransaction ? db.prepare('rollback').run() : { changes: 0, lastInsertRowid: 0 }),
    iterate: () => [][Symbol.iterator](),
    // The driver boundary: what Kysely calls of a statement, not all of better-sqlite3's Statement it is typed as.
  } as unknown as SqliteStatement;
}

function withStatementCache(db: BetterSqlite3.Database): SqliteDatabase {
  const cache = new Map<string, SqliteStatement>();
  return {
    close: () => db.close(),
    prepare(sql: string): SqliteStatement {
      if (sql === 'rollback') return rollbackUnlessEnded(db);
      let stmt = cache.get(sql);
      if (!stmt) {
        // The driver boundary: better-sqlite3's Statement and Kysely's SqliteStatement describe one object two ways.
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
 * tenant's current key), the cache epoch and the group commit of signature records and audit entries. Kysely's
 * query building and its promise chain cost more than SQLite's own work here (the commit went from about 0.45 ms
 * to under 0.1 ms a signature). Same SQL as the parts' (tenant-store.ts, api-key-store.ts); every other query stays there. The reads are answered
 * synchronously, so a cached read (access-cache.ts) checks the epoch without waiting.
 *
 * With `writerThread`, signature records and audit entries are committed on a thread of their own
 * (sqlite-writer.cjs), in parallel with the signature.
 */
class SqliteStore extends KyselyStore {
  private apiKeyById?: BetterSqlite3.Statement<[string], ApiKeyRow>;
  private currentKeyByTenant?: BetterSqlite3.Statement<[string], Database['keys']>;
  private writeBatch?: (batch: WriteBatch) => number | undefined;
  /** Hashes of entries written ahead, waiting for the next write to the writer thread (writeSignatureLookup). */
  private deferredLookups: LookupRow[] = [];
  private lookupTimer: NodeJS.Timeout | undefined;
  private cacheEpoch?: BetterSqlite3.Statement<[], number>;

  constructor(
    db: Kysely<Database>,
    description: string,
    private readonly sqlite: BetterSqlite3.Database,
    private readonly checkpointer: Checkpointer | undefined,
    private writer: CommitSink | undefined,
  ) {
    super(db, description);
  }

  // Prepared on first use: the tables exist only after migrate().
  protected override readApiKey(id: string): ApiKeyRecord | undefined {
    this.apiKeyById ??= this.sqlite.prepare(API_KEY_WITH_OWNER);
    const row = this.apiKeyById.get(id);
    return row && toApiKey(row);
  }

  protected override readCurrentKey(tenantId: string): KeyRecord | undefined {
    this.currentKeyByTenant ??= this.sqlite.prepare(
      'SELECT keys.* FROM tenants JOIN keys ON keys.id = tenants.current_key_id WHERE tenants.id = ?',
    );
    const row = this.currentKeyByTenant.get(tenantId);
    return row && toKey(row);
  }

  protected override readCacheEpoch(): number {
    this.cacheEpoch ??= this.sqlite.prepare<[], number>('SELECT n FROM cache_epoch WHERE id = 1').pluck();
    return this.cacheEpoch.get() as number;
  }

  override async close(): Promise<void> {
    await this.flushLookups()?.catch(() => undefined);
    await this.writer?.stop();
    await this.checkpointer?.stop();
    await super.close();
  }

  /** True while a writer thread commits this store's signature records and audit entries ahead of the signature. */
  protected override get commitsOnThread(): boolean {
    return this.writer !== undefined && this.writer.writesAhead !== false;
  }

  /** The writer thread died: commit on the event loop from now on (the writes it held were failed). */
  writerDied(): void {
    this.writer = undefined;
  }

  /** Store.commitRelayedWrite: a request worker's write goes into this store's group commit with its own. */
  commitRelayedWrite(write: Write): Promise<number | undefined> {
    return this.enqueue(write);
  }

  protected override enqueue(write: Write): Promise<number | undefined> {
    if (!this.writer) return super.enqueue(write);
    const writer = this.writer;
    // Hashes waiting ride along with this write (an UPDATE each): no message and no commit of their own under load.
    const lookups = this.takeDeferredLookups();
    const carrying = lookups.length > 0 ? { ...write, lookups: [...(write.lookups ?? []), ...lookups] } : write;
    const written = new Promise<number | undefined>((resolve, reject) => writer.write(carrying, resolve, reject));
    // The batch failed (another write in it): the hashes that rode along go again in a commit of their own, where
    // they cannot fail anyone's signature (setting one twice is a no-op).
    if (lookups.length > 0) written.catch(() => this.writeLookupsAlone(lookups));
    return written;
  }

  private writeLookupsAlone(lookups: LookupRow[]): void {
    const writer = this.writer;
    const written = writer
      ? new Promise<number | undefined>((resolve, reject) => writer.write({ lookups }, resolve, reject))
      : super.enqueue({ lookups });
    written.catch(() => undefined);
  }

  /**
   * With a writer thread, the hash waits for the next write (a signature's entry under load, milliseconds away);
   * alone it goes after LOOKUP_DELAY_MS. Without one, the next group commit on the event loop takes it.
   */
  protected override writeSignatureLookup(lookup: SignatureLookup): Promise<void> {
    if (!this.writer) return super.writeSignatureLookup(lookup);
    this.deferLookups([lookupRowOf(lookup)]);
    return Promise.resolve();
  }

  private deferLookups(rows: LookupRow[]): void {
    this.deferredLookups.push(...rows);
    this.lookupTimer ??= setTimeout(() => void this.flushLookups()?.catch(() => undefined), LOOKUP_DELAY_MS);
    this.lookupTimer.unref();
  }

  private takeDeferredLookups(): LookupRow[] {
    if (this.deferredLookups.length === 0) return [];
    clearTimeout(this.lookupTimer);
    this.lookupTimer = undefined;
    return this.deferredLookups.splice(0);
  }

  /** Writes the hashes still waiting, in a commit of their own. */
  private flushLookups(): Promise<void> | undefined {
    const lookups = this.takeDeferredLookups();
    if (lookups.length === 0) return undefined;
    return (this.writer ? this.enqueue({ lookups }) : super.enqueue({ lookups })).then(() => undefined);
  }

  /** Runs a checkpoint pass on the checkpointer thread now (tests); resolves with the thread's counters. */
  async checkpointNow(): Promise<CheckpointerStats | undefined> {
    return this.checkpointer?.now();
  }

  protected override async commitWrites(writes: WriteBatch) {
    if (!this.writeBatch) {
      const insertSignature = this.sqlite.prepare<Database['signatures']>(
        'INSERT INTO signatures (id, tenant_id, key_id, algorithm, hash, caller, created_at) ' +
          'VALUES (@id, @tenant_id, @key_id, @algorithm, @hash, @caller, @created_at)',
      );
      const headRow = this.sqlite.prepare<[], { seq: number; hash: string | Buffer }>(
        'SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1',
      );
      const head = () => {
        const row = headRow.get();
        return row && { seq: row.seq, hash: entryPacking.hashHex(row.hash) };
      };
      const words = sqliteWords(this.sqlite);
      const insertAudit = this.sqlite.prepare<Database['audit_log']>(INSERT_AUDIT_SQL);
      const insertEvent = this.sqlite.prepare<OutboxRow>(INSERT_EVENT_SQL);
      const setSignatureHash = this.sqlite.prepare<{ seq: number; signature_sha256: Buffer }>(SET_SIGNATURE_HASH_SQL);
      const completeRequest = this.sqlite.prepare<CompletedRequestRow>(COMPLETE_REQUEST_SQL);
      const insertBatchItem = this.sqlite.prepare<Database['batch_items']>(INSERT_BATCH_ITEM_SQL);
      const upsertIdempotency = this.sqlite.prepare<ReturnType<typeof idempotencyRow>>(UPSERT_IDEMPOTENCY_SQL);
      const batch = this.sqlite.transaction(
        ({ signatures, audits, events, lookups, completions, batchItems, idempotency }: WriteBatch) => {
          for (const row of signatures) insertSignature.run(row);
          const { onEntry, later } = signatureHashesOf(lookups);
          for (const l of later) {
            setSignatureHash.run({ seq: l.audit_seq, signature_sha256: Buffer.from(l.signature_sha256, 'hex') });
          }
          let firstSeq: number | undefined;
          if (audits.length > 0) {
            const rows = chainAuditRows(head(), audits);
            firstSeq = rows[0]?.seq;
            for (let i = 0; i < rows.length; i++) {
              const details = (audits[i] as AuditEntryInput).details;
              insertAudit.run(entryPacking.compactRow(rows[i] as AuditRow, details, onEntry.get(i), words));
            }
          }
          for (const row of events) insertEvent.run(row);
          for (const c of completions) completeRequest.run(completedRequestRow(c, Number(firstSeq)));
          for (const item of batchItems) insertBatchItem.run(batchItemRow(item, Number(firstSeq)));
          for (const record of idempotency) upsertIdempotency.run(idempotencyRow(record, Number(firstSeq)));
          return firstSeq;
        },
      );
      // IMMEDIATE: take the write lock before reading the chain's head, so another process cannot append between
      // the read and the write (a deferred transaction would fail to upgrade with SQLITE_BUSY instead).
      this.writeBatch = (writes) => {
        try {
          const firstSeq = batch.immediate(writes);
          words.committed();
          return firstSeq;
        } catch (err) {
          words.rolledBack();
          throw err;
        }
      };
    }
    const gate = this.checkpointer?.gate;
    // At most `commitsPerPass` commits between two checkpoint passes (CommitGate says why).
    while (gate?.mustWaitForPass()) await this.checkpointer?.passed();
    // The checkpointer holds the gate for a moment while it catches up with the WAL: wait for it without
    // blocking the event loop (requests go on; their records join this batch's wait).
    while (gate && !gate.tryEnter()) await this.checkpointer?.reopened();
    try {
      return this.writeBatch(writes);
    } finally {
      gate?.leave();
    }
  }
}

/** An outbox row written by a group commit (signature.denied with its audit entry); sqlite-writer.cjs has the same. */
const INSERT_EVENT_SQL =
  'INSERT INTO event_outbox (id, tenant_id, type, timestamp, data, order_key, fanned_out) ' +
  'VALUES (@id, @tenant_id, @type, @timestamp, @data, @order_key, @fanned_out)';

/**
 * An audit entry with its signature's SHA-256 (migration 0030; null when not known yet), stored compactly
 * (migration 0032: entry-packing.cjs); sqlite-writer.cjs has the same.
 */
const INSERT_AUDIT_SQL =
  'INSERT INTO audit_log (seq, at, tenant_id, actor, action, outcome, details, prev_hash, hash, signature_sha256, ' +
  'packed, digest) VALUES (@seq, @at, @tenant_id, @actor, @action, @outcome, @details, @prev_hash, @hash, ' +
  '@signature_sha256, @packed, @digest)';

/**
 * The SHA-256 of a signature whose entry was written ahead of it, set on that entry's row (migration 0030); a
 * hash sent again after a failed batch that carried it changes nothing. sqlite-writer.cjs has the same.
 */
const SET_SIGNATURE_HASH_SQL =
  'UPDATE audit_log SET signature_sha256 = @signature_sha256 WHERE seq = @seq AND signature_sha256 IS NULL';

/** A batch entry's item (migration 0029); sqlite-writer.cjs has the same. */
const INSERT_BATCH_ITEM_SQL =
  'INSERT INTO batch_items (batch_seq, item_index, digest, signature_sha256) ' +
  'VALUES (@batch_seq, @item_index, @digest, @signature_sha256)';

function batchItemRow({ audit, ...item }: BatchItemOnEntry, firstSeq: number): Database['batch_items'] {
  return {
    batch_seq: firstSeq + audit,
    item_index: item.item_index,
    digest: Buffer.from(item.digest, 'hex'),
    signature_sha256: Buffer.from(item.signature_sha256, 'hex'),
  };
}

/** An approval's request, completed by its signature's write (group-commit.ts: RequestCompletion); sqlite-writer.cjs has the same. */
const COMPLETE_REQUEST_SQL =
  "UPDATE pending_requests SET status = 'approved', signature = @signature, updated_at = @updated_at, " +
  "signed_seq = @signed_seq, batch = coalesce(@batch, batch) WHERE id = @id AND status = 'signing'";

/**
 * How long a hash of an entry written ahead waits for a write to ride along with before it is written alone. Short: an approval's
 * collector or a verifier asking right after the signature should find it; long enough that under load every row
 * rides along.
 */
const LOOKUP_DELAY_MS = 20;

export interface SqliteStoreOptions {
  /**
   * Checkpoint the WAL on a thread of its own instead of inside commits (sqlite-checkpointer.cjs), every
   * `intervalMs`. For long-running processes (the service, the in-process daemon); a
   * short CLI command keeps SQLite's automatic checkpoints.
   */
  backgroundCheckpoints?: {
    intervalMs: number;
    /** WAL length in frames past which a pass catches up with the commits held (default 1000, ~4 MB). */
    restartFrames?: number;
    /** Commits allowed between two passes before a commit waits for one (default 100; CommitGate says why). */
    commitsPerPass?: number;
    onError?: (message: string) => void;
    /** The thread's script (tests run one that fails, to check the fallback). */
    workerFile?: string;
  };
  /**
   * Commit signature records and audit entries on a thread of their own (sqlite-writer.cjs), so the commit runs
   * while the key store signs. After a commit the thread takes new writes for `spinMs` without sleeping.
   */
  writerThread?: {
    spinMs: number;
    onError?: (message: string) => void;
    /** The thread's script (tests run one that dies, to check the fallback). */
    workerFile?: string;
  };
  /**
   * Signature records and audit entries are committed by another process's writer (the primary of a service with
   * request workers, src/workers/); the sink says whether they go ahead of the signature (CommitSink.writesAhead).
   * That process also checkpoints the WAL, so this connection never does.
   */
  commitSink?: CommitSink;
}

export type SqliteKyselyStore = KyselyStore & {
  checkpointNow(): Promise<CheckpointerStats | undefined>;
  commitRelayedWrite(write: Write): Promise<number | undefined>;
};

/** The embedded default store: one SQLite file in the data dir, WAL mode, private to its owner. */
export function openSqliteStore(path: string, options: SqliteStoreOptions = {}): SqliteKyselyStore {
  // Create the file 0600 first: SQLite gives its -wal and -shm files the database file's mode.
  closeSync(openSync(path, 'a', 0o600));
  const sqlite = openSqlite(path);
  // WAL lets /readyz and reads proceed during a write; NORMAL sync is durable across process crashes in WAL mode.
  sqlite.pragma('journal_mode = WAL');
  sqlite.pragma('synchronous = NORMAL');
  sqlite.pragma('foreign_keys = ON');
  sqlite.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
  // After a checkpoint lets the WAL start over, a WAL file that grew past this is cut back.
  sqlite.pragma(`journal_size_limit = ${64 * 1024 * 1024}`);
  let checkpointer: Checkpointer | undefined;
  const background = options.backgroundCheckpoints;
  if (options.commitSink) sqlite.pragma('wal_autocheckpoint = 0');
  if (background) {
    sqlite.pragma('wal_autocheckpoint = 0');
    checkpointer = new Checkpointer(
      path,
      background.intervalMs,
      background.restartFrames ?? RESTART_FRAMES,
      background.commitsPerPass ?? COMMITS_PER_PASS,
      background.onError ?? (() => undefined),
      () => {
        if (sqlite.open) sqlite.pragma('wal_autocheckpoint = 1000');
      },
      background.workerFile,
    );
  }
  const db = new Kysely<Database>({ dialect: new SqliteDialect({ database: withStatementCache(sqlite) }) });
  let store: SqliteStore | undefined;
  const onThread = options.writerThread;
  const writer =
    options.commitSink ??
    (onThread &&
      new StoreWriter(
        path,
        onThread.spinMs,
        checkpointer?.gate,
        onThread.onError ?? (() => undefined),
        () => store?.writerDied(),
        onThread.workerFile,
      ));
  store = new SqliteStore(db, `sqlite:${path}`, sqlite, checkpointer, writer);
  return store;
}
