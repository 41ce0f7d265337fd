// The Store contract on Kysely. SQL dialects differ only in how the Kysely instance is made
// (sqlite-store.ts, and postgres-store.ts later), so every query lives here once.
import { randomInt } from 'node:crypto';
import { type Kysely, type MigrationProvider, Migrator, PostgresAdapter, sql, type Transaction } from 'kysely';
import type { KeySpec, SigningAlgorithm } from '../crypto/algorithms.js';
import type { KeyOrigin, KeyStoreKind, WrappingAlgorithm, WrappingKeySpec } from '../keys/key-store.js';
import { AccessCache } from './access-cache.js';
import type { AuditRow } from './audit-chain.js';
import {
  EventStore,
  type EventsFor,
  type EventTables,
  eventsOf,
  insertEvents,
  type OutboxRow,
  outboxRows,
} from './event-store.js';
import { LogStore, type LogTables } from './log-store.js';
import { MIGRATIONS } from './migrations.js';
import { PeopleStore, type PeopleTables } from './people-store.js';
import type { EventInput, EventKind } from './records/event-kinds.js';
import type { Role } from './records/roles.js';
import type { WorkloadIdentity } from './records/workload-identity.js';
import { RetentionStore } from './retention-store.js';
import {
  type ApiKeyRecord,
  type AuditEntry,
  type AuditEntryInput,
  ConflictError,
  type ExceptionRecord,
  type IdempotencyClaim,
  type IdempotencyState,
  type KeyImportRecord,
  type KeyRecord,
  PENDING_STATUSES,
  type PendingRequestRecord,
  type RequestStatus,
  type SignatureLookup,
  type SignatureRecord,
  type Store,
  type StoredVulnerability,
  type TenantRecord,
  type TrialCount,
  WAITING_STATUSES,
} from './store.js';
import { TsaStore, type TsaTables } from './tsa-store.js';
import { WorkloadStore, type WorkloadTables } from './workload-store.js';

export interface Database
  extends Omit<PeopleTables, 'api_keys' | 'cache_epoch'>,
    WorkloadTables,
    EventTables,
    TsaTables,
    Omit<LogTables, 'audit_log'> {
  tenants: { id: string; current_key_id: string; created_at: string };
  keys: {
    id: string;
    tenant_id: string;
    version: number;
    key_spec: string;
    key_ref: string;
    public_key_pem: string;
    created_at: string;
    /** Migration 0010. */
    key_store: string;
    origin: string;
    material_expires_at: string | null;
  };
  /** Migration 0011. */
  key_imports: {
    id: string;
    tenant_id: string;
    key_spec: string;
    key_store: string;
    key_ref: string | null;
    wrapping_key_ref: string | null;
    wrapping_algorithm: string;
    wrapping_key_spec: string;
    created_at: string;
    valid_to: string;
  };
  /** Migration 0012. */
  sign_idempotency: {
    caller_id: string;
    idem_key: string;
    fingerprint: string;
    reply: string | null;
    created_at: string;
    updated_at: string;
  };
  api_keys: {
    id: string;
    secret_hash: string;
    tenant_id: string | null;
    role: string;
    label: string;
    created_at: string;
    revoked_at: string | null;
    /** Person keys (migration 0009): the owner, the roles as a JSON array, the expiry, how it was minted. */
    person_id: string | null;
    roles: string | null;
    expires_at: string | null;
    created_via: string | null;
    /** Migration 0015: a key minted by the workload token exchange carries the verified identity (JSON). */
    workload: string | null;
  };
  pending_requests: {
    id: string;
    tenant_id: string;
    key_id: string;
    algorithm: string;
    hash: string;
    inputs: string;
    requester: string;
    rule: string;
    reason: string;
    status: string;
    next_stages: string;
    decisions: string;
    signature: string | null;
    created_at: string;
    expires_at: string;
    updated_at: string;
    /** Migration 0014. */
    continuation_key: string | null;
    /** Migration 0016: when approvers were reminded of it (once). */
    reminded_at?: string | null;
    /** Migration 0019: the seq of the `signed` entry of its signature, once approved. */
    signed_seq?: number | null;
  };
  policy_exceptions: {
    id: string;
    tenant_id: string;
    vuln_id: string;
    project: string | null;
    artifact_type: string | null;
    reason: string;
    created_by: string;
    created_at: string;
    expires_at: string;
    revoked_at: string | null;
    revoked_by: string | null;
    /** Migration 0016: when its expiry was warned of (once). */
    expiry_warned_at?: string | null;
  };
  vulnerabilities: { id: string; modified: string; record: string; imported_at: string };
  audit_log: AuditRow;
  cache_epoch: { id: number; n: number };
  trial_counters: { client: string; window_start: number; count: number };
  store_heartbeat: { id: number; at: string; pad: Buffer };
  signatures: {
    id: string;
    tenant_id: string;
    key_id: string;
    algorithm: string;
    hash: string;
    caller: string;
    created_at: string;
  };
  /** Migration 0019: SHA-256 of a signature's raw bytes → its `signed` audit entry. */
  signature_lookups: { audit_seq: number; tenant_id: string; signature_sha256: Buffer; signature_id: string };
}

/**
 * A signature_lookups row as a write carries it (the digest in hex: writes cross to the SQLite writer thread, where
 * a Buffer would arrive as a plain Uint8Array).
 */
export interface LookupRow {
  audit_seq: number;
  tenant_id: string;
  signature_sha256: string;
  signature_id: string;
}

/** A lookup row that takes the seq of the audit entry at index `audit` of its batch. */
export type LookupOnEntry = Omit<LookupRow, 'audit_seq'> & { audit: number };

/** Largest group-commit batch; bounds the statement's size and the number of distinct cached statements. */
export const WRITE_BATCH_MAX = 64;

/** The longest window a request counter may have (trial.windowSeconds is capped to it): older rows are swept. */
export const TRIAL_WINDOW_MAX_MS = 7 * 24 * 3600 * 1000;
/** Tries of a batch whose chain head another connection took meanwhile. */
export const CHAIN_RACE_ATTEMPTS = 5;

