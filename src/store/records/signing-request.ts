// A signing request that waits for a decision, as the store keeps it, and its statuses: a leaf without the
// store's code, so that the build-host client (which shows statuses) can import it without bundling Kysely.
import type { SigningAlgorithm } from '../../crypto/algorithms.js';

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
  /**
   * A held `sign_batch` (migration 0025): its digests in the client's order, and once approved what each got. Null
   * or absent for a one-digest request. `hash` is then the batch's digest (batchDigest).
   */
  batch?: RequestBatch | null;
  /**
   * The API the request came through and what it said of itself there (SignRequest.via), named again by the
   * `signed` entry of its approval (migration 0027). Absent on requests made before.
   */
  via?: Record<string, string> | null;
  /**
   * An RSA PSS request's salt length in bytes when it is not the hash's (SignRequest.pssSaltLength, Vault transit's
   * salt_length), signed with at approval (migration 0027). Absent: the hash's length.
   */
  pssSaltLength?: number | null;
}

/** One digest of an approved batch request: its signature and the seq of its `signed` entry, or why it failed. */
export type BatchRequestResult =
  | { signature: string; seq: number; signature_id: string }
  | { error: { code: string; message: string; retryable: boolean } };

export interface RequestBatch {
  /** Standard base64 digests, in the order the client sent them (results[i] answers hashes[i]). */
  hashes: string[];
  /** Set when the request is approved and signed. */
  results?: BatchRequestResult[];
}
