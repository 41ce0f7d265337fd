// The Store contract: one part per concern, each a class of its own file (tenant-store.ts, api-key-store.ts, ...),
// composed here the way people, workload identity, events, the TSA and the transparency log are. Implemented once
// on Kysely for SQLite and PostgreSQL (kysely-store.ts). The records the parts persist are exported here too.
import type { ApiKeyStore } from './api-key-store.js';
import type { AuditStore } from './audit-store.js';
import type { EventStore } from './event-store.js';
import type { ExceptionStore } from './exception-store.js';
import type { IdempotencyStore } from './idempotency-store.js';
import type { KeyImportStore } from './key-import-store.js';
import type { LogStore } from './log-store.js';
import type { PeopleStore } from './people-store.js';
import type { EventKind } from './records/event-kinds.js';
import type { RequestCountStore } from './request-count-store.js';
import type { RetentionStore } from './retention-store.js';
import type { SignatureStore } from './signature-store.js';
import type { SigningRequestStore } from './signing-request-store.js';
import type { TenantStore } from './tenant-store.js';
import type { TsaStore } from './tsa-store.js';
import type { VulnerabilityStore } from './vulnerability-store.js';
import type { WorkloadStore } from './workload-store.js';

export type { ExceptionRecord } from './exception-store.js';
export type { CompletedBatch } from './group-commit.js';
export type { IdempotencyClaim, IdempotencyState } from './idempotency-store.js';
export type { ApiKeyRecord } from './records/api-key.js';
export type { AuditContent, AuditEntry, AuditEntryInput, AuditEntryInputOf } from './records/audit-entry.js';
export {
  type BatchRequestResult,
  PENDING_STATUSES,
  type PendingRequestRecord,
  type PendingStatus,
  type RequestBatch,
  type RequestStatus,
  WAITING_STATUSES,
} from './records/signing-request.js';
export type { KeyImportRecord, KeyRecord, TenantRecord } from './records/tenant-key.js';
export type { RequestCount } from './request-count-store.js';
export type { SignatureLookup, SignatureRecord } from './signature-store.js';
export { ConflictError } from './store-errors.js';
export type { StoredVulnerability } from './vulnerability-store.js';

/**
 * Durable state. Implementations: SQLite (embedded default) and, later, PostgreSQL. Every method is one atomic
 * unit: it either happens whole or throws and changes nothing.
 */
export interface Store {
  readonly description: string;
  migrate(): Promise<void>;
  ping(): Promise<void>;
  /** Proves that a write reaches the disk now (for /readyz; a read-only ping passes on a full disk). */
  probeWrite(): Promise<void>;
  /** The database server's clock, where there is a server (PostgreSQL); the TSA's `database` clock check. */
  databaseTime?(): Promise<Date>;
  /**
   * The store for periodic background passes (log integrator, event dispatcher): on PostgreSQL the same database
   * through a small pool whose connections close soon after use, so that an idle service holds no connection; on
   * SQLite this store. Closed with this store.
   */
  background(): Store;
  /** Figures read on a metrics scrape: requests waiting for a decision, entries in the audit log. */
  stats(): Promise<{ pendingApprovals: number; auditEntries: number }>;
  close(): Promise<void>;

  /** Tenants and their key versions. */
  readonly tenants: TenantStore;
  /** Keys awaiting imported material (BYOK, migration 0011). */
  readonly keyImports: KeyImportStore;
  /** API keys; the signing path reads them through the access cache. */
  readonly apiKeys: ApiKeyStore;
  /** Signing requests waiting for a decision (the approval workflow) and how they were decided. */
  readonly requests: SigningRequestStore;
  /** Policy exceptions (waivers of a vulnerability). */
  readonly exceptions: ExceptionStore;
  /** The hash-chained audit log (group-committed) and the lookups to its `signed` entries. */
  readonly audit: AuditStore;
  /** Signature records, group-committed with their audit entries. */
  readonly signatures: SignatureStore;
  /** Requests counted per client in a window: trial, TSA and device-flow limits, signing velocity. */
  readonly requestCounts: RequestCountStore;
  /** Idempotency keys of signing requests (migration 0012). */
  readonly idempotency: IdempotencyStore;
  /** The OSV vulnerability database. */
  readonly vulnerabilities: VulnerabilityStore;
  /** People, memberships and the OAuth flows' state (docs/oauth.md). */
  readonly people: PeopleStore;
  /** Workload trust rules and exchanged tokens (docs/ci.md). */
  readonly workload: WorkloadStore;
  /**
   * Events: the outbox, subscriptions and deliveries (docs/events.md). Every method of a part that takes `events`
   * writes them in the transaction of its change (and not at all when the change did not happen).
   */
  readonly events: EventStore;
  /** The time-stamping authority's identities and serial blocks (docs/tsa.md). */
  readonly tsa: TsaStore;
  /** The transparency log over the audit entries: tree, tiles, checkpoints, key (docs/transparency.md). */
  readonly log: LogStore;
  /** Deletes what the contract lets go, in bounded batches (src/retention/pruner.ts; docs/deployment.md). */
  readonly retention: RetentionStore;

  /**
   * Whether a subscription of the tenant (paused or not) wants events of this kind: answered from the store's exact
   * cache (access-cache.ts), so a subscription made anywhere counts from the first request after it committed.
   */
  wantsEvent(tenantId: string, kind: EventKind): Promise<boolean>;
}