/** One caller's part of a group commit: a signature record to add or withdraw, and/or an audit entry. */
export interface PendingWrite {
  signature?: Database['signatures'];
  /** Id of a signature record to delete (the key store failed after the record was written ahead). */
  withdraw?: string;
  audit?: AuditEntryInput;
  /** Events told of by this write (signature.denied with its audit entry), in the same transaction. */
  events?: OutboxRow[];
  /** The signature's lookup row, on the seq of this write's audit entry (migration 0019). */
  lookup?: Omit<LookupRow, 'audit_seq'>;
  /** Lookup rows of signatures whose records were written earlier (ahead of the signature), riding along. */
  lookups?: LookupRow[];
  /** Settles with the seq assigned to this write's audit entry (undefined without one). */
  resolve: (seq: number | undefined) => void;
  reject: (err: unknown) => void;
}

/** What one group commit writes, in this order: records, withdrawals, then the audit entries chained on. */
export interface WriteBatch {
  signatures: Database['signatures'][];
  withdrawals: string[];
  audits: AuditEntryInput[];
  events: OutboxRow[];
  /** Lookup rows with their seq (written ahead), and rows on the seq of one of `audits`. */
  lookups: Array<LookupRow | LookupOnEntry>;
}

export function toWriteBatch(writes: Omit<PendingWrite, 'resolve' | 'reject'>[]): WriteBatch {
  const batch: WriteBatch = { signatures: [], withdrawals: [], audits: [], events: [], lookups: [] };
  for (const w of writes) {
    if (w.events) batch.events.push(...w.events);
    if (w.signature) batch.signatures.push(w.signature);
    if (w.withdraw !== undefined) batch.withdrawals.push(w.withdraw);
    if (w.lookups) batch.lookups.push(...w.lookups);
    if (w.audit) {
      if (w.lookup) batch.lookups.push({ ...w.lookup, audit: batch.audits.length });
      batch.audits.push(w.audit);
    }
  }
  return batch;
}

/** The rows of `lookups`, each with its seq: its own, or its entry's (entries get first, first + 1, ...). */
export function lookupRows(lookups: WriteBatch['lookups'], firstSeq: number | undefined): LookupRow[] {
  return lookups.map((l) => {
    if (!('audit' in l)) return l;
    const { audit, ...row } = l;
    return { ...row, audit_seq: Number(firstSeq) + audit };
  });
}

/**
 * Settles each write of a committed batch with its audit entry's seq: the batch's entries were chained in the
 * writes' order from `firstSeq` on.
 */
export function settleWithSeqs(
  writes: ReadonlyArray<{ audit?: unknown; settle: (seq: number | undefined) => void }>,
  firstSeq: number | undefined,
): void {
  let next = Number(firstSeq);
  for (const w of writes) w.settle(w.audit !== undefined && firstSeq !== undefined ? next++ : undefined);
}

export function lookupRowOf(l: SignatureLookup): LookupRow {
  return {
    audit_seq: l.auditSeq,
    tenant_id: l.tenantId,
    signature_sha256: l.signatureSha256.toString('hex'),
    signature_id: l.signatureId,
  };
}

/** Another connection appended to the audit chain between our read of its head and our write. */
function isChainRace(err: unknown): boolean {
  return isUniqueViolation(err) || /^SQLITE_BUSY/.test(String((err as { code?: string })?.code));
}

const provider: MigrationProvider = { getMigrations: async () => MIGRATIONS };

/** Every write to tenants, keys or API keys raises the cache epoch in its transaction (migration 0006 says why). */
async function raiseCacheEpoch(tx: Transaction<Database>): Promise<void> {
  await tx
    .updateTable('cache_epoch')
    .set((eb) => ({ n: eb('n', '+', 1) }))
    .where('id', '=', 1)
    .execute();
}

/** True for a unique/primary-key violation in either SQLite or PostgreSQL. */
export function isUniqueViolation(err: unknown): boolean {
  const e = err as { code?: string };
  return e?.code === 'SQLITE_CONSTRAINT_PRIMARYKEY' || e?.code === 'SQLITE_CONSTRAINT_UNIQUE' || e?.code === '23505';
}

function toTenant(row: Database['tenants']): TenantRecord {
  return { id: row.id, currentKeyId: row.current_key_id, createdAt: row.created_at };
}

export function toKey(row: Database['keys']): KeyRecord {
  return {
    id: row.id,
    tenantId: row.tenant_id,
    version: Number(row.version),
    keySpec: row.key_spec as KeySpec,
    keyRef: row.key_ref,
    publicKeyPem: row.public_key_pem,
    createdAt: row.created_at,
    keyStore: row.key_store as KeyStoreKind,
    origin: row.origin as KeyOrigin,
    materialExpiresAt: row.material_expires_at,
  };
}

function fromKey(k: KeyRecord): Database['keys'] {
  return {
    id: k.id,
    tenant_id: k.tenantId,
    version: k.version,
    key_spec: k.keySpec,
    key_ref: k.keyRef,
    public_key_pem: k.publicKeyPem,
    created_at: k.createdAt,
    key_store: k.keyStore,
    origin: k.origin,
    material_expires_at: k.materialExpiresAt,
  };
}

function toKeyImport(row: Database['key_imports']): KeyImportRecord {
  return {
    id: row.id,
    tenantId: row.tenant_id,
    keySpec: row.key_spec as KeySpec,
    keyStore: row.key_store as KeyStoreKind,
    keyRef: row.key_ref,
    wrappingKeyRef: row.wrapping_key_ref,
    wrappingAlgorithm: row.wrapping_algorithm as WrappingAlgorithm,
    wrappingKeySpec: row.wrapping_key_spec as WrappingKeySpec,
    createdAt: row.created_at,
    validTo: row.valid_to,
  };
}

function toAuditEntry(r: Database['audit_log']): AuditEntry {
  return {
    seq: Number(r.seq),
    at: r.at,
    tenantId: r.tenant_id,
    actor: r.actor,
    action: r.action,
    outcome: r.outcome,
    details: JSON.parse(r.details),
    prevHash: r.prev_hash,
    hash: r.hash,
  };
}

function toPending(row: Database['pending_requests']): PendingRequestRecord {
  return {
    id: row.id,
    tenantId: row.tenant_id,
    keyId: row.key_id,
    algorithm: row.algorithm as SigningAlgorithm,
    hash: row.hash,
    inputs: row.inputs,
    requester: row.requester,
    rule: row.rule,
    reason: row.reason,
    status: row.status as RequestStatus,
    nextStages: JSON.parse(row.next_stages),
    decisions: JSON.parse(row.decisions),
    signature: row.signature,
    createdAt: row.created_at,
    expiresAt: row.expires_at,
    updatedAt: row.updated_at,
    continuationKey: row.continuation_key,
    signedSeq: row.signed_seq == null ? null : Number(row.signed_seq),
  };
}

