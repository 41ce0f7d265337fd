// `signbridge admin migrate`: moves an installation's state from its SQLite file to a PostgreSQL database, row for
// row (the audit chain verbatim, so its hashes still verify), in one transaction on the target, which must be empty.
import type { Kysely } from 'kysely';
import { sql } from 'kysely';
import { expandAuditRows, type StoredAuditRow, type WordTables } from './audit/audit-rows.js';
import { verifyAuditChain } from './audit/verify-chain.js';
import type { KyselyStore } from './kysely-store.js';
import type { Store } from './store.js';

/** Tables moved, parents before children (keys reference tenants). */
const MOVED_TABLES = [
  'tenants',
  'keys',
  'api_keys',
  'people',
  'memberships',
  // signature records from before migration 0030 (none since: a signature's `signed` entry is its record)
  'signatures',
  // the audit log, each `signed` entry with its signature's SHA-256 (migration 0030), rebuilt where SQLite stores it
  // compactly (migration 0032), and a batch entry's items
  'audit_log',
  'batch_items',
  'pending_requests',
  'policy_exceptions',
  'vulnerabilities',
  'trial_counters',
  // keys awaiting imported material (their wrapping keys stay in the token, in the same data dir)
  'key_imports',
  // answers to retried signatures: a client that retries across the move still gets its first answer
  'sign_idempotency',
  // tenants' trust in CI issuers, and the tokens already exchanged (a token stays single-use across the move)
  'workload_trust_rules',
  'workload_token_uses',
  // events: subscriptions (with their secrets), the outbox and what each subscription still has to get
  'webhook_subscriptions',
  'event_outbox',
  'event_deliveries',
  // how far each subscription's signature.signed events have been read from the audit log (migration 0028)
  'event_log_cursors',
  // time-stamping identities: key references (same data dir or KMS), chains, and the serial blocks handed out
  'tsa_identities',
  // which `signed` entry from before migration 0030 records a signature, by the SHA-256 of its bytes (the
  // transparency log's lookups; later entries carry the hash on their own row)
  'signature_lookups',
  // the transparency log (migration 0018): its size, tiles, every checkpoint and its key's reference (the key stays
  // in the key store), so the moved log goes on as the same log, consistent with the checkpoints already published
  'log_state',
  'log_tiles',
  'log_checkpoints',
  'log_keys',
] as const;

/**
 * Audit rows as the target stores them: rows stored compactly on SQLite (migration 0032) rebuilt into the canonical
 * row (hashes in hex, prev_hash, details as JSON), which PostgreSQL's appender continues and its readers read.
 */
async function canonicalAuditRows<DB extends WordTables>(read: Kysely<DB>, page: unknown[]): Promise<unknown[]> {
  const rows = await expandAuditRows(read, page as StoredAuditRow[]);
  return rows.map((r) => ({ ...r, packed: null, digest: null }));
}

/**
 * State that is not moved: sign-in attempts, browser sessions and device codes live minutes (people sign in again),
 * the heartbeat and cache epoch are per database, and Kysely's own tables are made by the target's migrations.
 */
const LEFT_BEHIND = new Set([
  // the dictionary of packed audit entries (migration 0032): the entries are moved rebuilt, so none is packed there
  'audit_words',
  'oauth_attempts',
  'browser_sessions',
  'device_codes',
  'store_heartbeat',
  'cache_epoch',
  'kysely_migration',
  'kysely_migration_lock',
]);

/** Tables made WITHOUT ROWID on SQLite: paged in their primary key's order instead of the rowid's. */
const WITHOUT_ROWID: Partial<Record<(typeof MOVED_TABLES)[number], ReturnType<typeof sql>>> = {
  batch_items: sql`batch_seq, item_index`,
};

/** Rows inserted per statement: PostgreSQL allows 65,535 parameters; the widest table has about 15 columns. */
const ROWS_PER_INSERT = 500;

export class MoveError extends Error {}

export interface MoveReport {
  rows: Record<string, number>;
  auditEntries: number;
  auditHead: string;
}

