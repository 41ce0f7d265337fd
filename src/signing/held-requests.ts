// Signing requests held for a person's decision: opened when the policy wants one, continued by the client's
// retries, collected by the requester; read up to date (expired once their lifetime passed, back from an abandoned
// `signing`). The decisions themselves: approvals.ts.

import { createHash, randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { SigningAlgorithm } from '../crypto/algorithms.js';
import { ApiError } from '../errors.js';
import type { EventBuilder } from '../events/event-builder.js';
import type { PolicyDecision } from '../policy/policy.js';
import {
  ConflictError,
  type KeyRecord,
  PENDING_STATUSES,
  type PendingRequestRecord,
  type PendingStatus,
  type RequestBatch,
  type Store,
  WAITING_STATUSES,
} from '../store/store.js';
import { digestNote } from './policy-check.js';
import { continuationIdentity, continuationKey } from './request-continuation.js';
import { expireRequest } from './request-expiry.js';
import type { Audit } from './service-audit.js';
import type { Signed, SignOutcome, SignOutcomeObserver, SignRequest } from './sign-outcome.js';
import type { TenantKeys } from './tenant-keys.js';
import { workloadAuditDetails } from './workload-context.js';

/** How long a request may sit in `signing` before it counts as abandoned by a crashed process. */
export const SIGNING_STUCK_MS = 2 * 60 * 1000;

/** approvalRetryWindowMs's default: a client's retry after a rejection gets the rejection again for 10 minutes. */
export const DEFAULT_APPROVAL_RETRY_WINDOW_MS = 10 * 60 * 1000;

/** Attempts to open a request when concurrent identical requests keep racing for it (each loser continues). */
const OPEN_REQUEST_ATTEMPTS = 3;

export interface HeldRequestsDeps {
  store: Store;
  events: EventBuilder;
  now: () => Date;
  observe: SignOutcomeObserver;
  audit: Audit;
  keys: TenantKeys;
  /** How long a pending request waits for its decisions. */
  approvalLifetimeMs: number;
  /** How long after a request was rejected or approved a retry of it gets that outcome again (0: never). */
  approvalRetryWindowMs: number;
}

export class HeldRequests {
  constructor(private readonly deps: HeldRequestsDeps) {}

  /**
   * The policy wants a person's decision. A retry (same continuation key: caller, tenant, key, algorithm, digest,
   * inputs) continues the request still waiting for it, or gets the outcome of one decided within the retry
   * window; otherwise a new request opens. The store's partial unique index lets only one of two concurrent
   * identical requests open it; the other finds it on its next attempt and continues it.
   */
  async holdForDecision(
    key: KeyRecord,
    algorithm: SigningAlgorithm,
    req: SignRequest,
    decision: Extract<PolicyDecision, { outcome: PendingStatus }>,
    about: Record<string, unknown>,
    start: number,
    batch?: RequestBatch,
  ): Promise<SignOutcome> {
    const action = req.action ?? 'sign';
    const matching = continuationKey({
      identity: continuationIdentity(req),
      tenantId: req.tenantId,
      keyId: key.id,
      algorithm,
      digest: req.digest,
      context: req.context,
      ...(batch && { batchSize: batch.hashes.length }),
      ...(req.pssSaltLength !== undefined && { pssSaltLength: req.pssSaltLength }),
    });
    for (let attempt = 1; ; attempt++) {
      const earlier = await this.continuableRequest(req.tenantId, matching);
      if (earlier) return this.continueRequest(earlier, req, action, about, start);
      const now = this.deps.now();
      const status = decision.outcome;
      const stages = decision.stages ?? [status];
      const requestId = randomUUID();
      const record: PendingRequestRecord = {
        id: requestId,
        tenantId: req.tenantId,
        keyId: key.id,
        algorithm,
        hash: req.digest.toString('base64'),
        inputs: JSON.stringify(req.context),
        requester: req.callerId,
        rule: decision.rule,
        reason: decision.reason,
        status,
        nextStages: stages.filter((s) => s !== status),
        decisions: [],
        signature: null,
        createdAt: now.toISOString(),
        expiresAt: new Date(now.getTime() + this.deps.approvalLifetimeMs).toISOString(),
        updatedAt: now.toISOString(),
        continuationKey: matching,
        ...(batch && { batch }),
        // Kept for the `signed` entry of its approval, which names the API it came through like this one's entry.
        ...(req.via && { via: req.via }),
        // Signed with at its approval: the salt the client asked for, not the hash's length.
        ...(req.pssSaltLength !== undefined && { pssSaltLength: req.pssSaltLength }),
      };
      try {
        await this.deps.store.requests.create(record, [await this.deps.events.request('signature.pending', record)]);
      } catch (err) {
        // A concurrent identical request opened it first: the next attempt finds and continues it.
        if (err instanceof ConflictError && attempt < OPEN_REQUEST_ATTEMPTS) continue;
        throw err;
      }
      await this.deps.audit(req.tenantId, req.callerId, action, status, { ...about, request_id: requestId });
      this.deps.observe('pending', algorithm, req.tenantId, (performance.now() - start) / 1000);
      const collect = batch
        ? `one request for all ${batch.hashes.length} digests; collect the signatures with sign_batch, request_id ${requestId} and the same hashes`
        : `collect the signature with request_id ${requestId}`;
      return {
        kind: 'pending',
        requestId,
        status,
        message: `${decision.rule}: ${decision.reason}${digestNote(decision)}; ${collect}`,
      };
    }
  }

  /**
   * The request a retry continues: the one still waiting (brought up to date: expired once its lifetime passed,
   * back from an abandoned `signing`), or one rejected or approved within the retry window. An expired or denied
   * request continues nothing: the retry opens a new one.
   */
  private async continuableRequest(tenantId: string, matching: string): Promise<PendingRequestRecord | undefined> {
    const decidedSince =
      this.deps.approvalRetryWindowMs > 0
        ? new Date(this.deps.now().getTime() - this.deps.approvalRetryWindowMs).toISOString()
        : null;
    const found = await this.deps.store.requests.findContinuable(tenantId, matching, decidedSince);
    if (!found) return undefined;
    const request = isWaiting(found.status) ? await this.pendingRequest(tenantId, found.id) : found;
    if (isWaiting(request.status)) return request;
    // Decided between the two reads: its outcome counts only within the window (and never when there is none).
    const recent = decidedSince !== null && request.updatedAt >= decidedSince;
    return (request.status === 'rejected' || request.status === 'approved') && recent ? request : undefined;
  }

  /** A retry continues `request`: one small `continued` audit entry, then the request's own answer. */
  private async continueRequest(
    request: PendingRequestRecord,
    req: SignRequest,
    action: NonNullable<SignRequest['action']>,
    about: Record<string, unknown>,
    start: number,
  ): Promise<SignOutcome> {
    await this.deps.audit(req.tenantId, req.callerId, action, 'continued', {
      request_id: request.id,
      request_status: request.status,
      key_id: about.key_id,
      algorithm: about.algorithm,
      hash: about.hash,
      inputs_digest: about.inputs_digest,
      ...(req.personId && { person: req.personId }),
      ...(req.workload && { workload: workloadAuditDetails(req.workload) }),
    });
    const seconds = () => (performance.now() - start) / 1000;
    if (request.status === 'rejected') {
      this.deps.observe('denied', request.algorithm, req.tenantId, seconds());
      throw new ApiError(
        'request_rejected',
        `request ${request.id} for this hash was rejected at ${request.updatedAt}${lastReason(request)}; a retry ` +
          `within ${this.deps.approvalRetryWindowMs / 60_000} min of the rejection gets this answer (approvals.retryWindowMinutes)`,
        { request_id: request.id },
      );
    }
    if (request.status === 'approved') {
      this.deps.observe('signed', request.algorithm, req.tenantId, seconds());
      return this.approvedSignature(request);
    }
    const status = request.status === 'signing' ? 'pending_approval' : (request.status as PendingStatus);
    this.deps.observe('pending', request.algorithm, req.tenantId, seconds());
    return {
      kind: 'pending',
      requestId: request.id,
      status,
      message:
        `this hash already waits as request ${request.id} (${request.status}, since ${request.createdAt}; it ` +
        `expires at ${request.expiresAt}); collect the signature with request_id ${request.id}`,
    };
  }

  /**
   * The requester (any signer of the tenant) collects the outcome of a pending request: 202 while it waits,
   * the signature once approved, 403 once rejected, expired or denied at approval time.
   */
  async collect(tenantId: string, requestId: string, digest: Buffer, asBatch = false): Promise<SignOutcome> {
    const request = await this.pendingRequest(tenantId, requestId);
    // A batch's request is collected whole by sign_batch (its `signed` answer carries no signature of its own).
    if (Boolean(request.batch) !== asBatch) {
      throw new ApiError(
        'invalid_request',
        request.batch
          ? `request ${requestId} holds a batch of ${request.batch.hashes.length} digests: collect it with sign_batch, request_id and the same hashes`
          : `request ${requestId} is for one digest: collect it with sign or pkcs11_sign`,
      );
    }
    if (!Buffer.from(request.hash, 'base64').equals(digest)) {
      throw new ApiError('hash_mismatch', `hash differs from the hash of request ${requestId}`);
    }
    switch (request.status) {
      case 'pending_approval':
      case 'pending_security_review':
      case 'signing':
        return {
          kind: 'pending',
          requestId,
          status: request.status === 'signing' ? 'pending_approval' : request.status,
          message: `request ${requestId} is waiting (${request.status}); it expires at ${request.expiresAt}`,
        };
      case 'approved':
        return this.approvedSignature(request);
      case 'rejected':
        throw new ApiError('request_rejected', `request ${requestId} was rejected${lastReason(request)}`, {
          request_id: requestId,
        });
      case 'expired':
        throw new ApiError('request_expired', `request ${requestId} expired at ${request.expiresAt}`);
      case 'denied':
        throw new ApiError(
          'policy_denied',
          `request ${requestId} was denied when re-checked at approval: ${request.reason}`,
        );
    }
  }

  /**
   * An approved request's signature, with the index of its `signed` entry: kept with the request at approval
   * (migration 0019); for a request approved before, looked up by the signature's SHA-256 (usually absent then).
   */
  async approvedSignature(request: PendingRequestRecord): Promise<Signed> {
    const signature = Buffer.from(request.signature ?? '', 'base64');
    // A batch's signatures are in request.batch.results (BatchSigner reads them); it has no one signature.
    const seq = request.batch
      ? undefined
      : (request.signedSeq ??
        (await this.deps.store.audit.seqOfSignature(
          request.tenantId,
          createHash('sha256').update(signature).digest(),
        )));
    return {
      kind: 'signed',
      signature,
      keyId: request.keyId,
      algorithm: request.algorithm,
      requestId: request.id,
      ...(seq !== undefined && { logIndex: seq - 1 }),
    };
  }

  async pendingRequest(tenantId: string, requestId: string): Promise<PendingRequestRecord> {
    await this.deps.keys.requireTenant(tenantId);
    const request = await this.deps.store.requests.get(tenantId, requestId);
    if (!request) throw new ApiError('request_not_found', `tenant ${tenantId} has no signing request ${requestId}`);
    const recovered = await this.recoverStuckSigning(request);
    if (recovered) return this.pendingRequest(tenantId, requestId);
    if (isPending(request.status) && Date.parse(request.expiresAt) <= this.deps.now().getTime()) {
      await expireRequest(this.deps.store, this.deps.events, request, this.deps.now().toISOString());
      return { ...request, status: 'expired' };
    }
    return request;
  }

  /**
   * A request left in `signing` by a process that died between claiming it and recording the signature would
   * wait forever. After SIGNING_STUCK_MS it goes back to the stage it was approved from, so it can be approved
   * again or expire. Its signature, if the HSM made one, was never recorded nor handed out: the request moves to
   * `approved` in the very commit of its signature and `signed` entry (migration 0027), so a request still in
   * `signing` has none in the log. (Only an instance on the code before 0027, which approved in a second commit,
   * can have left an entry behind; its signature's bytes were never kept, so it cannot be finished with.)
   */
  private async recoverStuckSigning(request: PendingRequestRecord): Promise<boolean> {
    if (request.status !== 'signing') return false;
    if (this.deps.now().getTime() - Date.parse(request.updatedAt) < SIGNING_STUCK_MS) return false;
    const last = request.decisions.at(-1);
    if (!last) return false;
    const back = await this.deps.store.requests.update(request.id, 'signing', {
      status: last.stage,
      decisions: request.decisions.slice(0, -1),
      updatedAt: this.deps.now().toISOString(),
    });
    if (back) {
      await this.deps.audit(request.tenantId, 'service', 'approve_sign', 'signing_abandoned', {
        request_id: request.id,
        back_to: last.stage,
        approved_by: last.by,
      });
    }
    return true;
  }
}

function isPending(status: string): status is PendingStatus {
  return (PENDING_STATUSES as readonly string[]).includes(status);
}

function isWaiting(status: string): boolean {
  return (WAITING_STATUSES as readonly string[]).includes(status);
}

function lastReason(request: PendingRequestRecord): string {
  const last = request.decisions.at(-1);
  return last?.reason ? `: ${last.reason}` : '';
}
