// The PostgreSQL store, for several service instances sharing one database. Every query but one is KyselyStore's;
// what differs is the group commit, which appends to the audit chain when several processes commit at once (below),
// and the connection pool.
import { Kysely, PostgresAdapter, PostgresDialect, type PostgresPool, type PostgresPoolClient } from 'kysely';
import pg from 'pg';
import { entryTexts } from '../audit/audit-chain.js';
import { signatureHashesOf, type WriteBatch } from '../commit/group-commit.js';
import { KyselyStore } from '../kysely-store.js';
import { MIGRATIONS } from '../migrations.js';
import type { Database } from '../tables.js';
import { advisoryLockKey } from './advisory-lock.js';

export interface PostgresStoreOptions {
  /** Connections kept by this process (default 10): enough for group commits plus reads, well under max_connections. */
  poolSize?: number;
  /**
   * How long a request waits for a database session before it fails as a store fault (default 5 s): a free
   * connection of this process's pool, or a new one connected and through its first round trip (which is where a
   * pooler such as PgBouncer in session mode makes a client wait for a server connection).
   */
  connectionTimeoutMs?: number;
  /**
   * Cancels a statement that runs longer than this on the server: set on every session this process opens and,
   * by applyStatementTimeoutDefault, as its role's default in the database (see startSession below). The service
   * passes its configured value (default 30 s). Left out (admin commands), sessions keep the role's default, so a
   * one-off command never puts another value on a server connection that PgBouncer shares with the service.
   */
  statementTimeoutMs?: number;
  /** How long a connection of the pool may stay idle before it closes (default 10 s, pg-pool's). */
  idleTimeoutMs?: number;
}

/**
 * The background store's pool (PostgresStore.background): one connection, closed 2 s after use. The integrator
 * and the event dispatcher take turns on it statement by statement (the dispatcher holds none while a receiver
 * answers). Busy, their passes come every 0.5 to 1 s and keep it open; idle, they back off to 15 s and it closes
 * between passes.
 */
const BACKGROUND_POOL = { poolSize: 1, idleTimeoutMs: 2_000 };

export const DEFAULT_STATEMENT_TIMEOUT_MS = 30_000;
export const DEFAULT_CONNECTION_WAIT_MS = 5_000;

export { advisoryLockKey };

/** Held while an instance makes its statement timeout the role's default (applyStatementTimeoutDefault). */
const STATEMENT_TIMEOUT_LOCK = advisoryLockKey('signbridge statement timeout default');

/** Held for the length of the transaction that appends to the audit chain: one appender at a time, any instance. */
const AUDIT_CHAIN_LOCK = advisoryLockKey('signbridge audit chain');
const MIGRATION_LOCK = advisoryLockKey('signbridge migrations');

/**
 * Kysely's PostgreSQL migration lock is a session advisory lock (pg_advisory_lock), taken and released by two
 * statements outside the migration's transaction. Through PgBouncer in transaction mode those two can run on
 * different server connections: the unlock then misses, the lock stays on a pooled server connection for good, and
 * every later start or admin command waits for it until the statement timeout (seen in CI: "cannot open the store:
 * canceling statement due to statement timeout"). PostgresStore.migrate takes a transaction-scoped lock instead,
 * so the Migrator's own lock does nothing here.
 */
class TransactionLockPostgresAdapter extends PostgresAdapter {
  override async acquireMigrationLock(): Promise<void> {}
  override async releaseMigrationLock(): Promise<void> {}
}

class TransactionLockPostgresDialect extends PostgresDialect {
  override createAdapter(): PostgresAdapter {
    return new TransactionLockPostgresAdapter();
  }
}

/**
 * The audit chain under several writers: each group commit (all the signature records and audit entries that
 * arrived while the previous one was in flight, up to WRITE_BATCH_MAX) is one call of migration 0013's function,
 * which takes a transaction-scoped advisory lock, reads the chain's head and appends. The lock serialises whole
 * batches, not single entries, so its cost (one lock hand-over and one commit per batch) is shared by every
 * signature in the batch; a crashed instance's lock dies with its connection, and the entries are hashed in the
 * same transaction as their records, so there is never a record without its entry or a gap to fill. Migration 0019's
 * version of the function also answers the seq of the batch's first entry (the others follow it in order: the lock
 * is held for the whole batch), which the signing path hands out as Signbridge-Log-Index; migration 0030's (v6)
 * writes the entries with their signatures' hashes and no signature records. One call is
 * one round trip, commit included: under load every round trip also waits for a turn of this process's event
 * loop, so the six that a transaction built statement by statement needs made the batch, not the database, the
 * limit (docs/benchmarks.md).
 */