// biome-ignore lint/suspicious/noExplicitAny: rows are copied as they are, table by table, whatever their columns
type AnyDb = Kysely<any>;

function dbOf(store: KyselyStore): AnyDb {
  return store.database;
}

/**
 * Copies every table of `from` (SQLite, migrated) into `to` (PostgreSQL, migrated and empty). Refuses a target that
 * holds tenants, API keys, people or audit entries, and a source table it does not know (a newer schema than this
 * program). Verifies the copied audit chain and the row counts before it commits.
 */
export async function moveStore(
  from: KyselyStore,
  to: KyselyStore,
  progress: (message: string) => void = () => undefined,
): Promise<MoveReport> {
  const source = dbOf(from);
  const target = dbOf(to);
  const tables = (
    await sql<{
      name: string;
    }>`SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`.execute(source)
  ).rows.map((r) => r.name);
  const unknown = tables.filter((t) => !LEFT_BEHIND.has(t) && !(MOVED_TABLES as readonly string[]).includes(t));
  if (unknown.length > 0) {
    throw new MoveError(`the source has tables this signbridge does not know how to move: ${unknown.join(', ')}`);
  }
  for (const table of ['tenants', 'api_keys', 'people', 'audit_log']) {
    const row = await target.selectFrom(table).select(sql<number>`count(*)`.as('n')).executeTakeFirstOrThrow();
    if (Number(row.n) > 0) {
      throw new MoveError(`the target database is not empty (${table} has ${row.n} rows); refusing to overwrite it`);
    }
  }
  const rows: Record<string, number> = {};
  // One read transaction on the source: a snapshot even while the installation keeps running.
  await source.transaction().execute(async (read) => {
    await target.transaction().execute(async (write) => {
      // The target's migration made the empty log's state row; the source's replaces it.
      if (tables.includes('log_state')) await write.deleteFrom('log_state').execute();
      for (const table of MOVED_TABLES) {
        if (!tables.includes(table)) continue;
        let copied = 0;
        let offset = 0;
        for (;;) {
          const page = await read
            .selectFrom(table)
            .selectAll()
            .orderBy(WITHOUT_ROWID[table] ?? sql`rowid`)
            .limit(ROWS_PER_INSERT)
            .offset(offset)
            .execute();
          if (page.length === 0) break;
          await write
            .insertInto(table)
            .values(table === 'audit_log' ? await canonicalAuditRows(read, page) : page)
            .execute();
          copied += page.length;
          offset += page.length;
          if (copied % 10_000 < ROWS_PER_INSERT) progress(`${table}: ${copied} rows`);
        }
        rows[table] = copied;
        progress(`${table}: ${copied} rows copied`);
      }
      // The outbox's seq is a bigserial on PostgreSQL: rows copied with their seq leave its sequence at 1, and the
      // first event after the move would collide with a moved one. The sequence continues after the highest.
      if (tables.includes('event_outbox')) {
        await sql`SELECT setval(pg_get_serial_sequence('event_outbox', 'seq'), (SELECT coalesce(max(seq), 0) + 1 FROM event_outbox), false)`.execute(
          write,
        );
      }
      for (const table of MOVED_TABLES) {
        if (!tables.includes(table)) continue;
        const n = await write.selectFrom(table).select(sql<number>`count(*)`.as('n')).executeTakeFirstOrThrow();
        if (Number(n.n) !== rows[table]) {
          throw new MoveError(`${table}: ${rows[table]} rows read but ${n.n} in the target; nothing was committed`);
        }
      }
    });
  });
  const chain = await verifyAuditChain(to as Store);
  if (chain.problem) {
    throw new MoveError(
      `the copied audit chain does not verify at entry ${chain.problem.seq}: ${chain.problem.problem}`,
    );
  }
  if (chain.count !== (rows.audit_log ?? 0)) {
    throw new MoveError(`the copied audit chain has ${chain.count} entries, the source ${rows.audit_log}`);
  }
  return { rows, auditEntries: chain.count, auditHead: chain.head };
}