function toException(row: Database['policy_exceptions']): ExceptionRecord {
  return {
    id: row.id,
    tenantId: row.tenant_id,
    vulnId: row.vuln_id,
    project: row.project,
    artifactType: row.artifact_type,
    reason: row.reason,
    createdBy: row.created_by,
    createdAt: row.created_at,
    expiresAt: row.expires_at,
    revokedAt: row.revoked_at,
    revokedBy: row.revoked_by,
  };
}

/** An api_keys row, with its owner's disabled_at when the key belongs to a person (API_KEY_WITH_OWNER). */
export type ApiKeyRow = Database['api_keys'] & { person_disabled_at?: string | null };

export function toApiKey(row: ApiKeyRow): ApiKeyRecord {
  return {
    id: row.id,
    secretHash: row.secret_hash,
    tenantId: row.tenant_id,
    role: row.role as Role,
    label: row.label,
    createdAt: row.created_at,
    revokedAt: row.revoked_at,
    roles: row.roles ? (JSON.parse(row.roles) as Role[]) : [row.role as Role],
    personId: row.person_id ?? null,
    expiresAt: row.expires_at ?? null,
    createdVia: row.created_via ?? null,
    personDisabledAt: row.person_disabled_at ?? null,
    workload: row.workload ? (JSON.parse(row.workload) as WorkloadIdentity) : null,
  };
}

/** Big enough to need pages of its own (overflow pages), so the probe allocates as a batch of signatures would. */
const HEARTBEAT_PAD = Buffer.alloc(3 * 4096, 0x5a);
/** The key and, for a person's key, whether its owner is disabled: one read on the signing path. */
export const API_KEY_WITH_OWNER =
  'SELECT api_keys.*, people.disabled_at AS person_disabled_at FROM api_keys ' +
  'LEFT JOIN people ON people.id = api_keys.person_id WHERE api_keys.id = ?';

export abstract class KyselyStore implements Store {
  readonly people: PeopleStore;
  readonly workload: WorkloadStore;
  readonly events: EventStore;
  readonly tsa: TsaStore;
  readonly log: LogStore;
  readonly retention: RetentionStore;
  /** The signing path's two reads, answered from memory until a change may have happened (access-cache.ts). */
  protected readonly access = new AccessCache(() => this.readCacheEpoch());

  constructor(
    protected readonly db: Kysely<Database>,
    readonly description: string,
  ) {
    // A write there changed whether some API key works (a person disabled, a membership and its keys gone).
    this.people = new PeopleStore(db as unknown as Kysely<PeopleTables>, () => this.access.forget());
    this.workload = new WorkloadStore(db as unknown as Kysely<WorkloadTables>);
    this.tsa = new TsaStore(db as unknown as Kysely<TsaTables>);
    this.events = new EventStore(
      db as unknown as Kysely<EventTables>,
      db.getExecutor().adapter instanceof PostgresAdapter,
      (write) => this.access.changing(write),
    );
    this.log = new LogStore(db as unknown as Kysely<LogTables>, db.getExecutor().adapter instanceof PostgresAdapter);
    this.retention = new RetentionStore(
      db as unknown as Kysely<unknown>,
      db.getExecutor().adapter instanceof PostgresAdapter,
    );
  }

  /** Writes `events` in the transaction `tx` (the change they tell of is in it too). */
  protected async writeEvents(tx: Kysely<Database>, events: readonly EventInput[] | undefined): Promise<void> {
    await insertEvents(tx as unknown as Kysely<EventTables>, events, new Date().toISOString());
    if (events && events.length > 0) this.events.onWritten?.();
  }

  /** Cache reads and misses, for tests and diagnostics. */
  get cacheStats(): { hits: number; misses: number } {
    return this.access.stats;
  }

  /** Migration 0006's counter, read once per event-loop turn by the access cache. */
  protected readCacheEpoch(): number | Promise<number> {
    return this.readCacheEpochRow();
  }

  private async readCacheEpochRow(): Promise<number> {
    const row = await this.db.selectFrom('cache_epoch').select('n').where('id', '=', 1).executeTakeFirstOrThrow();
    return Number(row.n);
  }

  async migrate(): Promise<void> {
    await this.migrateOn(this.db);
  }

  /** Runs the pending migrations on `db` (PostgresStore.migrate passes one connection of its own). */
  protected async migrateOn(db: Kysely<Database>): Promise<void> {
    const { error, results } = await new Migrator({
      db,
      provider,
    }).migrateToLatest();
    if (error) {
      const failed = results?.find((r) => r.status === 'Error')?.migrationName;
      // The cause stays attached: a connection that failed before any migration ran is a store fault to wait out.
      const what = failed ? `store migration ${failed} failed` : 'cannot open the store';
      throw new Error(`${what}: ${String(error)}`, { cause: error });
    }
  }

  background(): Store {
    return this;
  }

  async ping(): Promise<void> {
    await this.db.selectFrom('tenants').select('id').limit(1).execute();
  }

  /**
   * Commits a row of a few pages and deletes it again (two write transactions). A rolled-back write proves
   * nothing: a full disk shows only when pages are allocated and the commit reaches the file.
   */
  async stats(): Promise<{ pendingApprovals: number; auditEntries: number }> {
    const pending = await this.db
      .selectFrom('pending_requests')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('status', 'in', PENDING_STATUSES)
      .executeTakeFirst();
    // seq counts from 1 without gaps: the head's seq is the chain's length.
    const head = await this.db.selectFrom('audit_log').select('seq').orderBy('seq', 'desc').limit(1).executeTakeFirst();
    return { pendingApprovals: Number(pending?.n ?? 0), auditEntries: head?.seq ?? 0 };
  }

  async probeWrite(): Promise<void> {
    // A row of its own: another process on the same data dir (an in-process daemon) may probe at the same moment.
    const id = randomInt(1, 2 ** 31 - 1); // an integer column: 32 bits on PostgreSQL
    await this.db
      .insertInto('store_heartbeat')
      .values({ id, at: new Date().toISOString(), pad: HEARTBEAT_PAD })
      .execute();
    await this.db.deleteFrom('store_heartbeat').where('id', '=', id).execute();
  }

  async close(): Promise<void> {
    await this.db.destroy();
  }