export class PostgresStore extends KyselyStore {
  constructor(
    db: Kysely<Database>,
    description: string,
    private readonly pool: pg.Pool,
    /** The statement timeout this process sets on its sessions (ms), if it sets one. */
    readonly statementTimeoutMs?: number,
    private readonly openBackground?: () => PostgresStore,
  ) {
    // One group commit in flight at a time (group-commit.ts says why).
    super(db, description, { serialFlushes: true });
  }

  private backgroundStore?: PostgresStore;

  /**
   * The same database through a small pool of its own whose connections close soon after use, for the periodic
   * passes (log integrator, event dispatcher). On the request pool, passes every few seconds kept a connection
   * from ever idling out; behind PgBouncer in session mode, where each client connection holds a server connection,
   * two idle instances then held every server connection and an admin command waited in vain (seen in CI).
   */
  override background(): PostgresStore {
    if (!this.openBackground) return this;
    this.backgroundStore ??= this.openBackground();
    return this.backgroundStore;
  }

  override async close(): Promise<void> {
    await this.backgroundStore?.close();
    await super.close();
  }

  /**
   * Makes the statement timeout the default of this role in this database (ALTER ROLE CURRENT_USER IN DATABASE
   * ... SET, which a role may do for itself), when it is not already. Every server connection opened from then on
   * starts with it, whoever opens it: this is what reaches the server connections that PgBouncer in transaction
   * mode opens and hands to any client, which the SET of startSession (one session) does not. Called by the
   * long-running service only, so that an admin command run without the service's configuration does not change
   * it.
   */
  async applyStatementTimeoutDefault(): Promise<void> {
    const ms = this.statementTimeoutMs;
    if (ms === undefined || !Number.isSafeInteger(ms) || ms < 0) {
      throw new Error(`statement timeout must be whole milliseconds, got ${ms}`);
    }
    // A DO block cannot take parameters: `ms` is a checked integer, and the database name goes through %I.
    // Several instances starting at once raced here: two ALTER ROLEs inserting the same pg_db_role_setting row,
    // and one failed its start on the unique index (seen in a CI run with three instances). The transaction-scoped
    // advisory lock makes them take turns; the next one's check (a fresh snapshot per statement) then sees the row.
    await this.pool
      .query(`DO $$
BEGIN
  PERFORM pg_advisory_xact_lock(${STATEMENT_TIMEOUT_LOCK});
  IF NOT EXISTS (
    SELECT 1 FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase
     WHERE d.datname = current_database()
       AND s.setrole = (SELECT oid FROM pg_roles WHERE rolname = current_user)
       AND 'statement_timeout=${ms}' = ANY (s.setconfig)) THEN
    EXECUTE format('ALTER ROLE CURRENT_USER IN DATABASE %I SET statement_timeout = ${ms}', current_database());
  END IF;
END $$`)
      .catch((err: Error) => {
        throw new Error(
          `cannot make the statement timeout (${ms} ms) the default of this role in this database: ${err.message}; ` +
            `have an administrator run ALTER ROLE <role> IN DATABASE <database> SET statement_timeout = ${ms}`,
          { cause: err },
        );
      });
  }

  // The two statements of the signing path go straight to the pool, without Kysely's query building. They stay
  // unnamed (parsed per call, like Kysely's): a named statement lives on one server connection, which PgBouncer in
  // transaction mode does not keep for a client, and naming them gained nothing measurable here.
  protected override async readCacheEpoch(): Promise<number> {
    const { rows } = await this.pool.query<{ n: number }>(CACHE_EPOCH_SQL);
    return Number(rows[0]?.n);
  }

