import type { KeySpec, SigningAlgorithm } from '../crypto/algorithms.js';
import type { KeyOrigin, KeyStoreKind, WrappingAlgorithm, WrappingKeySpec } from '../keys/key-store.js';
import type { EventStore, EventsFor } from './event-store.js';
import type { LogStore } from './log-store.js';
import type { PeopleStore } from './people-store.js';
import type { AuditEntry, AuditEntryInput } from './records/audit-entry.js';
import type { EventInput, EventKind } from './records/event-kinds.js';
import type { Role } from './records/roles.js';
import type { WorkloadIdentity } from './records/workload-identity.js';
import type { RetentionStore } from './retention-store.js';
import type { TsaStore } from './tsa-store.js';
import type { WorkloadStore } from './workload-store.js';

export type { AuditEntry, AuditEntryInput };
export { ConflictError } from './store-errors.js';

export interface TenantRecord {
  id: string;
  currentKeyId: string;
  createdAt: string;
}

export interface KeyRecord {
  id: string;
  tenantId: string;
  /** 1 for the tenant's first key, +1 for each rotation. */
  version: number;
  keySpec: KeySpec;
  /** The key store's own reference; never shown to API callers. */
  keyRef: string;
  publicKeyPem: string;
  createdAt: string;
  /** Which key store holds it (migration 0010; keys made before say pkcs11). */
  keyStore: KeyStoreKind;
  /** generated in the key store, or imported (BYOK). */
  origin: KeyOrigin;
  /** Imported with KEY_MATERIAL_EXPIRES: when the material stops working (ISO time); otherwise null. */
  materialExpiresAt: string | null;
}

/** A key awaiting material (get_import_params until import_key; migration 0011). */
export interface KeyImportRecord {
  /** The kms_key_id handed to the client; the key version's id once imported. */
  id: string;
  tenantId: string;
  keySpec: KeySpec;
  /** The key store the material goes to. */
  keyStore: KeyStoreKind;
  /** The key the key store made for it (AWS KMS); null when the import itself makes the key. */
  keyRef: string | null;
  /** The RSA wrapping key in the token; null for a key store that wraps itself, and once swept after expiry. */
  wrappingKeyRef: string | null;
  wrappingAlgorithm: WrappingAlgorithm;
  wrappingKeySpec: WrappingKeySpec;
  createdAt: string;
  /** parameters_valid_to, ISO time. */
  validTo: string;
}

export interface ApiKeyRecord {
  id: string;
  /** SHA-256 of the secret part, hex. The secret itself is never stored. */
  secretHash: string;
  /** null for the global operator role. */
  tenantId: string | null;
  role: Role;
  label: string;
  createdAt: string;
  revokedAt: string | null;
  /** Every role of the key; `role` is the first. Admin-made keys have one role; a person's key may have several. */
  roles?: Role[];
  /** The person the key belongs to (minted by sign-in, or an admin's CI key for a person); null for admin keys. */
  personId?: string | null;
  /** After this the key no longer works; null: no expiry (admin keys). */
  expiresAt?: string | null;
  /** How it was made: device, admin (CI key for a person); null for the classic admin keys. */
  createdVia?: string | null;
  /** Read with the key: set when its person is disabled (the key then does not work). */
  personDisabledAt?: string | null;
  /** A key minted by the workload token exchange (createdVia `workload`): what the service verified about the job. */
  workload?: WorkloadIdentity | null;
}

export interface SignatureRecord {
  id: string;
  tenantId: string;
  keyId: string;
  algorithm: SigningAlgorithm;
  /** The signed digest, standard base64. */
  hash: string;
  /** The API key id that asked for the signature. */
  caller: string;
  createdAt: string;
  /**
   * SHA-256 of the raw signature bytes, when the signature exists as the record is written (the store then writes
   * its lookup row in the same transaction, on the seq of the record's audit entry; migration 0019).
   */
  signatureSha256?: Buffer;
}

/**
 * Finds the `signed` audit entry of a signature by the SHA-256 of its raw bytes (migration 0019). Written after the
 * key store returned the signature: with the record when the record follows the signature, else in a later group
 * commit (recordSignatureLookup), so a crash can lose the row of a signature already handed out; the lookup by
 * digest (auditSeqOfDigest) reads the audit log itself and still finds the entry.
 */
