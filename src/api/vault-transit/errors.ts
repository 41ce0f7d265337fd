// Vault's error answer, which its clients parse: `{"errors": ["..."]}` with the HTTP status. hvac raises by status
// (400 InvalidRequest, 403 Forbidden, 404 InvalidPath, 429 RateLimitExceeded, 500 InternalServerError, 503
// VaultDown) with the strings joined; Vault's Go client (cosign) and jsign print them. Every signbridge error code is
// mapped to such an answer here, in one place (docs/kms-api.md, "Vault transit").
import type { FastifyError, FastifyReply } from 'fastify';
import { ApiError, RETRY_AFTER_SECONDS } from '../../errors.js';
import { storeFault, storeUnavailable } from '../../store/store-errors.js';

/** What Vault answers for a missing, unknown or revoked token, word for word (clients and scripts match it). */
export const PERMISSION_DENIED = 'permission denied';

export class VaultError extends Error {
  constructor(
    readonly status: number,
    readonly errors: string[],
    readonly retryAfterSeconds?: number,
  ) {
    super(errors.join('; '));
    this.name = 'VaultError';
  }

  body(): { errors: string[] } {
    return { errors: this.errors };
  }
}

/** The policy's words: the rule and reason, and the vulnerability and its fix where the rule names one. */
function denialText(err: ApiError): string {
  const extra = [
    err.details.vuln_id !== undefined && `vuln_id ${err.details.vuln_id}`,
    err.details.fix_version !== undefined && `fix_version ${err.details.fix_version}`,
    err.details.request_id !== undefined && `request ${err.details.request_id}`,
  ].filter(Boolean);
  return extra.length > 0 ? `${err.message} (${extra.join(', ')})` : err.message;
}

/** signbridge's error codes as Vault answers: refusals 403, faults that pass 503 with "retry", the rest 400. */
export function fromApiError(err: ApiError): VaultError {
  switch (err.code) {
    case 'unauthorized':
      return new VaultError(403, [PERMISSION_DENIED]);
    case 'forbidden':
      return new VaultError(403, [PERMISSION_DENIED, err.message]);
    case 'policy_denied':
      return new VaultError(403, [`signing denied by signbridge policy: ${denialText(err)}`]);
    case 'request_rejected':
    case 'request_expired':
    case 'self_approval':
      return new VaultError(403, [denialText(err)]);
    case 'rate_limited':
      return new VaultError(429, [err.message], err.retryAfterSeconds ?? RETRY_AFTER_SECONDS.rate_limited);
  }
  if (err.statusCode >= 500) {
    const retryAfter = err.retryAfterSeconds ?? RETRY_AFTER_SECONDS[err.code];
    if (retryAfter !== undefined) return new VaultError(err.statusCode, [`${err.message}; retry`], retryAfter);
    return new VaultError(err.statusCode, ['internal error; the service log has the details under this request id']);
  }
  // Vault answers a request it cannot serve with 400 (hvac: InvalidRequest), whatever signbridge's finer code.
  return new VaultError(400, [err.message]);
}

/** Any error met on a Vault route, as a VaultError (unknown ones: 500, the details stay in the log). */
export function vaultErrorOf(err: unknown): VaultError {
  if (err instanceof VaultError) return err;
  if (err instanceof ApiError) return fromApiError(err);
  const fault = storeFault(err);
  if (fault) return fromApiError(storeUnavailable(fault));
  const e = err as FastifyError;
  if (e.validation) {
    const first = e.validation[0];
    const field = first?.instancePath ? first.instancePath.slice(1).replaceAll('/', '.') : (e.validationContext ?? '');
    return new VaultError(400, [`${field} ${first?.message ?? 'is invalid'}`.trim()]);
  }
  if (e.statusCode === 413) return new VaultError(413, ['request body is larger than the limit']);
  if (e.statusCode !== undefined && e.statusCode >= 400 && e.statusCode < 500) {
    return new VaultError(400, [e.message]);
  }
  return new VaultError(500, ['internal error; the service log has the details under this request id']);
}

export function sendVaultError(reply: FastifyReply, error: VaultError): FastifyReply {
  if (error.retryAfterSeconds !== undefined) reply.header('retry-after', String(error.retryAfterSeconds));
  return reply.code(error.status).send(error.body());
}