  async createTenant(tenantId: string, firstKey: KeyRecord, events?: readonly EventInput[]): Promise<TenantRecord> {
    return this.access.changing(() => this.createTenantOnce(tenantId, firstKey, events));
  }

  private async createTenantOnce(
    tenantId: string,
    firstKey: KeyRecord,
    events: readonly EventInput[] | undefined,
  ): Promise<TenantRecord> {
    const tenant = { id: tenantId, current_key_id: firstKey.id, created_at: firstKey.createdAt };
    try {
      await this.db.transaction().execute(async (tx) => {
        await tx.insertInto('tenants').values(tenant).execute();
        await tx.insertInto('keys').values(fromKey(firstKey)).execute();
        await raiseCacheEpoch(tx);
        await this.writeEvents(tx, events);
      });
    } catch (err) {
      if (isUniqueViolation(err)) throw new ConflictError(`tenant ${tenantId} exists`);
      throw err;
    }
    return toTenant(tenant);
  }

  async getTenant(tenantId: string): Promise<TenantRecord | undefined> {
    const row = await this.db.selectFrom('tenants').selectAll().where('id', '=', tenantId).executeTakeFirst();
    return row && toTenant(row);
  }

  getCurrentKey(tenantId: string): Promise<KeyRecord | undefined> {
    return this.access.currentKey(tenantId, (id) => this.readCurrentKey(id));
  }

  /** The database read behind getCurrentKey's cache (the SQLite store prepares its own statement). */
  protected readCurrentKey(tenantId: string): KeyRecord | undefined | Promise<KeyRecord | undefined> {
    return this.readCurrentKeyRow(tenantId);
  }

  private async readCurrentKeyRow(tenantId: string): Promise<KeyRecord | undefined> {
    const row = await this.db
      .selectFrom('tenants')
      .innerJoin('keys', 'keys.id', 'tenants.current_key_id')
      .selectAll('keys')
      .where('tenants.id', '=', tenantId)
      .executeTakeFirst();
    return row && toKey(row);
  }

  async rotateKey(
    tenantId: string,
    key: Omit<KeyRecord, 'version'>,
    events?: EventsFor<KeyRecord>,
  ): Promise<KeyRecord> {
    return this.access.changing(() => this.rotateKeyOnce(tenantId, key, events));
  }

  private rotateKeyOnce(
    tenantId: string,
    key: Omit<KeyRecord, 'version'>,
    events: EventsFor<KeyRecord> | undefined,
  ): Promise<KeyRecord> {
    return this.db.transaction().execute(async (tx) => {
      const { max } = await tx
        .selectFrom('keys')
        .select((eb) => eb.fn.max<number>('version').as('max'))
        .where('tenant_id', '=', tenantId)
        .executeTakeFirstOrThrow();
      const record: KeyRecord = { ...key, version: Number(max ?? 0) + 1 };
      await tx.insertInto('keys').values(fromKey(record)).execute();
      await tx.updateTable('tenants').set({ current_key_id: record.id }).where('id', '=', tenantId).execute();
      await raiseCacheEpoch(tx);
      await this.writeEvents(tx, eventsOf(events, record));
      return record;
    });
  }

  async putKeyImport(r: KeyImportRecord): Promise<void> {
    const row: Database['key_imports'] = {
      id: r.id,
      tenant_id: r.tenantId,
      key_spec: r.keySpec,
      key_store: r.keyStore,
      key_ref: r.keyRef,
      wrapping_key_ref: r.wrappingKeyRef,
      wrapping_algorithm: r.wrappingAlgorithm,
      wrapping_key_spec: r.wrappingKeySpec,
      created_at: r.createdAt,
      valid_to: r.validTo,
    };
    const { id: _id, ...changes } = row;
    await this.db
      .insertInto('key_imports')
      .values(row)
      .onConflict((oc) => oc.column('id').doUpdateSet(changes))
      .execute();
  }

  async getKeyImport(tenantId: string, id: string): Promise<KeyImportRecord | undefined> {
    const row = await this.db
      .selectFrom('key_imports')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .where('id', '=', id)
      .executeTakeFirst();
    return row && toKeyImport(row);
  }

  async listExpiredKeyImports(before: string): Promise<KeyImportRecord[]> {
    const rows = await this.db
      .selectFrom('key_imports')
      .selectAll()
      .where('valid_to', '<=', before)
      .where('wrapping_key_ref', 'is not', null)
      .execute();
    return rows.map(toKeyImport);
  }

  async clearWrappingKey(id: string, wrappingKeyRef: string): Promise<void> {
    await this.db
      .updateTable('key_imports')
      .set({ wrapping_key_ref: null })
      .where('id', '=', id)
      .where('wrapping_key_ref', '=', wrappingKeyRef)
      .execute();
  }

  async completeKeyImport(
    tenantId: string,
    key: Omit<KeyRecord, 'version'>,
    events?: EventsFor<KeyRecord>,
  ): Promise<KeyRecord> {
    try {
      return await this.access.changing(() => this.completeKeyImportOnce(tenantId, key, events));
    } catch (err) {
      if (isUniqueViolation(err)) throw new ConflictError(`key ${key.id} was imported meanwhile`);
      throw err;
    }
  }

  private completeKeyImportOnce(
    tenantId: string,
    key: Omit<KeyRecord, 'version'>,
    events: EventsFor<KeyRecord> | undefined,
  ): Promise<KeyRecord> {
    return this.db.transaction().execute(async (tx) => {
      const { max } = await tx
        .selectFrom('keys')
        .select((eb) => eb.fn.max<number>('version').as('max'))
        .where('tenant_id', '=', tenantId)
        .executeTakeFirstOrThrow();
      const record: KeyRecord = { ...key, version: Number(max ?? 0) + 1 };
      await tx.insertInto('keys').values(fromKey(record)).execute();
      await tx.updateTable('tenants').set({ current_key_id: record.id }).where('id', '=', tenantId).execute();
      await tx.deleteFrom('key_imports').where('id', '=', key.id).execute();
      await raiseCacheEpoch(tx);
      await this.writeEvents(tx, eventsOf(events, record));
      return record;
    });
  }

  async reimportKey(
    tenantId: string,
    keyId: string,
    keyRef: string,
    materialExpiresAt: string | null,
    events?: EventsFor<KeyRecord>,
  ): Promise<KeyRecord> {
    return this.access.changing(() => this.reimportKeyOnce(tenantId, keyId, keyRef, materialExpiresAt, events));
  }

