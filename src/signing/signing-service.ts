// The service's domain logic: tenants, key versions and signing. Transport-free, so the HTTP routes and the
// daemon's in-process mode share it.

import { createHash, randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { WorkloadIdentity } from '../auth/workload/workload-identity.js';
import {
  algorithmForPkcs11,
  checkSigningRequest,
  type KeySpec,
  keyInfo,
  type SigningAlgorithm,
} from '../crypto/algorithms.js';
import { ApiError } from '../errors.js';
import { EventBuilder, type PolicyDecided } from '../events/event-builder.js';
import { expireRequest } from '../events/request-expiry.js';
import { type KeyStore, type KeyStoreOutage, KeyStores, outageOf } from '../keys/key-store.js';
import type { ActiveException, PolicyDecision, PolicyEngine } from '../policy/policy.js';
import type { EventInput } from '../store/records/event-kinds.js';
import {
  type AuditEntryInput,
  ConflictError,
  type KeyRecord,
  PENDING_STATUSES,
  type PendingRequestRecord,
  type PendingStatus,
  type Store,
  type TenantRecord,
  WAITING_STATUSES,
} from '../store/store.js';
import type { PolicyContext } from './policy-context.js';
import { continuationIdentity, continuationKey } from './request-continuation.js';
import { countVelocity } from './velocity.js';
import { workloadAuditDetails } from './workload-context.js';

export type { PolicyContext };

export interface SignRequest {
  /** The API action, for the audit log (default sign). */
  action?: 'sign' | 'pkcs11_sign';
  tenantId: string;
  callerId: string;
  /** The person behind the caller's key, recorded in the audit entry. */
  personId?: string | null;
  /** The CI workload identity of the caller's key (a key from the token exchange); its facts are in `context`. */
  workload?: WorkloadIdentity | null;
  digest: Buffer;
  context: PolicyContext;
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

/** How long a request may sit in `signing` before it counts as abandoned by a crashed process. */
export const SIGNING_STUCK_MS = 2 * 60 * 1000;

/** approvalRetryWindowMs's default: a client's retry after a rejection gets the rejection again for 10 minutes. */
export const DEFAULT_APPROVAL_RETRY_WINDOW_MS = 10 * 60 * 1000;

/** Attempts to open a request when concurrent identical requests keep racing for it (each loser continues). */
const OPEN_REQUEST_ATTEMPTS = 3;

export interface ApprovalResult {
  requestId: string;
  status: 'approved' | 'rejected' | PendingStatus;
  message: string;
  signed?: Signed;
}

export interface SigningServiceDeps {
  store: Store;
  /** One key store, or several (each key version records which one holds it). */
  keyStore: KeyStore | KeyStores;
  policy: PolicyEngine;
  now?: () => Date;
  /** How long a pending request waits for its decisions (default 24 h). */
  approvalLifetimeMs?: number;
  /**
   * How long after a request was rejected or approved a retry of it gets that outcome again instead of opening a
   * new request (default 10 min; 0: only waiting requests are continued). docs/policy.md.
   */
  approvalRetryWindowMs?: number;
  /** Told the outcome of every signing request that reached the policy (for /metrics); must not throw. */
  onSignOutcome?: SignOutcomeObserver;
  /** Makes the events the changes tell of (docs/events.md); default: one without console links. */
  events?: EventBuilder;
}

/** `seconds`: from the start of the policy decision (or of the signature, on approval) to the outcome. */
export type SignOutcomeObserver = (
  outcome: 'signed' | 'denied' | 'pending' | 'failed',
  algorithm: SigningAlgorithm,
  tenantId: string,
  seconds: number,
) => void;

const noObserver: SignOutcomeObserver = () => undefined;

/** Who calls: enough of an API key record for the approval rules. */
export interface Caller {
  id: string;
  role: string;
  /** All roles of the key (a person's key may carry several); `role` alone when absent. */
  roles?: readonly string[];
  /** The person behind the key, when it is a person's key. */
  personId?: string | null;
}

export class SigningService {
  private readonly store: Store;
  private readonly keyStores: KeyStores;
  private readonly policy: PolicyEngine;
  private readonly now: () => Date;
  private readonly approvalLifetimeMs: number;
  private readonly approvalRetryWindowMs: number;
  private readonly observe: SignOutcomeObserver;
  private readonly events: EventBuilder;
  /** The commit of each outage's start entry: a request refused in the outage is answered after it. */
  private readonly outageStarts = new WeakMap<KeyStoreOutage, Promise<void>>();

  constructor(deps: SigningServiceDeps) {
    this.observe = deps.onSignOutcome ?? noObserver;
    this.store = deps.store;
    this.events = deps.events ?? new EventBuilder(deps.store, undefined);
    this.keyStores = KeyStores.of(deps.keyStore);
    this.policy = deps.policy;
    this.now = deps.now ?? (() => new Date());
    this.approvalLifetimeMs = deps.approvalLifetimeMs ?? 24 * 3600 * 1000;
    this.approvalRetryWindowMs = deps.approvalRetryWindowMs ?? DEFAULT_APPROVAL_RETRY_WINDOW_MS;
    for (const keyStore of this.keyStores.stores) keyStore.reportOutages?.((outage) => this.auditOutage(outage));
  }

  /**
   * A key store outage's start, and its end with the count of signing requests refused meanwhile (each one counted
   * there has no sign_failed entry of its own; docs/policy.md). Best effort: if the store cannot write either, the
   * end entry still names the start, and the service's log has both.
   */
  private auditOutage(outage: KeyStoreOutage): void {
    const endedAt = outage.endedAt;
    const details = {
      key_store: outage.keyStore,
      fault: outage.fault,
      started_at: outage.startedAt.toISOString(),
      ...(endedAt && { ended_at: endedAt.toISOString(), refused: outage.refused }),
    };
    const written = this.audit(null, 'service', 'key_store_outage', endedAt ? 'ended' : 'started', details).catch(
      () => undefined,
    );
    if (!endedAt) this.outageStarts.set(outage, written);
  }

  async createTenant(
    tenantId: string,
    keySpec: KeySpec,
    actor: string,
  ): Promise<{ tenant: TenantRecord; key: KeyRecord }> {
    this.requireSupported(keySpec);
    if (await this.store.tenants.get(tenantId)) {
      throw new ApiError('tenant_exists', `tenant ${tenantId} already exists`);
    }
    const key = await this.newKey(tenantId, keySpec, 1);
    try {
      const tenant = await this.store.tenants.create(tenantId, key, [
        await this.events.tenantCreated(tenantId, key, actor),
      ]);
      await this.audit(tenantId, actor, 'create_tenant', 'created', { key_id: key.id, key_spec: keySpec });
      return { tenant, key };
    } catch (err) {
      // Lost a race with a concurrent create_tenant: the key we made is orphaned, remove it.
      await this.destroy(key);
      if (err instanceof ConflictError) throw new ApiError('tenant_exists', `tenant ${tenantId} already exists`);
      throw err;
    }
  }

  async rotateKey(tenantId: string, actor: string, keySpec?: KeySpec): Promise<{ key: KeyRecord; keys: KeyRecord[] }> {
    const current = await this.currentKey(tenantId);
    const spec = keySpec ?? current.keySpec;
    this.requireSupported(spec);
    const made = await this.newKey(tenantId, spec, 0);
    let key: KeyRecord;
    try {
      const by = await this.events.actor(actor);
      key = await this.store.tenants.rotateKey(tenantId, made, (k) => [
        this.events.keyEvent('key.rotated', k, by, current.id),
      ]);
    } catch (err) {
      await this.destroy(made);
      throw err;
    }
    await this.audit(tenantId, actor, 'rotate_key', 'rotated', {
      key_id: key.id,
      key_spec: key.keySpec,
      version: key.version,
    });
    return { key, keys: await this.store.tenants.listKeys(tenantId) };
  }

  /** The tenant's current key, or the version named by `keyId`. */
  async getKey(tenantId: string, keyId?: string): Promise<KeyRecord> {
    if (keyId === undefined) return this.currentKey(tenantId);
    await this.requireTenant(tenantId);
    const key = await this.store.tenants.getKey(tenantId, keyId);
    if (!key) throw new ApiError('key_not_found', `tenant ${tenantId} has no key ${keyId}`);
    return key;
  }

  async listKeys(tenantId: string): Promise<KeyRecord[]> {
    await this.requireTenant(tenantId);
    return this.store.tenants.listKeys(tenantId);
  }

  /** `sign`: the caller names the algorithm (KMS names); it must fit the key and the digest. */
  async sign(req: SignRequest & { algorithm: SigningAlgorithm }): Promise<SignOutcome> {
    const key = await this.currentKey(req.tenantId);
    checkSigningRequest(key.keySpec, req.algorithm, req.digest);
    return this.decideAndSign(key, req.algorithm, req);
  }

  /** `pkcs11_sign`: the algorithm follows from the key spec, the digest length and `pss`. */
  async pkcs11Sign(req: SignRequest & { keySpec?: KeySpec; pss: boolean }): Promise<SignOutcome> {
    const key = await this.currentKey(req.tenantId);
    if (req.keySpec !== undefined && req.keySpec !== key.keySpec) {
      throw new ApiError(
        'key_spec_mismatch',
        `key_spec ${req.keySpec} does not match tenant ${req.tenantId}'s current key (${key.keySpec})`,
      );
    }
    const algorithm = algorithmForPkcs11(key.keySpec, req.digest, req.pss);
    return this.decideAndSign(key, algorithm, req);
  }

  /**
   * The requester (any signer of the tenant) collects the outcome of a pending request: 202 while it waits,
   * the signature once approved, 403 once rejected, expired or denied at approval time.
   */
  async collect(tenantId: string, requestId: string, digest: Buffer): Promise<SignOutcome> {
    const request = await this.pendingRequest(tenantId, requestId);
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
    const request = await this.pendingRequest(tenantId, requestId);
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
    const requesterKey = await this.store.apiKeys.get(request.requester);
    const requesterPerson = requesterKey?.personId ?? null;
    if (caller.personId && caller.personId === requesterPerson) {
      throw new ApiError(
        'self_approval',
        `the person who requested ${requestId} may not decide it, with any of their keys`,
      );
    }
    const at = this.now().toISOString();
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
      const rejected = await this.events.request('signature.rejected', request, {
        decision: decided,
        status: 'rejected',
      });
      if (
        !(await this.store.requests.update(requestId, stage, { status: 'rejected', decisions, updatedAt: at }, [
          rejected,
        ]))
      ) {
        throw this.lostRace(requestId);
      }
      await this.audit(tenantId, caller.id, 'approve_sign', 'rejected', about);
      return { requestId, status: 'rejected', message: `request ${requestId} rejected` };
    }

    const context = JSON.parse(request.inputs) as PolicyContext;
    const key = await this.store.tenants.getKey(tenantId, request.keyId);
    if (!key) throw new ApiError('key_not_found', `key ${request.keyId} of request ${requestId} no longer exists`);
    this.requireUsable(key);
    const recheck = await this.evaluate(key, request.algorithm, request.requester, tenantId, context);
    if (recheck.outcome === 'deny') {
      await this.store.requests.update(requestId, stage, { status: 'denied', decisions, updatedAt: at }, [
        await this.events.request('signature.denied', request, {
          denial: {
            rule: recheck.rule,
            reason: recheck.reason,
            ...(recheck.vulnId !== undefined && { vulnId: recheck.vulnId }),
            ...(recheck.fixVersion !== undefined && { fixVersion: recheck.fixVersion }),
          },
        }),
      ]);
      await this.audit(tenantId, caller.id, 'approve_sign', 'denied', {
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
        !(await this.store.requests.update(
          requestId,
          stage,
          { status: next, nextStages: rest, decisions, updatedAt: at },
          [
            await this.events.request('signature.approved', request, {
              decision: decided,
              status: next,
              nextStages: rest,
            }),
            await this.events.request('signature.pending', moved),
          ],
        ))
      ) {
        throw this.lostRace(requestId);
      }
      await this.audit(tenantId, caller.id, 'approve_sign', 'stage_approved', { ...about, next_stage: next });
      return {
        requestId,
        status: next,
        message: `stage ${stage} approved; request ${requestId} now waits for ${next}`,
      };
    }
    if (!(await this.store.requests.update(requestId, stage, { status: 'signing', decisions, updatedAt: at }))) {
      throw this.lostRace(requestId);
    }
    let signed: Signed;
    try {
      signed = await this.signNow(
        key,
        request.algorithm,
        Buffer.from(request.hash, 'base64'),
        caller.id,
        'approve_sign',
        {
          ...about,
          key_id: key.id,
          algorithm: request.algorithm,
          outcome_of: 'approved',
          inputs_digest: recheck.inputsDigest,
        },
      );
    } catch (err) {
      // Not signed: put the request back so it can be approved again.
      await this.store.requests.update(requestId, 'signing', { status: stage, decisions: request.decisions });
      throw err;
    }
    await this.store.requests.update(
      requestId,
      'signing',
      {
        status: 'approved',
        signature: signed.signature.toString('base64'),
        updatedAt: this.now().toISOString(),
        ...(signed.logIndex !== undefined && { signedSeq: signed.logIndex + 1 }),
      },
      // Told once the signature is made: a failed signature puts the request back, to be approved again.
      [
        await this.events.request('signature.approved', request, {
          decision: decided,
          status: 'approved',
          nextStages: [],
        }),
        await this.events.request('signature.signed', request, { signatureId: signed.signatureId }),
      ],
    );
    return {
      requestId,
      status: 'approved',
      message: `request ${requestId} approved and signed`,
      signed: { ...signed, requestId },
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
        return {
          requestId,
          status: 'approved',
          message: `request ${requestId} approved and signed`,
          signed: await this.approvedSignature(request),
        };
      case 'signing':
        // The first attempt is still signing, or its process died doing so (the request then returns to its stage
        // after SIGNING_STUCK_MS, and a retry approves it afresh).
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

  /**
   * An approved request's signature, with the index of its `signed` entry: kept with the request at approval
   * (migration 0019); for a request approved before, looked up by the signature's SHA-256 (usually absent then).
   */
  private async approvedSignature(request: PendingRequestRecord): Promise<Signed> {
    const signature = Buffer.from(request.signature ?? '', 'base64');
    const seq =
      request.signedSeq ??
      (await this.store.audit.seqOfSignature(request.tenantId, createHash('sha256').update(signature).digest()));
    return {
      kind: 'signed',
      signature,
      keyId: request.keyId,
      algorithm: request.algorithm,
      requestId: request.id,
      ...(seq !== undefined && { logIndex: seq - 1 }),
    };
  }

  private async pendingRequest(tenantId: string, requestId: string): Promise<PendingRequestRecord> {
    await this.requireTenant(tenantId);
    const request = await this.store.requests.get(tenantId, requestId);
    if (!request) throw new ApiError('request_not_found', `tenant ${tenantId} has no signing request ${requestId}`);
    const recovered = await this.recoverStuckSigning(request);
    if (recovered) return this.pendingRequest(tenantId, requestId);
    if (isPending(request.status) && Date.parse(request.expiresAt) <= this.now().getTime()) {
      await expireRequest(this.store, this.events, request, this.now().toISOString());
      return { ...request, status: 'expired' };
    }
    return request;
  }

  /**
   * A request left in `signing` by a process that died between claiming it and recording the signature would
   * wait forever. After SIGNING_STUCK_MS it goes back to the stage it was approved from (the signature, if the
   * HSM made one, was never handed out), so it can be approved again or expire.
   */
  private async recoverStuckSigning(request: PendingRequestRecord): Promise<boolean> {
    if (request.status !== 'signing') return false;
    if (this.now().getTime() - Date.parse(request.updatedAt) < SIGNING_STUCK_MS) return false;
    const last = request.decisions.at(-1);
    if (!last) return false;
    const back = await this.store.requests.update(request.id, 'signing', {
      status: last.stage,
      decisions: request.decisions.slice(0, -1),
      updatedAt: this.now().toISOString(),
    });
    if (back) {
      await this.audit(request.tenantId, 'service', 'approve_sign', 'signing_abandoned', {
        request_id: request.id,
        back_to: last.stage,
        approved_by: last.by,
      });
    }
    return true;
  }

  /** Appends to the audit log; a failed write fails the caller's request. */
  private audit(
    tenantId: string | null,
    actor: string,
    action: string,
    outcome: string,
    details: Record<string, unknown>,
    events?: readonly EventInput[],
  ): Promise<void> {
    return this.store.audit.append({ at: this.now().toISOString(), tenantId, actor, action, outcome, details }, events);
  }

  private lostRace(requestId: string): ApiError {
    return new ApiError('request_not_pending', `request ${requestId} was decided by someone else meanwhile`);
  }

  private async evaluate(
    key: KeyRecord,
    algorithm: SigningAlgorithm,
    callerId: string,
    tenantId: string,
    context: PolicyContext,
  ): Promise<PolicyDecision> {
    return this.policy.evaluate({
      ...context,
      tenantId,
      keyId: key.id,
      keySpec: key.keySpec,
      algorithm,
      callerId,
      // Exceptions only ever excuse SBOM findings: skip the query on the (common) requests without an SBOM.
      exceptions: context.sbom === undefined ? [] : await this.activeExceptions(tenantId),
    });
  }

  private async activeExceptions(tenantId: string): Promise<ActiveException[]> {
    const now = this.now().getTime();
    return (await this.store.exceptions.list(tenantId))
      .filter((e) => e.revokedAt === null && Date.parse(e.expiresAt) > now)
      .map((e) => ({
        id: e.id,
        vulnId: e.vulnId,
        ...(e.project !== null && { project: e.project }),
        ...(e.artifactType !== null && { artifactType: e.artifactType }),
      }));
  }

  private async decideAndSign(key: KeyRecord, algorithm: SigningAlgorithm, req: SignRequest): Promise<SignOutcome> {
    this.requireUsable(key);
    const start = performance.now();
    // Asked now, in the turn the key was read in: the cache's epoch check (one round trip on PostgreSQL) is then
    // the one that turn made already. Awaited only if the policy allows; a failure then fails the request.
    const told = this.store.wantsEvent(req.tenantId, 'signature.signed');
    told.catch(() => undefined);
    const workload = req.workload ? { workload: workloadAuditDetails(req.workload) } : {};
    await this.enforceVelocity(key, algorithm, req, workload);
    const decision = await this.evaluate(key, algorithm, req.callerId, req.tenantId, req.context);
    const about = {
      key_id: key.id,
      algorithm,
      hash: req.digest.toString('base64'),
      rule: decision.rule,
      reason: decision.reason,
      inputs_digest: decision.inputsDigest,
      ...(req.personId && { person: req.personId }),
      ...workload,
    };
    const decided: PolicyDecided = {
      tenantId: req.tenantId,
      keyId: key.id,
      algorithm,
      digest: req.digest.toString('base64'),
      rule: decision.rule,
      reason: decision.reason,
      inputs: req.context as Record<string, unknown>,
      requester: req.callerId,
    };
    if (decision.outcome === 'deny') {
      const denied = await this.events.denied({
        ...decided,
        ...(decision.vulnId !== undefined && { vulnId: decision.vulnId }),
        ...(decision.fixVersion !== undefined && { fixVersion: decision.fixVersion }),
      });
      await this.audit(
        req.tenantId,
        req.callerId,
        req.action ?? 'sign',
        'denied',
        { ...about, vuln_id: decision.vulnId, fix_version: decision.fixVersion },
        [denied],
      );
      this.observe('denied', algorithm, req.tenantId, (performance.now() - start) / 1000);
      throw denial(decision);
    }
    if (decision.outcome !== 'allow') return this.holdForDecision(key, algorithm, req, decision, about, start);
    // signature.signed for every signature made at once, where a subscription of the tenant wants it (docs/events.md).
    const signedEvent = (await told)
      ? await this.events.signedAtOnce({ ...decided, personId: req.personId ?? null })
      : undefined;
    return this.signNow(key, algorithm, req.digest, req.callerId, req.action ?? 'sign', about, start, signedEvent);
  }

  /**
   * The policy's velocity limits, counted before the policy decides (every request that reaches the policy counts):
   * over one, the request is 429 rate_limited with the rest of that window as Retry-After, and an audit entry
   * (outcome rate_limited) says which limit.
   */
  private async enforceVelocity(
    key: KeyRecord,
    algorithm: SigningAlgorithm,
    req: SignRequest,
    workload: Record<string, unknown>,
  ): Promise<void> {
    const limits = this.policy.velocityLimits?.(req.tenantId);
    const exceeded = await countVelocity(this.store, limits, req, this.now().getTime());
    if (!exceeded) return;
    const reason =
      `velocity.${exceeded.limit}: at most ${exceeded.max} signing requests per ${exceeded.windowSeconds} s for ` +
      `${exceeded.subject}; retry after ${exceeded.retryAfterSeconds} s`;
    await this.audit(req.tenantId, req.callerId, req.action ?? 'sign', 'rate_limited', {
      key_id: key.id,
      algorithm,
      hash: req.digest.toString('base64'),
      limit: exceeded.limit,
      max: exceeded.max,
      window_seconds: exceeded.windowSeconds,
      counted: exceeded.subject,
      reason,
      ...(req.personId && { person: req.personId }),
      ...workload,
    });
    throw new ApiError('rate_limited', reason, {}, exceeded.retryAfterSeconds);
  }

  /**
   * The policy wants a person's decision. A retry (same continuation key: caller, tenant, key, algorithm, digest,
   * inputs) continues the request still waiting for it, or gets the outcome of one decided within the retry
   * window; otherwise a new request opens. The store's partial unique index lets only one of two concurrent
   * identical requests open it; the other finds it on its next attempt and continues it.
   */
  private async holdForDecision(
    key: KeyRecord,
    algorithm: SigningAlgorithm,
    req: SignRequest,
    decision: Extract<PolicyDecision, { outcome: PendingStatus }>,
    about: Record<string, unknown>,
    start: number,
  ): Promise<SignOutcome> {
    const action = req.action ?? 'sign';
    const matching = continuationKey({
      identity: continuationIdentity(req),
      tenantId: req.tenantId,
      keyId: key.id,
      algorithm,
      digest: req.digest,
      context: req.context,
    });
    for (let attempt = 1; ; attempt++) {
      const earlier = await this.continuableRequest(req.tenantId, matching);
      if (earlier) return this.continueRequest(earlier, req, action, about, start);
      const now = this.now();
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
        expiresAt: new Date(now.getTime() + this.approvalLifetimeMs).toISOString(),
        updatedAt: now.toISOString(),
        continuationKey: matching,
      };
      try {
        await this.store.requests.create(record, [await this.events.request('signature.pending', record)]);
      } catch (err) {
        // A concurrent identical request opened it first: the next attempt finds and continues it.
        if (err instanceof ConflictError && attempt < OPEN_REQUEST_ATTEMPTS) continue;
        throw err;
      }
      await this.audit(req.tenantId, req.callerId, action, status, { ...about, request_id: requestId });
      this.observe('pending', algorithm, req.tenantId, (performance.now() - start) / 1000);
      return {
        kind: 'pending',
        requestId,
        status,
        message: `${decision.rule}: ${decision.reason}${digestNote(decision)}; collect the signature with request_id ${requestId}`,
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
      this.approvalRetryWindowMs > 0 ? new Date(this.now().getTime() - this.approvalRetryWindowMs).toISOString() : null;
    const found = await this.store.requests.findContinuable(tenantId, matching, decidedSince);
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
    action: string,
    about: Record<string, unknown>,
    start: number,
  ): Promise<SignOutcome> {
    await this.audit(req.tenantId, req.callerId, action, 'continued', {
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
      this.observe('denied', request.algorithm, req.tenantId, seconds());
      throw new ApiError(
        'request_rejected',
        `request ${request.id} for this hash was rejected at ${request.updatedAt}${lastReason(request)}; a retry ` +
          `within ${this.approvalRetryWindowMs / 60_000} min of the rejection gets this answer (approvals.retryWindowMinutes)`,
        { request_id: request.id },
      );
    }
    if (request.status === 'approved') {
      this.observe('signed', request.algorithm, req.tenantId, seconds());
      return this.approvedSignature(request);
    }
    const status = request.status === 'signing' ? 'pending_approval' : (request.status as PendingStatus);
    this.observe('pending', request.algorithm, req.tenantId, seconds());
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
   * Signs, and records the signature and its `signed` audit entry (one transaction) before handing it out: a
   * signature the store could not record is never handed out. A store that commits on a thread of its own gets
   * both ahead of the signature, so the commit runs while the key store signs; if the key store then fails, the
   * record is withdrawn and a `sign_failed` entry naming it follows in the log. A store that commits on the event
   * loop gets them right after the signature: there the commit could not overlap an inline signature anyway, and
   * writing ahead cost 10-20% of the throughput under load (docs/benchmarks.md).
   *
   * `signedEvent` makes the signature's signature.signed event (a signature made at once, for a tenant with a
   * subscription that wants it); it is written in the record's transaction, which then always follows the signature:
   * an event written ahead could be fanned out and delivered before a key store failure withdrew its signature.
   */
  private async signNow(
    key: KeyRecord,
    algorithm: SigningAlgorithm,
    digest: Buffer,
    callerId: string,
    action: string,
    details: Record<string, unknown>,
    start = performance.now(),
    signedEvent?: (signatureId: string) => EventInput,
  ): Promise<Signed> {
    // `signatureSha256`: known when the record follows the signature; its lookup row then goes with the record.
    const record = (signatureSha256?: Buffer): { id: string; written: Promise<number | undefined> } => {
      const at = this.now();
      const id = timeOrderedId(at.getTime());
      const written = this.store.signatures.record(
        {
          id,
          tenantId: key.tenantId,
          keyId: key.id,
          algorithm,
          hash: digest.toString('base64'),
          caller: callerId,
          createdAt: at.toISOString(),
          ...(signatureSha256 && { signatureSha256 }),
        },
        {
          at: at.toISOString(),
          tenantId: key.tenantId,
          actor: callerId,
          action,
          outcome: 'signed',
          // Which key store signed: the software store, the token and AWS KMS differ in what they guarantee. A
          // record that follows its signature names it (SHA-256 of its bytes), so the transparency log proves which
          // signature this entry is about (`signbridge audit prove --signature`); one written ahead cannot.
          details: {
            ...details,
            key_store: key.keyStore,
            signature_id: id,
            ...(signatureSha256 && { signature_sha256: signatureSha256.toString('hex') }),
          },
        },
        signedEvent && [signedEvent(id)],
      );
      return { id, written };
    };
    // Not ahead while the key store is known to be away: the record would only be withdrawn again.
    const ahead =
      this.store.signatures.writesOnThread &&
      signedEvent === undefined &&
      this.keyStores.outageOf(key.keyStore) === undefined
        ? record()
        : undefined;
    // The commit may fail while a signing thread still works; it is awaited below, but a rejection with no
    // handler meanwhile would end the process (Node's default for unhandled rejections).
    ahead?.written.catch(() => undefined);
    let signature: Buffer;
    try {
      signature = await this.keyStores.forKey(key.keyStore).sign(key.keyRef, key.keySpec, algorithm, digest);
    } catch (err) {
      const failed = (signatureId?: string): AuditEntryInput => ({
        at: this.now().toISOString(),
        tenantId: key.tenantId,
        actor: callerId,
        action,
        outcome: 'sign_failed',
        details: {
          ...(signatureId !== undefined && { signature_id: signatureId }),
          key_id: key.id,
          key_store: key.keyStore,
          algorithm,
          hash: digest.toString('base64'),
          error: err instanceof Error ? err.message : String(err),
        },
      });
      // After the record's own commit (failed or not), so the withdrawal follows it in the log. Every allowed
      // request the key store failed is recorded once, whichever way the store commits: a sign_failed entry, or,
      // refused during a key store outage that has not ended yet, a count in that outage's end entry.
      const recorded =
        ahead !== undefined &&
        (await ahead.written.then(
          () => true,
          () => false,
        ));
      const outage = outageOf(err);
      const audited = recorded
        ? this.store.signatures.withdraw(ahead.id, failed(ahead.id))
        : outage?.countRefusal()
          ? this.outageStarts.get(outage)
          : this.store.audit.append(failed());
      await audited?.catch(() => undefined); // the key store's error is the one to report
      this.observe('failed', algorithm, key.tenantId, (performance.now() - start) / 1000);
      throw err;
    }
    const signatureSha256 = createHash('sha256').update(signature).digest();
    const made = ahead ?? record(signatureSha256);
    let seq: number | undefined;
    try {
      seq = await made.written;
    } catch (err) {
      this.observe('failed', algorithm, key.tenantId, (performance.now() - start) / 1000);
      throw err;
    }
    // Written ahead, the record could not name the signature: its lookup row rides along with a later group
    // commit, not waited for (a crash before that loses only the row; docs/api.md, "Signbridge-Log-Index").
    if (ahead && seq !== undefined) {
      this.store.signatures
        .recordLookup({ auditSeq: seq, tenantId: key.tenantId, signatureId: ahead.id, signatureSha256 })
        .catch(() => undefined);
    }
    this.observe('signed', algorithm, key.tenantId, (performance.now() - start) / 1000);
    return {
      kind: 'signed',
      signature,
      keyId: key.id,
      algorithm,
      signatureId: made.id,
      ...(seq !== undefined && { logIndex: seq - 1 }),
    };
  }

  /** Imported material with an expiry stops working then, until the same material is imported again (AWS KMS). */
  private requireUsable(key: KeyRecord): void {
    if (key.materialExpiresAt === null || Date.parse(key.materialExpiresAt) > this.now().getTime()) return;
    throw new ApiError(
      'key_not_usable',
      `the key material of key ${key.id} expired at ${key.materialExpiresAt}; import the same material again ` +
        `(get_import_params with kms_key_id ${key.id}, then import_key)`,
    );
  }

  private requireSupported(spec: KeySpec): void {
    keyInfo(spec); // not a key spec at all: throws unsupported_key_spec
    this.keyStores.forNewKey(spec);
  }

  /** Undoes a key made for a tenant creation or rotation that did not happen; best effort. */
  private async destroy(key: KeyRecord): Promise<void> {
    await Promise.resolve()
      .then(() => this.keyStores.forKey(key.keyStore).destroyKey(key.keyRef))
      .catch(() => undefined);
  }

  private async requireTenant(tenantId: string): Promise<TenantRecord> {
    const tenant = await this.store.tenants.get(tenantId);
    if (!tenant) throw new ApiError('tenant_not_found', `tenant ${tenantId} does not exist`);
    return tenant;
  }

  private async currentKey(tenantId: string): Promise<KeyRecord> {
    const key = await this.store.tenants.currentKey(tenantId);
    if (!key) throw new ApiError('tenant_not_found', `tenant ${tenantId} does not exist`);
    return key;
  }

  private async newKey(tenantId: string, keySpec: KeySpec, version: number): Promise<KeyRecord> {
    const id = randomUUID();
    const keyStore = this.keyStores.forNewKey(keySpec);
    const made = await keyStore.createKey(keySpec, `${tenantId}/${id}`);
    return {
      id,
      tenantId,
      version,
      keySpec,
      keyRef: made.keyRef,
      publicKeyPem: made.publicKeyPem,
      createdAt: this.now().toISOString(),
      keyStore: keyStore.kind,
      origin: 'generated',
      materialExpiresAt: null,
    };
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

function denial(decision: PolicyDecision & { outcome: 'deny' }): ApiError {
  return new ApiError('policy_denied', `${decision.rule}: ${decision.reason}${digestNote(decision)}`, {
    ...(decision.vulnId !== undefined && { vuln_id: decision.vulnId }),
    ...(decision.fixVersion !== undefined && { fix_version: decision.fixVersion }),
  });
}

/** The decision names what it saw: the digest of its inputs, also kept in the audit log. */
function digestNote(decision: PolicyDecision): string {
  return decision.inputsDigest ? ` [inputs ${decision.inputsDigest}]` : '';
}

/**
 * A UUIDv7 (RFC 9562): 48 bits of Unix time in ms, then random bits. Signature records get these so that each one
 * lands at the end of the id index instead of on a random page of it (random ids dirtied one more page per
 * signature in every group commit). The random part comes from randomUUID(), which Node draws from a pooled
 * buffer; the uuid package's v7() asks the OS-backed generator for 16 bytes per id, ~9 us on the event loop.
 */
export function timeOrderedId(ms: number): string {
  const time = ms.toString(16).padStart(12, '0');
  // randomUUID(): xxxxxxxx-xxxx-4xxx-Vxxx-xxxxxxxxxxxx; keep what follows the version digit (V is the variant).
  return `${time.slice(0, 8)}-${time.slice(8, 12)}-7${randomUUID().slice(15)}`;
}
