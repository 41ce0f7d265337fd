// The database's tables as Kysely sees them, for every part of the store (kysely-store.ts composes them). The
// tables of people, workload identity, events, the TSA and the transparency log are declared next to their stores.
import type { StoredAuditRow } from './audit/audit-rows.js';
import type { EventTables } from './events/event-store.js';
import type { LogTables } from './log/log-store.js';
import type { PeopleTables } from './people/people-store.js';
import type { WorkloadTables } from './people/workload-store.js';
import type { TsaTables } from './tsa/tsa-store.js';

export interface Database
  extends Omit<PeopleTables, 'api_keys' | 'cache_epoch'>,
    WorkloadTables,
    Omit<EventTables, 'audit_log'>,
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
    /** Migration 0033: the seq of the `signed` entry whose commit wrote the record (its answer's log index + 1). */
    log_seq: number | null;
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
    /** Migration 0024: an AWS-format key's sealed secret access key (base64). */
    sealed_secret: string | null;
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
    /** Migration 0025: a held batch's digests, and once approved their results (JSON: RequestBatch). */
    batch?: string | null;
    /** Migration 0027: the API and credential the request came through (JSON: SignRequest.via). */
    via?: string | null;
    /** Migration 0027: an RSA PSS request's salt length when not the hash's (SignRequest.pssSaltLength). */
    pss_salt_length?: number | null;
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
  /**
   * Migration 0030: a `signed` entry's signature_sha256 (the SHA-256 of the signature's raw bytes) is the lookup
   * key of `audit prove --signature`; null for other entries, for a signature not known yet (written ahead), and on
   * entries from before 0030 (their signature_lookups rows stay). Not hashed: the chain and the log cover AuditRow.
   */
  audit_log: StoredAuditRow;
  /** Migration 0032: the words of packed `signed` entries (entry-packing.cjs), never deleted or reused. */
  audit_words: { id: number; text: string };
  cache_epoch: { id: number; n: number };
  trial_counters: { client: string; window_start: number; count: number };
  store_heartbeat: { id: number; at: string; pad: Buffer };
  /** Signature records before migration 0030 (kept, no longer written: a `signed` entry is its record). */
  signatures: {
    id: string;
    tenant_id: string;
    key_id: string;
    algorithm: string;
    hash: string;
    caller: string;
    created_at: string;
  };
  /**
   * Migration 0019: SHA-256 of a signature's raw bytes → its `signed` audit entry. Kept for entries from before
   * migration 0030 (and what instances on older code write during a rolling upgrade); 0030 puts the hash on the entry.
   */
  signature_lookups: { audit_seq: number; tenant_id: string; signature_sha256: Buffer };
  /** Migration 0028: a batch entry's items (docs/transparency.md, "A batch's items"). */
  batch_items: { batch_seq: number; item_index: number; digest: Buffer; signature_sha256: Buffer };
}