  /**
   * Migrates on one connection, in the Migrator's one transaction, which
   * first takes a transaction-scoped advisory lock (lockingPoolOfOne; the Migrator's own session lock is off:
   * TransactionLockPostgresAdapter says why). Instances starting at once take turns; a process that dies mid-way
   * drops the lock with its transaction, and its migrations with it. One connection is enough: a pooler with a
   * single server connection for us (PgBouncer's default_pool_size = 1 in session mode) can migrate.
   */
  override async migrate(): Promise<void> {
    // The common start: every migration of this release has run. One read answers that, without the migration
    // lock (for which the instances starting at once took turns) or the Migrator's look through the catalog. On a
    // restart with request workers each process migrated in turn: 0.2 to 1.3 s each on a loaded 2-core machine.
    if (await this.migrationsUpToDate()) return;
    // A connection of the pool, given back afterwards: the work that follows (an admin command's, the service's
    // first writes) goes on in the same session. A connection of its own, closed after, made an admin command give
    // up its server connection in PgBouncer's session mode and queue for one again, with the 5 s wait of a request
    // instead of the start's (seen in CI).
    let connection: pg.PoolClient;
    try {
      connection = await this.pool.connect();
    } catch (err) {
      // As KyselyStore.migrate reports a connection that fails: a store fault to wait out, with its cause.
      throw new Error(`cannot open the store: ${String(err)}`, { cause: err });
    }
    let failed = false;
    try {
      await this.migrateOn(
        new Kysely<Database>({ dialect: new TransactionLockPostgresDialect({ pool: lockingPoolOfOne(connection) }) }),
      );
    } catch (err) {
      failed = true;
      throw err;
    } finally {
      // After a failure the session may be broken (a dropped connection): close it rather than pool it.
      connection.release(failed);
    }
  }

  /** Whether the database has run exactly the migrations of this release (false too for a database never migrated). */
  private async migrationsUpToDate(): Promise<boolean> {
    let done: Set<string>;
    try {
      const { rows } = await this.pool.query<{ name: string }>('SELECT name FROM kysely_migration');
      done = new Set(rows.map((r) => r.name));
    } catch (err) {
      // undefined_table: a new database, which the Migrator sets up. Anything else is what migrate reports.
      if ((err as { code?: string }).code === '42P01') return false;
      throw new Error(`cannot open the store: ${String(err)}`, { cause: err });
    }
    const known = Object.keys(MIGRATIONS);
    return done.size === known.length && known.every((name) => done.has(name));
  }

  /** The database server's clock (the TSA's `database` clock check compares this host's clock with it). */
  async databaseTime(): Promise<Date> {
    const { rows } = await this.pool.query<{ now: Date }>('SELECT clock_timestamp() AS now');
    return (rows[0] as { now: Date }).now;
  }

  protected override async commitWrites({
    signatures,
    audits,
    events,
    lookups,
    completions,
    batchItems,
    idempotency,
  }: WriteBatch): Promise<number | undefined> {
    const { onEntry, later } = signatureHashesOf(lookups);
    // Each entry carries its signature's hash (migration 0030): the function inserts it with the entry's row.
    const entries: Array<Record<string, unknown>> = audits.map((e, i) => {
      const { columns, parts } = entryTexts(e);
      const signatureSha256 = onEntry.get(i);
      return { ...columns, ...parts, ...(signatureSha256 !== undefined && { signature_sha256: signatureSha256 }) };
    });
    const { rows } = await this.pool.query<{ first: number | null }>(GROUP_COMMIT_SQL, [
      AUDIT_CHAIN_LOCK,
      JSON.stringify(signatures),
      JSON.stringify(entries),
      JSON.stringify(later),
      JSON.stringify(events),
      JSON.stringify(completions),
      JSON.stringify(batchItems),
      JSON.stringify(idempotency),
    ]);
    const first = rows[0]?.first;
    return first === null || first === undefined ? undefined : Number(first);
  }
}

const CACHE_EPOCH_SQL = 'SELECT n FROM cache_epoch WHERE id = 1';
/**
 * Migration 0033's function, one round trip for everything a group commit writes: the entries with their
 * signatures' hashes, the hashes of entries written ahead, events, completed requests, batch items (v6, which it
 * calls), and the idempotency records of the requests the entries answer. v2 to v6 stay for instances on older code
 * during a rolling upgrade.
 */
const GROUP_COMMIT_SQL =
  'SELECT signbridge_group_commit_v8($1::bigint, $2::jsonb, $3::jsonb, $4::jsonb, $5::jsonb, $6::jsonb, $7::jsonb, ' +
  '$8::jsonb) AS first';

/** A pg client that knows when it began to connect, so that connecting and its first round trip share one wait. */
class TimedClient extends pg.Client {
  readonly connectStartedAt = Date.now();
}

/**
 * The first round trip of every new connection, within what is left of the connection wait. With a statement
 * timeout it sets it for the session (SET, not a startup parameter: PgBouncer refuses startup parameters it does
 * not know with 08P01 "unsupported startup parameter"; in transaction mode the SET stays on the server connection
 * it ran on, which only clients of the same role and database share, and applyStatementTimeoutDefault gives every
 * other server connection the same value). This first round trip is also where PgBouncer in session mode makes a
 * client wait for a free server connection, after it has already accepted the login: without this bound a
 * request waited there until PgBouncer's query_wait_timeout (120 s), unanswered. Rejecting makes pg-pool end the
 * client (pg destroys the socket of a client with a query in flight) and fail the request that wanted it.
 */
