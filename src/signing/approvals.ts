// Decisions on held signing requests (approve_sign, and the console's Approve and Reject): the role each stage
// wants, the four-eyes rule, the policy checked again, then the next stage or the signature; a decision sent again
// gets its first answer.

import { performance } from 'node:perf_hooks';
import { ApiError } from '../errors.js';
import type { EventBuilder } from '../events/event-builder.js';
import {
  type KeyRecord,
  PENDING_STATUSES,
  type PendingRequestRecord,
  type PendingStatus,
  type RequestBatch,
  type Store,
} from '../store/store.js';
import { storeFault, storeUnavailable } from '../store/store-errors.js';
import type { HeldRequests } from './held-requests.js';
import { denial, type PolicyCheck } from './policy-check.js';
import type { PolicyContext } from './policy-context.js';
import type { Audit } from './service-audit.js';
import type { Signed } from './sign-outcome.js';
import type { SignatureRecorder } from './signature-recorder.js';
import type { TenantKeys } from './tenant-keys.js';
import { workloadAuditDetails } from './workload-context.js';

export interface ApprovalResult {
  requestId: string;
  status: 'approved' | 'rejected' | PendingStatus;
  message: string;
  signed?: Signed;
}

/** Who calls: enough of an API key record for the approval rules. */
export interface Caller {
  id: string;
  role: string;
  /** All roles of the key (a person's key may carry several); `role` alone when absent. */
  roles?: readonly string[];
  /** The person behind the key, when it is a person's key. */
  personId?: string | null;
}

export interface ApprovalsDeps {
  store: Store;
  events: EventBuilder;
  now: () => Date;
  audit: Audit;
  keys: TenantKeys;
  policy: PolicyCheck;
  recorder: SignatureRecorder;
  held: HeldRequests;
}

export class Approvals {
  constructor(private readonly deps: ApprovalsDeps) {}