  private reimportKeyOnce(
    tenantId: string,
    keyId: string,
    keyRef: string,
    materialExpiresAt: string | null,
    events: EventsFor<KeyRecord> | undefined,
  ): Promise<KeyRecord> {
    return this.db.transaction().execute(async (tx) => {
      await tx
        .updateTable('keys')
        .set({ key_ref: keyRef, material_expires_at: materialExpiresAt })
        .where('tenant_id', '=', tenantId)
        .where('id', '=', keyId)
        .execute();
      await tx.deleteFrom('key_imports').where('id', '=', keyId).execute();
      await raiseCacheEpoch(tx);
      const row = await tx
        .selectFrom('keys')
        .selectAll()
        .where('tenant_id', '=', tenantId)
        .where('id', '=', keyId)
        .executeTakeFirstOrThrow();
      const record = toKey(row);
      await this.writeEvents(tx, eventsOf(events, record));
      return record;
    });
  }

  async getKey(tenantId: string, keyId: string): Promise<KeyRecord | undefined> {
    const row = await this.db
      .selectFrom('keys')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .where('id', '=', keyId)
      .executeTakeFirst();
    return row && toKey(row);
  }

  async listKeys(tenantId: string): Promise<KeyRecord[]> {
    const rows = await this.db
      .selectFrom('keys')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .orderBy('version')
      .execute();
    return rows.map(toKey);
  }

  async createApiKey(r: ApiKeyRecord, events?: readonly EventInput[]): Promise<void> {
    await this.access.changing(() => this.createApiKeyOnce(r, events));
  }

  private async createApiKeyOnce(r: ApiKeyRecord, events: readonly EventInput[] | undefined): Promise<void> {
    await this.db.transaction().execute(async (tx) => {
      await tx
        .insertInto('api_keys')
        .values({
          id: r.id,
          secret_hash: r.secretHash,
          tenant_id: r.tenantId,
          role: r.role,
          label: r.label,
          created_at: r.createdAt,
          revoked_at: r.revokedAt,
          person_id: r.personId ?? null,
          roles: r.roles ? JSON.stringify(r.roles) : null,
          expires_at: r.expiresAt ?? null,
          created_via: r.createdVia ?? null,
          workload: r.workload ? JSON.stringify(r.workload) : null,
        })
        .execute();
      await raiseCacheEpoch(tx);
      await this.writeEvents(tx, events);
    });
  }

  getApiKey(id: string): Promise<ApiKeyRecord | undefined> {
    return this.access.apiKey(id, (keyId) => this.readApiKey(keyId));
  }

  /** The database read behind getApiKey's cache (the SQLite store prepares its own statement). */
  protected readApiKey(id: string): ApiKeyRecord | undefined | Promise<ApiKeyRecord | undefined> {
    return this.readApiKeyRow(id);
  }

  private async readApiKeyRow(id: string): Promise<ApiKeyRecord | undefined> {
    const row = await this.db
      .selectFrom('api_keys')
      .leftJoin('people', 'people.id', 'api_keys.person_id')
      .selectAll('api_keys')
      .select('people.disabled_at as person_disabled_at')
      .where('api_keys.id', '=', id)
      .executeTakeFirst();
    return row && toApiKey(row);
  }

  async listApiKeys(): Promise<ApiKeyRecord[]> {
    const rows = await this.db.selectFrom('api_keys').selectAll().orderBy('created_at').execute();
    return rows.map(toApiKey);
  }

  async revokeApiKey(id: string, at: string, events?: readonly EventInput[]): Promise<boolean> {
    return this.access.changing(() => this.revokeApiKeyOnce(id, at, events));
  }

  private revokeApiKeyOnce(id: string, at: string, events: readonly EventInput[] | undefined): Promise<boolean> {
    return this.db.transaction().execute(async (tx) => {
      const result = await tx
        .updateTable('api_keys')
        .set({ revoked_at: at })
        .where('id', '=', id)
        .where('revoked_at', 'is', null)
        .executeTakeFirst();
      await raiseCacheEpoch(tx);
      const revoked = Number(result.numUpdatedRows) === 1;
      if (revoked) await this.writeEvents(tx, events);
      return revoked;
    });
  }

  /**
   * Group commit: signature records and audit entries written in the same event-loop turn go to the database in
   * one transaction, so concurrent signing does not pay one commit per signature. Each caller's promise settles
   * only after the batch is durable; if the batch fails, every write in it fails (nothing is handed out
   * unrecorded). A record and the audit entry that goes with it are written in the same transaction.
   */
  recordSignature(
    r: SignatureRecord,
    audit?: AuditEntryInput,
    events?: readonly EventInput[],
  ): Promise<number | undefined> {
    const told = events && events.length > 0 ? outboxRows(events, r.createdAt) : undefined;
    if (told) this.events.onWritten?.();
    return this.enqueue({
      ...(told && { events: told }),
      signature: {
        id: r.id,
        tenant_id: r.tenantId,
        key_id: r.keyId,
        algorithm: r.algorithm,
        hash: r.hash,
        caller: r.caller,
        created_at: r.createdAt,
      },
      ...(audit && { audit }),
      ...(audit &&
        r.signatureSha256 && {
          lookup: { tenant_id: r.tenantId, signature_sha256: r.signatureSha256.toString('hex'), signature_id: r.id },
        }),
    });
  }

  async wantsEvent(tenantId: string, kind: EventKind): Promise<boolean> {
    const wanted = await this.access.eventKinds(tenantId, (id) => this.events.subscribedKinds(id));
    return wanted !== undefined && (wanted.all || wanted.kinds.has(kind));
  }

  recordSignatureLookup(l: SignatureLookup): Promise<void> {
    return this.enqueue({ lookups: [lookupRowOf(l)] }).then(() => undefined);
  }

  async auditSeqOfSignature(tenantId: string, signatureSha256: Buffer): Promise<number | undefined> {
    const row = await this.db
      .selectFrom('signature_lookups')
      .select('audit_seq')
      .where('signature_sha256', '=', signatureSha256)
      .where('tenant_id', '=', tenantId)
      .orderBy('audit_seq', 'desc')
      .limit(1)
      .executeTakeFirst();
    return row && Number(row.audit_seq);
  }

