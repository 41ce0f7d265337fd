// The bodies /v1's handlers answer with (src/api/routes/v1.ts): a signature or a held request, a batch's items with
// their proofs, the reply an idempotent request keeps, an exception record. Apart from the routes, which only
// validate, call the service and hand these back.
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ExceptionStatus } from '../../signing/exception-service.js';
import { describeHeld } from '../../signing/held-description.js';
import type { BatchItem, BatchOutcome, Signed, SignOutcome } from '../../signing/signing-service.js';
import type { Action } from '../../store/records/roles.js';
import type { ExceptionRecord, Store } from '../../store/store.js';
import { batchItemProof } from '../../transparency/batch-item-proof.js';
import { LogNotFoundError, type LogService } from '../../transparency/log-service.js';
import { asApiError } from '../error-handler.js';
import { type LogPreference, logProofHeaders, logProofsOf } from '../log-proof-preference.js';

export interface Reply {
  status: number;
  body: unknown;
  /** Sent as Signbridge-Log-Index. */
  logIndex?: number;
}

export function isReply(value: unknown): value is Reply {
  if (typeof value !== 'object' || value === null || !('status' in value) || !('body' in value)) return false;
  const keys = Object.keys(value).length;
  return keys === 2 || (keys === 3 && 'logIndex' in value);
}

/** 200 with the signature, or 202 with the pending request (ApprovalResponse) and where to decide it. */
export function signOutcome(outcome: SignOutcome, publicUrl: string | undefined): Reply {
  if (outcome.kind === 'pending') {
    const held = describeHeld(outcome, publicUrl);
    const body = { message: held.message, request_id: held.requestId, status: held.status };
    if (held.consolePage === undefined) return { status: 202, body };
    return { status: 202, body: { ...body, approve_url: held.consolePage } };
  }
  return {
    status: 200,
    body: {
      signature: outcome.signature.toString('base64'),
      key_id: outcome.keyId,
      signing_algorithm: outcome.algorithm,
      ...(outcome.requestId !== undefined && { request_id: outcome.requestId }),
    },
    ...(outcome.logIndex !== undefined && { logIndex: outcome.logIndex }),
  };
}

/**
 * The reply an idempotent request keeps when a `signed` entry records its signatures (src/api/idempotency.ts),
 * worded as the handler words it, without the log index the entry's commit assigns: `sign` and `pkcs11_sign`'s one
 * signature; a `sign_batch` whose every digest was signed (one that failed somewhere is kept after its answer).
 */
export function keptReplyOf(
  action: Action,
  body: Record<string, unknown>,
  request: FastifyRequest,
  signed: readonly Signed[],
  batchId: string | undefined,
  publicUrl: string | undefined,
): string | undefined {
  if (action !== 'sign_batch') {
    const [one] = signed;
    return signed.length === 1 && one ? JSON.stringify(signOutcome(one, publicUrl)) : undefined;
  }
  const [first] = signed;
  if (batchId === undefined || !first || signed.length !== (body.hashes as unknown[]).length) return undefined;
  const items = signed.map((one): BatchItem => ({ kind: 'signed', signed: one }));
  const outcome = { kind: 'signed' as const, batchId, keyId: first.keyId, algorithm: first.algorithm, items };
  return JSON.stringify({ status: 200, body: batchBody(body.tenant_id as string, outcome, request) });
}

/** SignBatchResponse: each item's signature, or its own error (logged here as the error handler would). */
export function batchBody(tenantId: string, outcome: BatchOutcome, request: FastifyRequest) {
  return {
    tenant_id: tenantId,
    key_id: outcome.keyId,
    signing_algorithm: outcome.algorithm,
    batch_id: outcome.batchId,
    results: outcome.items.map((item, index) => {
      if (item.kind === 'signed') {
        return {
          signature: item.signed.signature.toString('base64'),
          log_index: item.signed.logIndex as number,
          signature_id: item.signed.signatureId as string,
        };
      }
      const err = asApiError(item.error);
      request.log.warn({ code: err.code, index, cause: (item.error as Error)?.message }, 'batch item failed');
      return {
        error: { code: err.code, message: err.message, retryable: err.statusCode >= 500 || err.statusCode === 429 },
      };
    }),
  };
}

export type BatchBody = ReturnType<typeof batchBody>;

/**
 * A batch's answer with `Prefer: wait-for-log`: each signed item with the tlog-proof of its entry, all against one
 * checkpoint; the failed items as they were. Without a checkpoint in time, the answer as it was.
 */
export async function withBatchProofs(
  log: LogService,
  store: Store,
  body: BatchBody,
  preference: LogPreference,
  reply: FastifyReply,
): Promise<BatchBody> {
  const indexes = body.results.flatMap((item) => (item.log_index !== undefined ? [item.log_index] : []));
  // Each signature is the item of its place in the batch: its proof carries its path in the batch's entry (none
  // for a held batch approved before issue 46, whose signatures have entries of their own).
  const items = body.results.flatMap((item, i) => (item.log_index !== undefined ? [i] : []));
  const got = await logProofsOf(log, indexes, preference, {
    items,
    proof: (seq, item) =>
      batchItemProof(store, seq, item).catch((err) => {
        if (err instanceof LogNotFoundError) return undefined;
        throw err;
      }),
  });
  if (!got) return body;
  reply.headers(logProofHeaders(preference, got));
  let next = 0;
  return {
    ...body,
    results: body.results.map((item) =>
      item.log_index !== undefined ? { ...item, log_proof: got.proofs[next++] as string } : item,
    ),
  };
}

export function exceptionBody(e: ExceptionRecord, status: ExceptionStatus) {
  return {
    exception_id: e.id,
    tenant_id: e.tenantId,
    vuln_id: e.vulnId,
    ...(e.project !== null && { project: e.project }),
    ...(e.artifactType !== null && { artifact_type: e.artifactType }),
    reason: e.reason,
    created_by: e.createdBy,
    created_at: e.createdAt,
    expires_at: e.expiresAt,
    ...(e.revokedAt !== null && { revoked_at: e.revokedAt }),
    ...(e.revokedBy !== null && { revoked_by: e.revokedBy }),
    status,
  };
}
