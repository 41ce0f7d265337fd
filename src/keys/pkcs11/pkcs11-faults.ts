// Which PKCS#11 answers mean the token lost the state the key store keeps for it (sessions, the login, object
// handles): an HSM that restarted, was unplugged, logged the service out or could not read its storage for a while.
// After one of these the key store opens its sessions again, logs in again and finds its keys again
// (pkcs11/recovery.ts); any other error is about the request and is reported as it is.
import { type KeyStoreOutage, KeyStoreUnavailableError } from '../key-store.js';

const TOKEN_FAULTS = new Set([
  'CKR_GENERAL_ERROR',
  'CKR_DEVICE_ERROR',
  'CKR_DEVICE_MEMORY',
  'CKR_DEVICE_REMOVED',
  'CKR_TOKEN_NOT_PRESENT',
  'CKR_TOKEN_NOT_RECOGNIZED',
  'CKR_SESSION_CLOSED',
  'CKR_SESSION_HANDLE_INVALID',
  'CKR_OBJECT_HANDLE_INVALID',
  'CKR_KEY_HANDLE_INVALID',
  'CKR_USER_NOT_LOGGED_IN',
]);

/** The CKR name of a token fault in a PKCS#11 error (pkcs11js names it in the message), or undefined. */
export function tokenFault(err: unknown): string | undefined {
  const name = /CKR_[A-Z_]+/.exec(err instanceof Error ? err.message : String(err))?.[0];
  return name !== undefined && TOKEN_FAULTS.has(name) ? name : undefined;
}

/**
 * The error a caller gets while the token cannot serve: 503 with Retry-After (src/errors.ts). `outage`: refused
 * because the token is away (not for one operation that failed after a good re-open).
 */
export function keyStoreUnavailable(fault: string, outage?: KeyStoreOutage): KeyStoreUnavailableError {
  return new KeyStoreUnavailableError(`the key store cannot serve right now (${fault}); retry later`, outage);
}
