// What the service's answers mean to the daemon, apart from how they travel (remote-upstream.ts): a held request,
// the items of a sign_batch answer, the policy inputs under the API's names, and the answers that say the service
// could not serve the request now.
import { WireStatus } from '../../wire/wire.js';
import { wireStatusForItem } from './status-map.js';
import { type BatchItem, type SignContext, type SignResult, UpstreamError } from './upstream.js';

export interface HttpOutcome {
  status: number;
  body: Record<string, unknown> | undefined;
  requestId: string | undefined;
  /** The Signbridge-Log-Index header of an answer that hands out a signature. */
  logIndex?: number;
}

/** A 202: the request is held for a person's approval. */
export function pendingFrom(action: string, out: HttpOutcome): Extract<SignResult, { kind: 'pending' }> {
  const b = out.body ?? {};
  if (typeof b.request_id !== 'string' || typeof b.status !== 'string') {
    throw new UpstreamError(WireStatus.INTERNAL, `${action}: a 202 without request_id/status`, out.requestId);
  }
  return {
    kind: 'pending',
    requestId: b.request_id,
    status: b.status,
    message: typeof b.message === 'string' ? b.message : `signature request ${b.status}`,
    ...(typeof b.approve_url === 'string' && /^https?:\/\//.test(b.approve_url) && { approveUrl: b.approve_url }),
  };
}

/**
 * One entry of sign_batch's `results`: `{signature, log_index}` (and `log_proof` with `Prefer: wait-for-log`) or
 * `{error: {code, message, retryable}}`.
 */
export function batchItem(item: unknown, action: string, requestId: string | undefined): BatchItem {
  const entry = (item && typeof item === 'object' ? item : {}) as Record<string, unknown>;
  if (typeof entry.signature === 'string') {
    const logIndex = entry.log_index;
    return {
      signature: Buffer.from(entry.signature, 'base64'),
      ...(typeof logIndex === 'number' && Number.isSafeInteger(logIndex) && logIndex >= 0 && { logIndex }),
      ...(typeof entry.log_proof === 'string' && { logProof: entry.log_proof }),
    };
  }
  const error = (entry.error && typeof entry.error === 'object' ? entry.error : undefined) as
    | Record<string, unknown>
    | undefined;
  if (!error || typeof error.code !== 'string') {
    return {
      error: new UpstreamError(WireStatus.INTERNAL, `${action}: a result with neither signature nor error`, requestId),
    };
  }
  const reason = typeof error.message === 'string' ? error.message : 'no reason given';
  return {
    error: new UpstreamError(
      wireStatusForItem(error.code, error.retryable === true),
      `${error.code}: ${reason}`,
      requestId,
    ),
  };
}

/** A 404 about the request's tenant, key or request (not about the route itself). */
export function serviceNamesTheTarget(body: Record<string, unknown>): boolean {
  return typeof body.error === 'string' && body.error !== 'unknown_action' && body.error !== 'not_found';
}

/** The policy inputs, under the API's field names. */
export function contextFields(context: SignContext): Record<string, string> {
  return {
    ...(context.project !== undefined && { project: context.project }),
    ...(context.environment !== undefined && { environment: context.environment }),
    ...(context.artifactType !== undefined && { artifact_type: context.artifactType }),
    ...(context.artifactVersion !== undefined && { artifact_version: context.artifactVersion }),
    ...(context.sbom !== undefined && { sbom: context.sbom }),
  };
}

/**
 * An answer that says the service could not serve the request now and nothing was done: a proxy with no service
 * behind it (502), the service shutting down or its store or key store out (503, except oauth_not_configured,
 * which stays so), a request timeout before it was read (408), or too many requests (429).
 */
export function serviceCannotAnswer(out: HttpOutcome): boolean {
  if (out.status === 503) return out.body?.error !== 'oauth_not_configured';
  return out.status === 502 || out.status === 408 || out.status === 429;
}
