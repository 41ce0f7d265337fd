// The PostgreSQL store, for several service instances sharing one database. Every query is KyselyStore's; what
// differs is how the audit chain is appended when several processes commit at once (below) and the connection pool.
import { createHash } from 'node:crypto';
import { Kysely, PostgresDialect, sql, type Transaction } from 'kysely';
import pg from 'pg';
import { type Database, KyselyStore } from './kysely-store.js';

export interface PostgresStoreOptions {
  /** Connections kept by this process (default 10): enough for group commits plus reads, well under max_connections. */
  poolSize?: number;
  /** How long a request waits for a free connection before it fails as a store fault (default 5 s). */
  connectionTimeoutMs?: number;
  /** Cancels a statement that runs longer than this on the server (default 30 s). */
  statementTimeoutMs?: number;
}

/**
 * A stable 64-bit advisory-lock key from a name (first 8 bytes of its SHA-256): the same in every instance and every
 * release, unlike hashtext(), an undocumented internal function.
 */
export function advisoryLockKey(name: string): bigint {
  return createHash('sha256').update(name).digest().readBigInt64BE(0);
}

/** Held for the length of the transaction that appends to the audit chain: one appender at a time, any instance. */
const AUDIT_CHAIN_LOCK = advisoryLockKey('signbridge audit chain');

/**
 * The audit chain under several writers: each group commit (all the signature records and audit entries of one
 * event-loop turn, up to WRITE_BATCH_MAX) takes a transaction-scoped advisory lock, reads the head and appends. The
 * lock serialises whole batches, not single entries, so its cost (one lock hand-over and one commit per batch) is
 * shared by every signature in the batch; a crashed instance's lock dies with its connection, and the entries are
 * hashed in the same transaction as their records, so there is never a record without its entry or a gap to fill.
 */
export class PostgresStore extends KyselyStore {
  protected override readonly serialFlushes = true;

  protected override async lockAuditChain(tx: Transaction<Database>): Promise<void> {
    await sql`SELECT pg_advisory_xact_lock(${AUDIT_CHAIN_LOCK})`.execute(tx);
  }
}

/** Opens (does not migrate) a PostgreSQL store; `url` is a postgres:// connection string (sslmode honoured). */
export function openPostgresStore(url: string, options: PostgresStoreOptions = {}): PostgresStore {
  const pool = new pg.Pool({
    connectionString: url,
    max: options.poolSize ?? 10,
    connectionTimeoutMillis: options.connectionTimeoutMs ?? 5000,
    statement_timeout: options.statementTimeoutMs ?? 30_000,
    application_name: 'signbridge',
  });
  // A connection the server dropped (restart, failover) must not end the process: pg emits 'error' on the pool for
  // an idle one and on the client itself for one in use (whose query fails with it anyway, as a store fault).
  // The next request gets a new connection.
  pool.on('error', () => undefined);
  pool.on('connect', (client) => client.on('error', () => undefined));
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  return new PostgresStore(db, `postgresql:${redactUrl(url)}`);
}

/** The URL without its password, for logs and /readyz. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return 'postgres://(unparsable URL)';
  }
}