  async auditSeqOfDigest(tenantId: string, digestBase64: string): Promise<number | undefined> {
    // The expressions are those of migration 0019's partial index audit_log_signed_digest, so the planner uses it.
    const postgres = this.db.getExecutor().adapter instanceof PostgresAdapter;
    const field = (name: string) =>
      postgres ? sql`((a.details)::jsonb ->> ${sql.lit(name)})` : sql`json_extract(a.details, ${sql.lit(`$.${name}`)})`;
    const { rows } = await sql<{ seq: number }>`
      SELECT a.seq FROM audit_log a
       WHERE a.tenant_id = ${tenantId} AND a.outcome = 'signed' AND ${field('hash')} = ${digestBase64}
         AND (${field('signature_id')} IS NULL
              OR EXISTS (SELECT 1 FROM signatures s WHERE s.id = ${field('signature_id')}))
       ORDER BY a.seq DESC LIMIT 1`.execute(this.db);
    return rows[0] && Number(rows[0].seq);
  }

  /** Group commits run on the event loop here (the SQLite store may hand them to a writer thread). */
  get writesOnThread(): boolean {
    return false;
  }

  async withdrawSignature(id: string, audit: AuditEntryInput): Promise<void> {
    await this.enqueue({ withdraw: id, audit });
  }

  async appendAudit(entry: AuditEntryInput, events?: readonly EventInput[]): Promise<void> {
    if (events && events.length > 0) {
      this.events.onWritten?.();
      await this.enqueue({ audit: entry, events: outboxRows(events, entry.at) });
      return;
    }
    await this.enqueue({ audit: entry });
  }

  async readAudit(afterSeq: number, limit: number): Promise<AuditEntry[]> {
    const rows = await this.db
      .selectFrom('audit_log')
      .selectAll()
      .where('seq', '>', afterSeq)
      .orderBy('seq')
      .limit(limit)
      .execute();
    return rows.map(toAuditEntry);
  }

  async recentAudit(tenantId: string, limit: number): Promise<AuditEntry[]> {
    const rows = await this.db
      .selectFrom('audit_log')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .orderBy('seq', 'desc')
      .limit(limit)
      .execute();
    return rows.map(toAuditEntry);
  }

  private readonly pendingWrites: PendingWrite[] = [];
  private flushScheduled = false;
  /**
   * One batch in flight at a time, the next gathering everything that arrives meanwhile (classic group commit).
   * PostgreSQL sets it: its commits wait on the network, an fsync and the audit-chain lock, so starting a
   * transaction every event-loop turn would make many small batches queue on the lock instead of a few large ones.
   * SQLite commits synchronously, so its batches form by themselves.
   */
  protected readonly serialFlushes: boolean = false;
  private flushing = false;

  protected enqueue(write: Omit<PendingWrite, 'resolve' | 'reject'>): Promise<number | undefined> {
    return new Promise((resolve, reject) => {
      this.pendingWrites.push({ ...write, resolve, reject });
      if (!this.flushScheduled && !this.flushing) {
        this.flushScheduled = true;
        setImmediate(() => void this.flushWrites());
      }
    });
  }

  private async flushWrites(): Promise<void> {
    if (this.serialFlushes) {
      this.flushScheduled = false;
      this.flushing = true;
      try {
        while (this.pendingWrites.length > 0) await this.commitBatch(this.pendingWrites.splice(0, WRITE_BATCH_MAX));
      } finally {
        this.flushing = false;
      }
      return;
    }
    const batch = this.pendingWrites.splice(0, WRITE_BATCH_MAX);
    if (this.pendingWrites.length > 0) setImmediate(() => void this.flushWrites());
    else this.flushScheduled = false;
    await this.commitBatch(batch);
  }

  /** Commits one batch and settles its callers' promises; never throws. */
  private async commitBatch(batch: PendingWrite[]): Promise<void> {
    const writes = toWriteBatch(batch);
    for (let attempt = 1; ; attempt++) {
      try {
        const firstSeq = await this.commitWrites(writes);
        settleWithSeqs(
          batch.map((b) => ({ audit: b.audit, settle: b.resolve })),
          firstSeq,
        );
        return;
      } catch (err) {
        // Another process appended to the chain between our read and our write: read the new head, try again.
        if (isChainRace(err) && writes.audits.length > 0 && attempt < CHAIN_RACE_ATTEMPTS) continue;
        for (const b of batch) b.reject(err);
        return;
      }
    }
  }

  /**
   * One group-commit batch in one transaction: the signature records, then the audit entries chained on the log's
   * head. Each store writes it its own way (SQLite with prepared statements, PostgreSQL in one function call).
   */
  protected abstract commitWrites(writes: WriteBatch): Promise<number | undefined>;

  async createPendingRequest(r: PendingRequestRecord, events?: readonly EventInput[]): Promise<void> {
    try {
      await this.db.transaction().execute(async (tx) => {
        await this.insertPendingRequest(tx, r);
        await this.writeEvents(tx, events);
      });
    } catch (err) {
      if (isUniqueViolation(err)) throw new ConflictError(`a request with continuation key ${r.continuationKey} waits`);
      throw err;
    }
  }

  async findContinuableRequest(
    tenantId: string,
    continuationKey: string,
    decidedSince: string | null,
  ): Promise<PendingRequestRecord | undefined> {
    const row = await this.db
      .selectFrom('pending_requests')
      .selectAll()
      .where('continuation_key', '=', continuationKey)
      .where('tenant_id', '=', tenantId)
      .where((eb) =>
        decidedSince === null
          ? eb('status', 'in', WAITING_STATUSES)
          : eb.or([
              eb('status', 'in', WAITING_STATUSES),
              eb.and([eb('status', 'in', ['rejected', 'approved']), eb('updated_at', '>=', decidedSince)]),
            ]),
      )
      .orderBy('created_at', 'desc')
      .limit(1)
      .executeTakeFirst();
    return row && toPending(row);
  }

  private async insertPendingRequest(tx: Kysely<Database>, r: PendingRequestRecord): Promise<void> {
    await tx
      .insertInto('pending_requests')
      .values({
        id: r.id,
        tenant_id: r.tenantId,
        key_id: r.keyId,
        algorithm: r.algorithm,
        hash: r.hash,
        inputs: r.inputs,
        requester: r.requester,
        rule: r.rule,
        reason: r.reason,
        status: r.status,
        next_stages: JSON.stringify(r.nextStages),
        decisions: JSON.stringify(r.decisions),
        signature: r.signature,
        created_at: r.createdAt,
        expires_at: r.expiresAt,
        updated_at: r.updatedAt,
        continuation_key: r.continuationKey,
      })
      .execute();
  }

