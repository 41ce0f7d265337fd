// The PostgreSQL store, for several service instances sharing one database. Every query but one is KyselyStore's;
// what differs is the group commit, which appends to the audit chain when several processes commit at once (below),
// and the connection pool.
import { createHash } from 'node:crypto';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { auditColumns, entryHashParts } from './audit-chain.js';
import { type Database, KyselyStore, type WriteBatch } from './kysely-store.js';

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
 * The audit chain under several writers: each group commit (all the signature records and audit entries that
 * arrived while the previous one was in flight, up to WRITE_BATCH_MAX) is one call of migration 0013's function,
 * which takes a transaction-scoped advisory lock, reads the chain's head and appends. The lock serialises whole
 * batches, not single entries, so its cost (one lock hand-over and one commit per batch) is shared by every
 * signature in the batch; a crashed instance's lock dies with its connection, and the entries are hashed in the
 * same transaction as their records, so there is never a record without its entry or a gap to fill. One call is
 * one round trip, commit included: under load every round trip also waits for a turn of this process's event
 * loop, so the six that a transaction built statement by statement needs made the batch, not the database, the
 * limit (docs/benchmarks.md).
 */
export class PostgresStore extends KyselyStore {
  protected override readonly serialFlushes = true;

  constructor(
    db: Kysely<Database>,
    description: string,
    private readonly pool: pg.Pool,
  ) {
    super(db, description);
  }

  // The two statements of the signing path go straight to the pool, without Kysely's query building. They stay
  // unnamed (parsed per call, like Kysely's): a named statement lives on one server connection, which PgBouncer in
  // transaction mode does not keep for a client, and naming them gained nothing measurable here.
  protected override async readCacheEpoch(): Promise<number> {
    const { rows } = await this.pool.query<{ n: number }>(CACHE_EPOCH_SQL);
    return Number(rows[0]?.n);
  }

  protected override async commitWrites({ signatures, withdrawals, audits }: WriteBatch): Promise<void> {
    const entries = audits.map((e) => ({ ...auditColumns(e), ...entryHashParts(e) }));
    await this.pool.query(GROUP_COMMIT_SQL, [
      AUDIT_CHAIN_LOCK,
      JSON.stringify(signatures),
      withdrawals,
      JSON.stringify(entries),
    ]);
  }
}

const CACHE_EPOCH_SQL = 'SELECT n FROM cache_epoch WHERE id = 1';
const GROUP_COMMIT_SQL = 'SELECT signbridge_group_commit_v1($1::bigint, $2::jsonb, $3::text[], $4::jsonb)';

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
  return new PostgresStore(db, `postgresql:${redactUrl(url)}`, pool);
}

/** Why `url` cannot be a PostgreSQL connection URL, or undefined when it can (checked before any connection). */
export function postgresUrlProblem(url: string): string | undefined {
  if (!/^postgres(ql)?:\/\//.test(url)) return 'must be a postgres://user:password@host:port/dbname URL';
  try {
    new URL(url); // what pg parses it with
  } catch {
    return 'is not a valid URL: check the host, the port (1-65535) and that the password is percent-encoded';
  }
  return undefined;
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
