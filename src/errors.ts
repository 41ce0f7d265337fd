// Every error code the API can answer, with its HTTP status. Codes are stable: clients branch on them,
// so a code is never renamed or reused; new conditions get new codes. docs/api.md lists them.
export const ERROR_CODES = {
  invalid_request: 400,
  invalid_json: 400,
  action_mismatch: 400,
  unsupported_version: 400,
  invalid_hash: 400,
  unsupported_algorithm: 400,
  algorithm_key_mismatch: 400,
  key_spec_mismatch: 400,
  unsupported_key_spec: 400,
  invalid_sbom: 400,
  hash_mismatch: 400,
  invalid_exception: 400,
  // A request body states a CI fact (project, ref, run_id, ...) other than the one the workload key's token verified,
  // or any CI fact with a key that no token exchange minted (docs/policy.md, "CI workload facts").
  claims_conflict: 400,
  // Key import (AWS KMS's names: ExpiredImportToken, InvalidImportToken, InvalidCiphertext, IncorrectKeyMaterial).
  expired_import_token: 400,
  invalid_import_token: 400,
  invalid_ciphertext: 400,
  incorrect_key_material: 400,
  invalid_key_material: 400,
  wrapping_algorithm_not_allowed: 400,
  // The device flow's poll answers (RFC 8628 §3.5 names): a client branches on them.
  authorization_pending: 400,
  slow_down: 400,
  access_denied: 400,
  expired_token: 400,
  invalid_sign_in: 400,
  unauthorized: 401,
  forbidden: 403,
  policy_denied: 403,
  self_approval: 403,
  csrf_token_invalid: 403,
  request_rejected: 403,
  request_expired: 403,
  tenant_not_found: 404,
  key_not_found: 404,
  unknown_action: 404,
  not_found: 404,
  request_not_found: 404,
  exception_not_found: 404,
  method_not_allowed: 405,
  request_timeout: 408,
  tenant_exists: 409,
  request_not_pending: 409,
  exception_not_active: 409,
  // Idempotency-Key (sign, pkcs11_sign): the first request with this key is still being answered.
  idempotency_key_in_use: 409,
  // The key exists but cannot sign now: disabled or deleted in the key store, awaiting (re)import, material expired.
  key_not_usable: 409,
  // The request named a key version (key_id, a KMS KeyId, the daemon's key) that is no longer the tenant's current
  // one: rotated since the client read it. Not retryable as sent: read the key again (and its digest, for ML-DSA and
  // SM2, where the value signed depends on the public key).
  key_changed: 409,
  // sign_batch: the policy would hold these signatures for a person's decision; approvals cover one digest.
  batch_needs_approval: 409,
  payload_too_large: 413,
  unsupported_media_type: 415,
  // The Idempotency-Key was used before with a different request body.
  idempotency_key_reused: 422,
  rate_limited: 429,
  headers_too_large: 431,
  internal_error: 500,
  not_implemented: 501,
  key_store_unavailable: 503,
  shutting_down: 503,
  store_unavailable: 503,
  oauth_not_configured: 503,
  idp_unavailable: 503,
  // The time-stamping authority (docs/tsa.md): no identity made yet (`signbridge tsa init`), or the clock
  // cannot be trusted now (the configured check failed), so no token may state a time.
  tsa_not_configured: 503,
  time_source_unavailable: 503,
} as const;

export type ErrorCode = keyof typeof ERROR_CODES;

/** Seconds a client should wait before retrying (the Retry-After header); only for conditions that pass by themselves. */
export const RETRY_AFTER_SECONDS: Partial<Record<ErrorCode, number>> = {
  key_store_unavailable: 5,
  store_unavailable: 5,
  idempotency_key_in_use: 1,
  time_source_unavailable: 10,
};

/** Extra fields an ErrorResponse may carry (policy denials name the vulnerability). */
export interface ErrorDetails {
  vuln_id?: string;
  fix_version?: string;
  /** request_rejected: the request that was rejected (also when a retry gets the rejection again). */
  request_id?: string;
}

/** An error meant for the API caller: its code, status and reason are safe to show. */
export class ApiError extends Error {
  readonly code: ErrorCode;
  readonly statusCode: number;
  readonly details: ErrorDetails;
  /** Retry-After for this one error (a rate limit's window end), instead of RETRY_AFTER_SECONDS' fixed value. */
  readonly retryAfterSeconds: number | undefined;

  constructor(code: ErrorCode, reason: string, details: ErrorDetails = {}, retryAfterSeconds?: number) {
    super(reason);
    this.name = 'ApiError';
    this.code = code;
    this.statusCode = ERROR_CODES[code];
    this.details = details;
    this.retryAfterSeconds = retryAfterSeconds;
  }
}

export function isApiError(err: unknown): err is ApiError {
  return err instanceof ApiError;
}