  async listPendingRequests(tenantId: string): Promise<PendingRequestRecord[]> {
    const rows = await this.db
      .selectFrom('pending_requests')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .where('status', 'in', PENDING_STATUSES)
      .orderBy('created_at')
      .execute();
    return rows.map(toPending);
  }

  async getPendingRequest(tenantId: string, id: string): Promise<PendingRequestRecord | undefined> {
    const row = await this.db
      .selectFrom('pending_requests')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .where('id', '=', id)
      .executeTakeFirst();
    return row && toPending(row);
  }

  async updatePendingRequest(
    id: string,
    from: RequestStatus,
    changes: Partial<
      Pick<PendingRequestRecord, 'status' | 'nextStages' | 'decisions' | 'signature' | 'updatedAt' | 'signedSeq'>
    >,
    events?: readonly EventInput[],
  ): Promise<boolean> {
    if (!events || events.length === 0) return this.updatePendingRequestIn(this.db, id, from, changes);
    return this.db.transaction().execute(async (tx) => {
      const updated = await this.updatePendingRequestIn(tx, id, from, changes);
      if (updated) await this.writeEvents(tx, events);
      return updated;
    });
  }

  private async updatePendingRequestIn(
    db: Kysely<Database>,
    id: string,
    from: RequestStatus,
    changes: Partial<
      Pick<PendingRequestRecord, 'status' | 'nextStages' | 'decisions' | 'signature' | 'updatedAt' | 'signedSeq'>
    >,
  ): Promise<boolean> {
    const result = await db
      .updateTable('pending_requests')
      .set({
        ...(changes.status !== undefined && { status: changes.status }),
        ...(changes.nextStages !== undefined && { next_stages: JSON.stringify(changes.nextStages) }),
        ...(changes.decisions !== undefined && { decisions: JSON.stringify(changes.decisions) }),
        ...(changes.signature !== undefined && { signature: changes.signature }),
        ...(changes.updatedAt !== undefined && { updated_at: changes.updatedAt }),
        ...(changes.signedSeq !== undefined && { signed_seq: changes.signedSeq }),
      })
      .where('id', '=', id)
      .where('status', '=', from)
      .executeTakeFirst();
    return Number(result.numUpdatedRows) === 1;
  }

  async putVulnerabilities(records: StoredVulnerability[], importedAt: string): Promise<number> {
    return this.db.transaction().execute(async (tx) => {
      let changed = 0;
      for (const r of records) {
        const existing = await tx
          .selectFrom('vulnerabilities')
          .select('record')
          .where('id', '=', r.id)
          .executeTakeFirst();
        if (existing?.record === r.record) continue;
        const row = { id: r.id, modified: r.modified, record: r.record, imported_at: importedAt };
        if (existing) await tx.updateTable('vulnerabilities').set(row).where('id', '=', r.id).execute();
        else await tx.insertInto('vulnerabilities').values(row).execute();
        changed++;
      }
      return changed;
    });
  }

  async listVulnerabilities(): Promise<StoredVulnerability[]> {
    return this.db.selectFrom('vulnerabilities').select(['id', 'modified', 'record']).orderBy('id').execute();
  }

  async countTrialRequest(client: string, nowMs: number, windowMs: number): Promise<TrialCount> {
    const ended = nowMs - windowMs;
    return this.db.transaction().execute(async (tx) => {
      // This client's window, if it has ended; other limiters keep theirs (their windows differ: the device-flow
      // start limit's is a minute, the trial's an hour). Rows no limiter can still need go too (windows are at
      // most TRIAL_WINDOW_MAX_MS).
      await tx
        .deleteFrom('trial_counters')
        .where((eb) =>
          eb.or([
            eb.and([eb('client', '=', client), eb('window_start', '<=', ended)]),
            eb('window_start', '<=', nowMs - TRIAL_WINDOW_MAX_MS),
          ]),
        )
        .execute();
      // One statement, so two instances counting the same address at once both count (no lost update).
      const row = await tx
        .insertInto('trial_counters')
        .values({ client, window_start: nowMs, count: 1 })
        .onConflict((oc) =>
          oc.column('client').doUpdateSet((eb) => ({
            count: eb('trial_counters.count', '+', 1),
          })),
        )
        .returning(['count', 'window_start'])
        .executeTakeFirstOrThrow();
      return { count: Number(row.count), windowStartMs: Number(row.window_start) };
    });
  }

  async claimIdempotencyKey(c: IdempotencyClaim): Promise<IdempotencyState> {
    const fresh = {
      caller_id: c.callerId,
      idem_key: c.key,
      fingerprint: c.fingerprint,
      reply: null,
      created_at: c.at,
      updated_at: c.at,
    };
    for (let attempt = 0; attempt < 3; attempt++) {
      const inserted = await this.db
        .insertInto('sign_idempotency')
        .values(fresh)
        .onConflict((oc) => oc.columns(['caller_id', 'idem_key']).doNothing())
        .executeTakeFirst();
      if (Number(inserted.numInsertedOrUpdatedRows ?? 0n) === 1) return { state: 'claimed' };
      const row = await this.db
        .selectFrom('sign_idempotency')
        .selectAll()
        .where('caller_id', '=', c.callerId)
        .where('idem_key', '=', c.key)
        .executeTakeFirst();
      if (!row) continue; // released or expired meanwhile: try to insert again
      const expired = row.created_at < c.expiredBefore;
      if (!expired && row.fingerprint !== c.fingerprint) return { state: 'mismatch' };
      if (!expired && row.reply !== null) return { state: 'done', reply: row.reply };
      if (!expired && row.updated_at >= c.staleBefore) return { state: 'in_progress' };
      // Expired, or left in progress by a process that died: take it over, unless another caller just did.
      const taken = await this.db
        .updateTable('sign_idempotency')
        .set(fresh)
        .where('caller_id', '=', c.callerId)
        .where('idem_key', '=', c.key)
        .where('updated_at', '=', row.updated_at)
        .executeTakeFirst();
      if (Number(taken.numUpdatedRows) === 1) return { state: 'claimed' };
    }
    return { state: 'in_progress' };
  }

