// One table from the service's outcomes (HTTP status + error code) to wire statuses. Both upstreams use it, so
// the module sees the same status for the same failure whichever carries the request.
import { ERROR_CODES } from '../../src/errors.js';
import { WireStatus, type WireStatusCode } from '../../wire/wire.js';

export function wireStatusFor(httpStatus: number, code: string | undefined): WireStatusCode {
  switch (httpStatus) {
    case 400:
    case 413:
    case 415:
      return code === 'algorithm_key_mismatch' ? WireStatus.ALGORITHM_INVALID : WireStatus.BAD_REQUEST;
    case 401:
      return WireStatus.UNAUTHENTICATED;
    case 403:
      if (code === 'policy_denied') return WireStatus.POLICY_DENIED;
      if (code === 'request_rejected') return WireStatus.REJECTED;
      if (code === 'request_expired') return WireStatus.EXPIRED;
      return WireStatus.FORBIDDEN;
    case 404:
      if (code === 'request_not_found') return WireStatus.BAD_REQUEST;
      // A 404 that is not about a tenant or key means the service URL is wrong (no such route): not the key's fault.
      return code === 'unknown_action' || code === 'not_found' ? WireStatus.INTERNAL : WireStatus.KEY_NOT_FOUND;
    case 409:
      // The key the module was shown was rotated before the service signed: nothing was signed (CKR_KEY_CHANGED).
      return code === 'key_changed' ? WireStatus.KEY_CHANGED : WireStatus.INTERNAL;
    case 408:
    case 504:
      return WireStatus.TIMEOUT;
    case 429:
    case 502:
    case 503:
      return WireStatus.UNAVAILABLE;
    default:
      return WireStatus.INTERNAL;
  }
}

/** The MESSAGE the module logs: the service's code and reason, and for policy denials the vulnerability. */
export function messageFor(httpStatus: number, body: Record<string, unknown> | undefined): string {
  const code = typeof body?.error === 'string' ? body.error : `http_${httpStatus}`;
  const reason = typeof body?.reason === 'string' ? body.reason : 'no reason given';
  const extras: string[] = [];
  if (typeof body?.vuln_id === 'string') extras.push(`vuln_id ${body.vuln_id}`);
  if (typeof body?.fix_version === 'string') extras.push(`fix_version ${body.fix_version}`);
  return extras.length > 0 ? `${code}: ${reason} (${extras.join(', ')})` : `${code}: ${reason}`;
}

/**
 * One failed item of a signed batch (sign_batch's `{error: {code, retryable}}`, which has no HTTP status of its
 * own): the status its code has as a whole answer; a code this daemon does not know is UNAVAILABLE when the service
 * says a retry may succeed, else INTERNAL.
 */
export function wireStatusForItem(code: string, retryable: boolean): WireStatusCode {
  if (Object.hasOwn(ERROR_CODES, code))
    return wireStatusFor((ERROR_CODES as Record<string, number>)[code] ?? 500, code);
  return retryable ? WireStatus.UNAVAILABLE : WireStatus.INTERNAL;
}