export interface SignatureLookup {
  auditSeq: number;
  tenantId: string;
  signatureId: string;
  signatureSha256: Buffer;
}

export const PENDING_STATUSES = ['pending_approval', 'pending_security_review'] as const;
export type PendingStatus = (typeof PENDING_STATUSES)[number];
export type RequestStatus = PendingStatus | 'signing' | 'approved' | 'rejected' | 'expired' | 'denied';
/**
 * Not decided yet: at most one such request per continuation key (migration 0014's partial unique index, which
 * names these statuses itself: a new waiting status needs a migration that rebuilds the index).
 */
export const WAITING_STATUSES = [...PENDING_STATUSES, 'signing'] as const;

/** A signing request that waits for a decision (approval workflow). */
export interface PendingRequestRecord {
  id: string;
  tenantId: string;
  /** The key version current when the request was made; approval signs with exactly this one. */
  keyId: string;
  algorithm: SigningAlgorithm;
  /** Standard base64 digest. */
  hash: string;
  /** The policy inputs of the request, JSON (PolicyContext). */
  inputs: string;
  requester: string;
  rule: string;
  reason: string;
  status: RequestStatus;
  /** Stages still to pass after the current one, in order (e.g. security review, then approval). */
  nextStages: PendingStatus[];
  /** Who decided each passed stage. */
  decisions: Array<{
    stage: PendingStatus;
    by: string;
    /** The person behind the deciding key, when it is a person's key. */
    by_person?: string;
    at: string;
    decision: 'approve' | 'reject';
    reason?: string;
  }>;
  signature: string | null;
  createdAt: string;
  expiresAt: string;
  updatedAt: string;
  /**
   * What a retry must match to continue this request instead of opening another (migration 0014;
   * src/signing/request-continuation.ts); null on requests made before.
   */
  continuationKey: string | null;
  /**
   * Once approved: the seq of the `signed` audit entry that records its signature (migration 0019), which a
   * collecting client gets as Signbridge-Log-Index; null on requests approved before.
   */
  signedSeq?: number | null;
}

export interface ExceptionRecord {
  id: string;
  tenantId: string;
  vulnId: string;
  project: string | null;
  artifactType: string | null;
  reason: string;
  createdBy: string;
  createdAt: string;
  expiresAt: string;
  revokedAt: string | null;
  revokedBy: string | null;
}