  /**
   * approve_sign. The stage decides the role (approver / security_reviewer); the requester never approves
   * their own request; the policy is evaluated again (a component that became vulnerable still denies); the
   * signature uses the key version recorded in the request. A compare-and-set on the status makes two racing
   * approvals produce one signature.
   */
  async decide(
    tenantId: string,
    requestId: string,
    caller: Caller,
    decision: 'approve' | 'reject',
    reason?: string,
  ): Promise<ApprovalResult> {
    const request = await this.deps.held.pendingRequest(tenantId, requestId);
    const repeated = await this.repeatedDecision(request, caller, decision);
    if (repeated) return repeated;
    const stage = request.status;
    if (stage !== 'pending_approval' && stage !== 'pending_security_review') {
      throw new ApiError(
        'request_not_pending',
        `request ${requestId} is ${stage === 'signing' ? 'being signed' : stage}`,
      );
    }
    const needed = stage === 'pending_approval' ? 'approver' : 'security_reviewer';
    if (!(caller.roles ?? [caller.role]).includes(needed)) {
      throw new ApiError('forbidden', `request ${requestId} is ${stage}: only a ${needed} may decide it`);
    }
    if (caller.id === request.requester) {
      throw new ApiError('self_approval', `the requester of ${requestId} may not decide it`);
    }
    // Four eyes between people: another key of the requesting person is still the same person.
    const requesterKey = await this.deps.store.apiKeys.get(request.requester);
    const requesterPerson = requesterKey?.personId ?? null;
    if (caller.personId && caller.personId === requesterPerson) {
      throw new ApiError(
        'self_approval',
        `the person who requested ${requestId} may not decide it, with any of their keys`,
      );
    }
    const at = this.deps.now().toISOString();
    const decisions = [
      ...request.decisions,
      {
        stage,
        by: caller.id,
        at,
        decision,
        ...(caller.personId && { by_person: caller.personId }),
        ...(reason !== undefined && { reason }),
      },
    ];
    const about = {
      request_id: requestId,
      stage,
      requester: request.requester,
      hash: request.hash,
      reason,
      ...(requesterPerson && { requester_person: requesterPerson }),
      ...(caller.personId && { person: caller.personId }),
      // Who asked, when a CI job did: the approval's entries name the run like the request's own entry.
      ...(requesterKey?.workload && { workload: workloadAuditDetails(requesterKey.workload) }),
    };
    const decided = {
      stage,
      by: caller.id,
      byPerson: caller.personId ?? null,
      ...(reason !== undefined && { reason }),
    };
    if (decision === 'reject') {
      const rejected = await this.deps.events.request('signature.rejected', request, {
        decision: decided,
        status: 'rejected',
      });
      if (
        !(await this.deps.store.requests.update(requestId, stage, { status: 'rejected', decisions, updatedAt: at }, [
          rejected,
        ]))
      ) {
        throw this.lostRace(requestId);
      }
      await this.deps.audit(tenantId, caller.id, 'approve_sign', 'rejected', about);
      return { requestId, status: 'rejected', message: `request ${requestId} rejected` };
    }

    const context = JSON.parse(request.inputs) as PolicyContext;
    const key = await this.deps.store.tenants.getKey(tenantId, request.keyId);
    if (!key) throw new ApiError('key_not_found', `key ${request.keyId} of request ${requestId} no longer exists`);
    this.deps.keys.requireUsable(key);
    const recheck = await this.deps.policy.evaluate(key, request.algorithm, request.requester, tenantId, context);
    if (recheck.outcome === 'deny') {
      await this.deps.store.requests.update(requestId, stage, { status: 'denied', decisions, updatedAt: at }, [
        await this.deps.events.request('signature.denied', request, {
          denial: {
            rule: recheck.rule,
            reason: recheck.reason,
            ...(recheck.vulnId !== undefined && { vulnId: recheck.vulnId }),
            ...(recheck.fixVersion !== undefined && { fixVersion: recheck.fixVersion }),
          },
        }),
      ]);
      await this.deps.audit(tenantId, caller.id, 'approve_sign', 'denied', {
        ...about,
        rule: recheck.rule,
        reason: recheck.reason,
        inputs_digest: recheck.inputsDigest,
      });
      throw denial(recheck);
    }
    const [next, ...rest] = request.nextStages;
    if (next !== undefined) {
      // This stage is passed; the next one's deciders are told like the first one's were.
      const moved = { ...request, status: next, nextStages: rest, decisions };
      if (
        !(await this.deps.store.requests.update(
          requestId,
          stage,
          { status: next, nextStages: rest, decisions, updatedAt: at },
          [
            await this.deps.events.request('signature.approved', request, {
              decision: decided,
              status: next,
              nextStages: rest,
            }),
            await this.deps.events.request('signature.pending', moved),
          ],
        ))
      ) {
        throw this.lostRace(requestId);
      }
      await this.deps.audit(tenantId, caller.id, 'approve_sign', 'stage_approved', { ...about, next_stage: next });
      return {
        requestId,
        status: next,
        message: `stage ${stage} approved; request ${requestId} now waits for ${next}`,
      };
    }
    if (!(await this.deps.store.requests.update(requestId, stage, { status: 'signing', decisions, updatedAt: at }))) {
      throw this.lostRace(requestId);
    }
    const signedAbout = {
      ...about,
      key_id: key.id,
      algorithm: request.algorithm,
      outcome_of: 'approved',
      inputs_digest: recheck.inputsDigest,
      // Where the request came from, as its pending entry said: the approver only decided it.
      ...(request.via && { via: request.via }),
      ...(request.pssSaltLength != null && { pss_salt_length: request.pssSaltLength }),
    };
    if (request.batch) return this.signBatchRequest(request, key, caller, stage, decided, signedAbout);
    // Told with the signature, in its commit: a failed signature puts the request back, to be approved again.
    const approvedEvent = await this.deps.events.request('signature.approved', request, {
      decision: decided,
      status: 'approved',
      nextStages: [],
    });
    const signedEvent = await this.deps.events.signedOnApproval(request);
    let signed: Signed;
    try {
      // The request moves to `approved` with its signature in the commit of the signature's `signed` entry: a crash
      // leaves either both or neither (docs/api.md, "Retries of approve_sign").
      signed = await this.deps.recorder.signNow({
        key,
        algorithm: request.algorithm,
        digest: Buffer.from(request.hash, 'base64'),
        callerId: caller.id,
        action: 'approve_sign',
        details: signedAbout,
        completes: { requestId, events: (signatureId) => [approvedEvent, signedEvent(signatureId)] },
        signOptions: request.pssSaltLength == null ? undefined : { pssSaltLength: request.pssSaltLength },
      });
    } catch (err) {
      // Not signed: put the request back so it can be approved again.
      await this.deps.store.requests.update(requestId, 'signing', { status: stage, decisions: request.decisions });
      throw err;
    }
    return {
      requestId,
      status: 'approved',
      message: `request ${requestId} approved and signed`,
      signed: { ...signed, requestId },
    };
  }