async function startSession(client: pg.ClientBase, statementTimeoutMs: number | undefined, waitMs: number) {
  const startedAt = client instanceof TimedClient ? client.connectStartedAt : Date.now();
  const left = Math.max(0, startedAt + waitMs - Date.now());
  const first = client.query(
    statementTimeoutMs === undefined ? 'SELECT 1' : `SET statement_timeout = ${statementTimeoutMs}`,
  );
  first.catch(() => undefined); // when the wait below wins, the query fails later as its socket is destroyed
  let timer: NodeJS.Timeout | undefined;
  const waited = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`${CONNECTION_WAIT_EXCEEDED} ${waitMs / 1000} s ${WHY_NO_SESSION}`)),
      left,
    );
  });
  try {
    await Promise.race([first, waited]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A Kysely pool over one open connection (which stays the caller's to end) on which every transaction begins by
 * taking the migration lock: the Migrator runs all pending migrations in one transaction, and the lock then lasts
 * exactly as long as they do. A transaction of our own around the Migrator's would not do: a migration that begins
 * a transaction of its own (0005 does, for SQLite) would commit ours half-way.
 */
function lockingPoolOfOne(client: pg.ClientBase): PostgresPool {
  // Only the query(sql, parameters) form: the Migrator streams nothing.
  const connection = {
    async query(text: string, parameters: readonly unknown[]) {
      const result = await client.query(text, [...parameters]);
      if (/^\s*(begin|start transaction)\b/i.test(text)) {
        await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK.toString()]);
      }
      return result;
    },
    release: () => undefined,
    // The driver boundary: the one form of query() Kysely calls here, not all of pg's PoolClient it is typed as.
  } as unknown as PostgresPoolClient;
  return { connect: async () => connection, end: async () => undefined };
}

/** The start of the message of a request that got no session in time (store-errors.ts knows it). */
const CONNECTION_WAIT_EXCEEDED = 'timeout exceeded when trying to connect: no database session within';
const WHY_NO_SESSION = '(the server, or a pooler such as PgBouncer, has no free connection)';

/** Opens (does not migrate) a PostgreSQL store; `url` is a postgres:// connection string (sslmode honoured). */
export function openPostgresStore(
  url: string,
  options: PostgresStoreOptions = {},
  /** This is a background store (PostgresStore.background), which has none of its own. */
  isBackground = false,
): PostgresStore {
  const { statementTimeoutMs } = options;
  if (statementTimeoutMs !== undefined && (!Number.isSafeInteger(statementTimeoutMs) || statementTimeoutMs < 0)) {
    throw new Error(`statement timeout must be whole milliseconds, got ${statementTimeoutMs}`);
  }
  const waitMs = options.connectionTimeoutMs ?? DEFAULT_CONNECTION_WAIT_MS;
  // pg-pool's onConnect hook (pg-pool 3.8+) is not in @types/pg yet.
  const config: pg.PoolConfig & { onConnect: (client: pg.ClientBase) => Promise<void> } = {
    connectionString: url,
    max: options.poolSize ?? 10,
    idleTimeoutMillis: options.idleTimeoutMs ?? 10_000,
    connectionTimeoutMillis: waitMs,
    application_name: 'signbridge',
    // The driver boundary: pg-pool takes any Client class; @types/pg's PoolConfig types it narrower.
    Client: TimedClient as unknown as pg.PoolConfig['Client'],
    onConnect: (client) => startSession(client, statementTimeoutMs, waitMs),
  };
  const pool = new pg.Pool(config);
  // A connection the server dropped (restart, failover) must not end the process: pg emits 'error' on the pool for
  // an idle one and on the client itself for one in use (whose query fails with it anyway, as a store fault).
  // The next request gets a new connection.
  pool.on('error', () => undefined);
  pool.on('connect', (client) => client.on('error', () => undefined));
  const db = new Kysely<Database>({ dialect: new TransactionLockPostgresDialect({ pool }) });
  const background = isBackground ? undefined : () => openPostgresStore(url, { ...options, ...BACKGROUND_POOL }, true);
  return new PostgresStore(db, `postgresql:${redactUrl(url)}`, pool, statementTimeoutMs, background);
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