/** An OSV record as stored: the document itself stays JSON; policy code parses and indexes it. */
export interface StoredVulnerability {
  id: string;
  modified: string;
  record: string;
}

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

  /** Throws ConflictError if the tenant exists. */
  createTenant(tenantId: string, firstKey: KeyRecord, events?: readonly EventInput[]): Promise<TenantRecord>;
  getTenant(tenantId: string): Promise<TenantRecord | undefined>;
  /** The tenant's current key in one round trip (the signing path); undefined if no such tenant. */
  getCurrentKey(tenantId: string): Promise<KeyRecord | undefined>;
  /** Adds `key` as the next version and makes it current; returns the new version number. */
  rotateKey(tenantId: string, key: Omit<KeyRecord, 'version'>, events?: EventsFor<KeyRecord>): Promise<KeyRecord>;
  getKey(tenantId: string, keyId: string): Promise<KeyRecord | undefined>;
  listKeys(tenantId: string): Promise<KeyRecord[]>;

  /** Key import (migration 0011): inserts, or replaces the parameters of, the key awaiting material `record.id`. */
  putKeyImport(record: KeyImportRecord): Promise<void>;
  getKeyImport(tenantId: string, id: string): Promise<KeyImportRecord | undefined>;
  /** Imports whose parameters ended by `before` and whose wrapping key is still in the token (the sweep). */
  listExpiredKeyImports(before: string): Promise<KeyImportRecord[]>;
  /** The sweep removed the wrapping key: forget it, unless new parameters replaced it meanwhile. */
  clearWrappingKey(id: string, wrappingKeyRef: string): Promise<void>;
  /**
   * The material arrived: adds `key` (id = the import's id) as the tenant's next key version, makes it current
   * and removes the import row, in one transaction. ConflictError when another import of the same key won.
   */
  completeKeyImport(
    tenantId: string,
    key: Omit<KeyRecord, 'version'>,
    events?: EventsFor<KeyRecord>,
  ): Promise<KeyRecord>;
  /** The same material again for an imported key: its (new) key reference and expiry; removes the import row. */
  reimportKey(
    tenantId: string,
    keyId: string,
    keyRef: string,
    materialExpiresAt: string | null,
    events?: EventsFor<KeyRecord>,
  ): Promise<KeyRecord>;

  /** People, memberships and the OAuth flows' state (docs/oauth.md). */
  readonly people: PeopleStore;
  /** Workload trust rules and exchanged tokens (docs/ci.md). */
  readonly workload: WorkloadStore;
  /**
   * Events: the outbox, subscriptions and deliveries (docs/events.md). Every method below that takes `events`
   * writes them in the transaction of its change (and not at all when the change did not happen).
   */
  readonly events: EventStore;
  /** The time-stamping authority's identities and serial blocks (docs/tsa.md). */
  readonly tsa: TsaStore;
  /** The transparency log over the audit entries: tree, tiles, checkpoints, key (docs/transparency.md). */
  readonly log: LogStore;
  /** Deletes what the contract lets go, in bounded batches (src/retention/pruner.ts; docs/deployment.md). */
  readonly retention: RetentionStore;

  createApiKey(record: ApiKeyRecord, events?: readonly EventInput[]): Promise<void>;
  getApiKey(id: string): Promise<ApiKeyRecord | undefined>;
  listApiKeys(): Promise<ApiKeyRecord[]>;
  /** Returns false when no such key was active. */
  revokeApiKey(id: string, at: string, events?: readonly EventInput[]): Promise<boolean>;

  /**
   * True when signature records and audit entries are committed on a thread of the store's own: a write handed
   * over proceeds while the event loop works (the signing path then writes ahead of the signature).
   */
  readonly writesOnThread: boolean;
  /**
   * Records a signature, with the audit entry and the events (signature.signed) that go with it in the same
   * transaction (group-committed). Resolves to the seq the store assigned to `audit` (undefined without one).
   */
  recordSignature(
    record: SignatureRecord,
    audit?: AuditEntryInput,
    events?: readonly EventInput[],
  ): Promise<number | undefined>;
  /**
   * Whether a subscription of the tenant (paused or not) wants events of this kind: answered from the store's exact
   * cache (access-cache.ts), so a subscription made anywhere counts from the first request after it committed.
   */
  wantsEvent(tenantId: string, kind: EventKind): Promise<boolean>;
  /**
   * The lookup row of a signature whose record was written ahead of it. Rides along with a later group commit (no
   * commit of its own under load); callers do not wait for it. Lost if the process ends before that commit.
   */
  recordSignatureLookup(lookup: SignatureLookup): Promise<void>;
  /** The seq of the tenant's latest `signed` entry for the signature whose raw bytes hash to `signatureSha256`. */
  auditSeqOfSignature(tenantId: string, signatureSha256: Buffer): Promise<number | undefined>;
  /**
   * The seq of the tenant's latest `signed` entry for the digest `digestBase64` (standard base64, as signature
   * records and audit entries hold it), leaving out signatures withdrawn after a key store failure.
   */
  auditSeqOfDigest(tenantId: string, digestBase64: string): Promise<number | undefined>;
  /** Deletes a record written ahead for a signature the key store then failed to make, appending `audit`. */
  withdrawSignature(id: string, audit: AuditEntryInput): Promise<void>;

  /** ConflictError when a request with the same continuation key is still waiting (WAITING_STATUSES). */
  createPendingRequest(record: PendingRequestRecord, events?: readonly EventInput[]): Promise<void>;
  /**
   * The tenant's newest request with this continuation key that still waits, or was rejected or approved at or
   * after `decidedSince` (null: waiting ones only). What a retry continues.
   */
  findContinuableRequest(
    tenantId: string,
    continuationKey: string,
    decidedSince: string | null,
  ): Promise<PendingRequestRecord | undefined>;
  getPendingRequest(tenantId: string, id: string): Promise<PendingRequestRecord | undefined>;
  /** The tenant's requests still waiting for a decision (pending statuses), oldest first (the web console). */
  listPendingRequests(tenantId: string): Promise<PendingRequestRecord[]>;
  /**
   * Compare-and-set: applies `changes` only if the request's status is still `from`. Returns whether it did;
   * of two racing approvals exactly one wins.
   */
  updatePendingRequest(
    id: string,
    from: RequestStatus,
    changes: Partial<
      Pick<PendingRequestRecord, 'status' | 'nextStages' | 'decisions' | 'signature' | 'updatedAt' | 'signedSeq'>
    >,
    events?: readonly EventInput[],
  ): Promise<boolean>;
  /** Waiting requests whose expiry is before `before`, oldest first (the event sweep expires them). */
  listWaitingRequestsExpiringBefore(before: string, limit: number): Promise<PendingRequestRecord[]>;
  /** Waiting requests not yet reminded of whose expiry is before `before`. */
  listRequestsToRemind(before: string, limit: number): Promise<PendingRequestRecord[]>;
  /** Marks the request reminded of, once, writing `events` with the mark; false when it was already. */
  markReminded(id: string, at: string, events: readonly EventInput[]): Promise<boolean>;
  /** Live exceptions not yet warned of that expire after `now` and before `before`. */
  listExceptionsToWarn(now: string, before: string, limit: number): Promise<ExceptionRecord[]>;
  /** Marks the exception's expiry warned of, once, writing `events` with the mark; false when it was already. */
  markExceptionWarned(id: string, at: string, events: readonly EventInput[]): Promise<boolean>;

  /**
   * Appends to the hash-chained audit log. Entries appended in the same event-loop turn share one transaction
   * (group commit); the promise settles once they are durable, and rejects if they are not.
   */
  appendAudit(entry: AuditEntryInput, events?: readonly EventInput[]): Promise<void>;
  /** The log in order, `limit` entries from `afterSeq` on. */
  readAudit(afterSeq: number, limit: number): Promise<AuditEntry[]>;
  /** The tenant's `limit` most recent entries, newest first (the web console). */
  recentAudit(tenantId: string, limit: number): Promise<AuditEntry[]>;

  /** Inserts or replaces OSV records (by id) in one transaction; returns how many were new or changed. */
  putVulnerabilities(records: StoredVulnerability[], importedAt: string): Promise<number>;
  listVulnerabilities(): Promise<StoredVulnerability[]>;
  /** Changes whenever the vulnerability database changes (count and latest import), to refresh caches cheaply. */
  vulnerabilityDbVersion(): Promise<string>;

  createException(record: ExceptionRecord, events?: readonly EventInput[]): Promise<void>;
  listExceptions(tenantId: string): Promise<ExceptionRecord[]>;
  getException(tenantId: string, id: string): Promise<ExceptionRecord | undefined>;
  /** Returns false when the exception was already revoked. */
  revokeException(
    tenantId: string,
    id: string,
    at: string,
    by: string,
    events?: readonly EventInput[],
  ): Promise<boolean>;
  listSignatures(tenantId: string, limit: number): Promise<SignatureRecord[]>;

  /**
   * Counts one trial request of a client address, atomically, in a window of `windowMs` that starts at the
   * address's first request (a window that has ended starts again at `nowMs`). Returns the count including this
   * request and when the window started. Windows that ended are deleted.
   */
  countTrialRequest(client: string, nowMs: number, windowMs: number): Promise<TrialCount>;
  /** The count countTrialRequest kept for `client` in the window that is open at `nowMs` (0 if none), unchanged. */
  readTrialCount(client: string, nowMs: number, windowMs: number): Promise<number>;
  /**
   * Claims an idempotency key for a caller (migration 0012). `claimed`: go ahead, then complete or release it.
   * `done`: the first answer, to send again. `in_progress`: someone else is working on it (not older than
   * `staleBefore`). `mismatch`: the key was used with another request. A claim older than `expiredBefore` counts
   * as absent.
   */
  claimIdempotencyKey(claim: IdempotencyClaim): Promise<IdempotencyState>;
  completeIdempotencyKey(callerId: string, key: string, reply: string, at: string): Promise<void>;
  releaseIdempotencyKey(callerId: string, key: string): Promise<void>;
}

export interface IdempotencyClaim {
  callerId: string;
  key: string;
  /** SHA-256 of the request it answers: the same key with another request is refused. */
  fingerprint: string;
  at: string;
  /** An in-progress claim last touched before this was left by a process that died: it may be taken over. */
  staleBefore: string;
  /** Claims created before this have expired: the key may be used afresh. */
  expiredBefore: string;
}

export type IdempotencyState =
  | { state: 'claimed' }
  | { state: 'done'; reply: string }
  | { state: 'in_progress' }
  | { state: 'mismatch' };

export interface TrialCount {
  count: number;
  windowStartMs: number;
}