  /**
   * The approval of a batch held as one request: every digest is signed now, and the signatures recorded as one
   * `signed` entry and log leaf with its items (details.batch names the request and holds their Merkle root), in
   * one commit with the request's results for the requester's collection. A digest the key store fails leaves its error in its place; if every one failed, the
   * request goes back to its stage to be approved again, as a one-digest request does.
   */
  private async signBatchRequest(
    request: PendingRequestRecord,
    key: KeyRecord,
    caller: Caller,
    stage: PendingStatus,
    decided: Record<string, unknown> & { stage: PendingStatus; by: string },
    about: Record<string, unknown>,
  ): Promise<ApprovalResult> {
    const batch = request.batch as RequestBatch;
    const digests = batch.hashes.map((h) => Buffer.from(h, 'base64'));
    const size = digests.length;
    const start = performance.now();
    const approvedEvent = await this.deps.events.request('signature.approved', request, {
      decision: decided,
      status: 'approved',
      nextStages: [],
    });
    const signedEvent = await this.deps.events.signedOnApproval(request);
    // Signed at the key store first, recorded together after: a crash in between leaves nothing in the log and the
    // request in `signing` (back to its stage after SIGNING_STUCK_MS, to be approved again).
    const items = await this.deps.recorder.signManyUnrecorded({
      key,
      algorithm: request.algorithm,
      digests,
      callerId: caller.id,
      action: 'approve_sign',
      start,
      // The salt the batch's client asked for (Vault transit's salt_length), as for one held digest.
      signOptions: request.pssSaltLength == null ? undefined : { pssSaltLength: request.pssSaltLength },
    });
    const made = items.flatMap((item, index) =>
      item.kind === 'made' ? [{ index, digest: digests[index] as Buffer, signature: item.signature }] : [],
    );
    if (made.length === 0) {
      await this.deps.store.requests.update(request.id, 'signing', { status: stage, decisions: request.decisions });
      throw (items[0] as { error: unknown }).error;
    }
    // The batch's one entry names no digest of its own (its items do); `about` may name the batch's digest.
    const { hash: _batchDigest, ...details } = about;
    await this.deps.recorder.recordBatch({
      key,
      algorithm: request.algorithm,
      callerId: caller.id,
      action: 'approve_sign',
      details,
      batch: { id: request.id, size, digests_sha256: Buffer.from(request.hash, 'base64').toString('hex') },
      made,
      // One signature.signed per signature made, each naming the request and its own signature.
      events: (signatureIds) => [approvedEvent, ...signatureIds.map((id) => signedEvent(id))],
      completes: {
        requestId: request.id,
        batch: (recorded) => {
          const byIndex = new Map(made.map((m, i) => [m.index, recorded[i]]));
          return {
            hashes: batch.hashes,
            results: items.map((item, index) => {
              const signed = byIndex.get(index);
              if (signed) return signed;
              const err = itemError((item as { error: unknown }).error);
              return { error: { code: err.code, message: err.message, retryable: err.statusCode >= 500 } };
            }),
          };
        },
      },
      start,
    });
    const failed = size - made.length;
    return {
      requestId: request.id,
      status: 'approved',
      message:
        `request ${request.id} approved: ${made.length} of ${size} digests signed` +
        (failed > 0 ? ` (${failed} failed at the key store: sign them again)` : '') +
        '; the requester collects them with sign_batch',
    };
  }

  /**
   * A decision the caller already made on this request, sent again (a client that lost the answer, e.g. to a crash
   * of the instance after the decision committed, retries): the same verdict from the same decider (the same API
   * key, or the same person with any of their keys or the console) gets that decision's answer again, and nothing
   * is decided, audited or told of a second time. Undefined when this is not a repeat: the opposite verdict, or
   * another decider, is decided (or refused) like any other call. docs/api.md, "Retries of approve_sign".
   */
  private async repeatedDecision(
    request: PendingRequestRecord,
    caller: Caller,
    decision: 'approve' | 'reject',
  ): Promise<ApprovalResult | undefined> {
    const index = request.decisions.findLastIndex(
      (d) => d.by === caller.id || (caller.personId != null && d.by_person === caller.personId),
    );
    const earlier = request.decisions[index];
    if (!earlier || earlier.decision !== decision) return undefined;
    const requestId = request.id;
    if (decision === 'reject') return { requestId, status: 'rejected', message: `request ${requestId} rejected` };
    // A stage approval moved the request on to the next stage: the answer named that stage. The next decision's
    // stage is it; without one the request either still waits there or ended there (expired). Stages are distinct,
    // so the next one is the other pending status.
    const later = request.decisions[index + 1];
    const stageAnswer = (next: PendingStatus): ApprovalResult => ({
      requestId,
      status: next,
      message: `stage ${earlier.stage} approved; request ${requestId} now waits for ${next}`,
    });
    if (later) return stageAnswer(later.stage);
    switch (request.status) {
      case 'approved':
        if (request.batch) {
          return {
            requestId,
            status: 'approved',
            message: `request ${requestId} approved; the requester collects its signatures with sign_batch`,
          };
        }
        return {
          requestId,
          status: 'approved',
          message: `request ${requestId} approved and signed`,
          signed: await this.deps.held.approvedSignature(request),
        };
      case 'signing':
        // The first attempt is still signing, or its process died before the signature's commit (which approves the
        // request with it): the request then returns to its stage after SIGNING_STUCK_MS, and a retry approves it
        // afresh. Nothing of it is in the log.
        throw new ApiError(
          'request_not_pending',
          `your approval of request ${requestId} is being signed; retry for its answer`,
          {},
          1,
        );
      case 'denied':
        throw new ApiError(
          'policy_denied',
          `request ${requestId} was denied by the policy when re-checked at your approval (the audit log names the rule)`,
        );
      case 'pending_approval':
      case 'pending_security_review':
        return stageAnswer(request.status);
      default:
        return stageAnswer(PENDING_STATUSES.find((s) => s !== earlier.stage) ?? 'pending_approval');
    }
  }

  private lostRace(requestId: string): ApiError {
    return new ApiError('request_not_pending', `request ${requestId} was decided by someone else meanwhile`);
  }
}

/** A batch item's failure as the requester will read it: the key store's or store's error, else an internal one. */
function itemError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  const fault = storeFault(err);
  if (fault) return storeUnavailable(fault);
  return new ApiError('internal_error', 'internal error signing this digest; the service log has the details');
}
