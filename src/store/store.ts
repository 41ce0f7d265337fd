// The Store contract: one part per concern, each a class of its own file (tenant-store.ts, api-key-store.ts, ...),
// composed here the way people, workload identity, events, the TSA and the transparency log are. Implemented once
// on Kysely for SQLite and PostgreSQL (kysely-store.ts). The records the parts persist are exported here too.

import type { AuditStore } from './audit/audit-store.js';
import type { SignatureStore } from './audit/signature-store.js';
import type { Write } from './commit/group-commit.js';
import type { RequestCountStore } from './counters/request-count-store.js';
import type { EventStore } from './events/event-store.js';
import type { LogStore } from './log/log-store.js';
import type { ApiKeyStore } from './people/api-key-store.js';
import type { PeopleStore } from './people/people-store.js';
import type { WorkloadStore } from './people/workload-store.js';
import type { EventKind } from './records/event-kinds.js';
import type { IdempotencyStore } from './requests/idempotency-store.js';
import type { SigningRequestStore } from './requests/signing-request-store.js';
import type { RetentionStore } from './retention/retention-store.js';
import type { KeyImportStore } from './tenants/key-import-store.js';
import type { TenantStore } from './tenants/tenant-store.js';
import type { TsaStore } from './tsa/tsa-store.js';
import type { ExceptionStore } from './vulnerabilities/exception-store.js';
import type { VulnerabilityStore } from './vulnerabilities/vulnerability-store.js';

export type { SignatureLookup, SignatureRecord } from './audit/signature-store.js';
export type { CompletedBatch, IdempotencyRecordRow } from './commit/group-commit.js';
export type { RequestCount } from './counters/request-count-store.js';
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
export type { IdempotencyLookup, IdempotencyState, KeptReply } from './requests/idempotency-store.js';
export { ConflictError } from './store-errors.js';
export type { ExceptionRecord } from './vulnerabilities/exception-store.js';
export type { StoredVulnerability } from './vulnerabilities/vulnerability-store.js';

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
  /**
   * Commits a write another process on this database handed over (a request worker's signature records and audit
   * entries, src/workers/) in this store's own group commit, so that the audit chain has one appender and the
   * writes of all processes that arrive in one turn share a transaction. Only a store that is its database's single
   * writer has it (SQLite); on PostgreSQL every process is an ordinary client and commits its own.
   */
  commitRelayedWrite?(write: Write): Promise<number | undefined>;
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