  async completeIdempotencyKey(callerId: string, key: string, reply: string, at: string): Promise<void> {
    await this.db
      .updateTable('sign_idempotency')
      .set({ reply, updated_at: at })
      .where('caller_id', '=', callerId)
      .where('idem_key', '=', key)
      .execute();
  }

  async releaseIdempotencyKey(callerId: string, key: string): Promise<void> {
    await this.db
      .deleteFrom('sign_idempotency')
      .where('caller_id', '=', callerId)
      .where('idem_key', '=', key)
      .where('reply', 'is', null)
      .execute();
  }

  async readTrialCount(client: string, nowMs: number, windowMs: number): Promise<number> {
    const row = await this.db
      .selectFrom('trial_counters')
      .select('count')
      .where('client', '=', client)
      .where('window_start', '>', nowMs - windowMs)
      .executeTakeFirst();
    return Number(row?.count ?? 0);
  }

  async vulnerabilityDbVersion(): Promise<string> {
    const row = await this.db
      .selectFrom('vulnerabilities')
      .select((eb) => [eb.fn.countAll<number>().as('n'), eb.fn.max('imported_at').as('latest')])
      .executeTakeFirstOrThrow();
    return `${Number(row.n)}@${row.latest ?? ''}`;
  }

  async createException(r: ExceptionRecord, events?: readonly EventInput[]): Promise<void> {
    await this.db.transaction().execute(async (tx) => {
      await this.insertException(tx, r);
      await this.writeEvents(tx, events);
    });
  }

  private async insertException(tx: Kysely<Database>, r: ExceptionRecord): Promise<void> {
    await tx
      .insertInto('policy_exceptions')
      .values({
        id: r.id,
        tenant_id: r.tenantId,
        vuln_id: r.vulnId,
        project: r.project,
        artifact_type: r.artifactType,
        reason: r.reason,
        created_by: r.createdBy,
        created_at: r.createdAt,
        expires_at: r.expiresAt,
        revoked_at: r.revokedAt,
        revoked_by: r.revokedBy,
      })
      .execute();
  }

  async listExceptions(tenantId: string): Promise<ExceptionRecord[]> {
    const rows = await this.db
      .selectFrom('policy_exceptions')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .orderBy('created_at')
      .execute();
    return rows.map(toException);
  }

  async getException(tenantId: string, id: string): Promise<ExceptionRecord | undefined> {
    const row = await this.db
      .selectFrom('policy_exceptions')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .where('id', '=', id)
      .executeTakeFirst();
    return row && toException(row);
  }

  async revokeException(
    tenantId: string,
    id: string,
    at: string,
    by: string,
    events?: readonly EventInput[],
  ): Promise<boolean> {
    return this.db.transaction().execute(async (tx) => {
      const result = await tx
        .updateTable('policy_exceptions')
        .set({ revoked_at: at, revoked_by: by })
        .where('tenant_id', '=', tenantId)
        .where('id', '=', id)
        .where('revoked_at', 'is', null)
        .executeTakeFirst();
      const revoked = Number(result.numUpdatedRows) === 1;
      if (revoked) await this.writeEvents(tx, events);
      return revoked;
    });
  }

  /** Requests still waiting for a decision whose expiry is before `before` (the event sweep), oldest first. */
  async listWaitingRequestsExpiringBefore(before: string, limit: number): Promise<PendingRequestRecord[]> {
    const rows = await this.db
      .selectFrom('pending_requests')
      .selectAll()
      .where('status', 'in', PENDING_STATUSES)
      .where('expires_at', '<', before)
      .orderBy('expires_at')
      .limit(limit)
      .execute();
    return rows.map(toPending);
  }

  /** Waiting requests not yet reminded of whose expiry is before `before`. */
  async listRequestsToRemind(before: string, limit: number): Promise<PendingRequestRecord[]> {
    const rows = await this.db
      .selectFrom('pending_requests')
      .selectAll()
      .where('status', 'in', PENDING_STATUSES)
      .where('reminded_at', 'is', null)
      .where('expires_at', '<', before)
      .orderBy('expires_at')
      .limit(limit)
      .execute();
    return rows.map(toPending);
  }

  /** Sets the reminder mark once and writes the reminder's events with it. False when another sweep did it. */
  async markReminded(id: string, at: string, events: readonly EventInput[]): Promise<boolean> {
    return this.db.transaction().execute(async (tx) => {
      const result = await tx
        .updateTable('pending_requests')
        .set({ reminded_at: at })
        .where('id', '=', id)
        .where('reminded_at', 'is', null)
        .where('status', 'in', PENDING_STATUSES)
        .executeTakeFirst();
      const marked = Number(result.numUpdatedRows) === 1;
      if (marked) await this.writeEvents(tx, events);
      return marked;
    });
  }

  /** Live exceptions not yet warned of whose expiry is before `before` (and after `now`). */
  async listExceptionsToWarn(now: string, before: string, limit: number): Promise<ExceptionRecord[]> {
    const rows = await this.db
      .selectFrom('policy_exceptions')
      .selectAll()
      .where('revoked_at', 'is', null)
      .where('expiry_warned_at', 'is', null)
      .where('expires_at', '>', now)
      .where('expires_at', '<', before)
      .orderBy('expires_at')
      .limit(limit)
      .execute();
    return rows.map(toException);
  }

  /** Sets the expiry-warning mark once and writes its events with it. False when another sweep did it. */
  async markExceptionWarned(id: string, at: string, events: readonly EventInput[]): Promise<boolean> {
    return this.db.transaction().execute(async (tx) => {
      const result = await tx
        .updateTable('policy_exceptions')
        .set({ expiry_warned_at: at })
        .where('id', '=', id)
        .where('expiry_warned_at', 'is', null)
        .where('revoked_at', 'is', null)
        .executeTakeFirst();
      const marked = Number(result.numUpdatedRows) === 1;
      if (marked) await this.writeEvents(tx, events);
      return marked;
    });
  }

  async listSignatures(tenantId: string, limit: number): Promise<SignatureRecord[]> {
    const rows = await this.db
      .selectFrom('signatures')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .orderBy('created_at', 'desc')
      .limit(limit)
      .execute();
    return rows.map((row) => ({
      id: row.id,
      tenantId: row.tenant_id,
      keyId: row.key_id,
      algorithm: row.algorithm as SigningAlgorithm,
      hash: row.hash,
      caller: row.caller,
      createdAt: row.created_at,
    }));
  }
}
