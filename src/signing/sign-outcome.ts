// What a signing request carries and what it gets: a signature, or a request held for a person's decision; and the
// observer /metrics is told each outcome through.

import type { WorkloadIdentity } from '../auth/workload/workload-identity.js';
import type { SigningAlgorithm } from '../crypto/algorithms.js';
import type { PendingStatus } from '../store/store.js';
import type { PolicyContext } from './policy-context.js';

export interface SignRequest {
  /** The API action, for the audit log (default sign). */
  action?: 'sign' | 'pkcs11_sign' | 'sign_batch';
  tenantId: string;
  callerId: string;
  /** The person behind the caller's key, recorded in the audit entry. */
  personId?: string | null;
  /** The CI workload identity of the caller's key (a key from the token exchange); its facts are in `context`. */
  workload?: WorkloadIdentity | null;
  digest: Buffer;
  /**
   * Pure Ed25519 only (ED25519_SHA_512, at the doors that carry the message: KMS RAW, Vault transit): the message
   * the key store signs. `digest` is then its SHA-512, which the policy, the audit entries and the log name instead,
   * so that the message itself is never stored (docs/kms-api.md, "Ed25519").
   */
  message?: Buffer;
  /**
   * The key version the client named or the door resolved (and built the digest from): the signer refuses with
   * key_changed, before any policy decision, audit entry or signature, when it is not the tenant's current one.
   * Absent: whatever version is current signs.
   */
  expectedKeyId?: string;
  context: PolicyContext;
  /**
   * The API the request came through and the credential it named there (e.g. `{api: 'aws-kms', region,
   * access_key_id}`, `{api: 'signbridge', api_key_id}` for the /v1 JSON API), for its audit entries: the pending
   * one, and the `signed` one of its approval (kept with the request). Absent for the daemon's in-process calls.
   */
  via?: Record<string, string>;
  /**
   * RSA PSS only: the salt length in bytes when it is not the hash's length (Vault transit's salt_length). A request
   * held for approval keeps it (pending_requests.pss_salt_length) and is signed with it on approval.
   */
  pssSaltLength?: number;
}

export interface Signed {
  kind: 'signed';
  signature: Buffer;
  keyId: string;
  algorithm: SigningAlgorithm;
  requestId?: string;
  /** The signature record's id (signatures.id, the `signed` entry's details.signature_id). */
  signatureId?: string;
  /**
   * The index of the `signed` audit entry that records the signature, in the audit log and its transparency log
   * (seq - 1): the Signbridge-Log-Index header. Undefined only for a request approved before migration 0019.
   */
  logIndex?: number;
}

export interface Pending {
  kind: 'pending';
  requestId: string;
  status: PendingStatus;
  message: string;
}

export type SignOutcome = Signed | Pending;

/** `seconds`: from the start of the policy decision (or of the signature, on approval) to the outcome. */
export type SignOutcomeObserver = (
  outcome: 'signed' | 'denied' | 'pending' | 'failed',
  algorithm: SigningAlgorithm,
  tenantId: string,
  seconds: number,
) => void;
