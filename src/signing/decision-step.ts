// The one decision step of a signing request, for one digest (signer.ts) or many (batch-signer.ts): the velocity
// limits counted, the policy's rules evaluated, and a denial recorded (its event and `denied` audit entry) and
// thrown. What an allowed or held request becomes is the caller's: one signature or each digest's, one held
// request for the digest or for the batch. A request that cannot be held (pure Ed25519: its message is not kept to
// be signed on approval) is refused where the policy would hold it, and that refusal is recorded as a denial too.
import { performance } from 'node:perf_hooks';
import type { SigningAlgorithm } from '../crypto/algorithms.js';
import type { ApiError } from '../errors.js';
import type { EventBuilder, PolicyDecided } from '../events/event-builder.js';
import type { PolicyDecision } from '../policy/policy.js';
import type { KeyRecord, Store } from '../store/store.js';
import { denial, type PolicyCheck } from './policy-check.js';
import type { Audit } from './service-audit.js';
import type { SignOutcomeObserver, SignRequest } from './sign-outcome.js';
import { workloadAuditDetails } from './workload-context.js';

export interface DecisionDeps {
  store: Store;
  events: EventBuilder;
  observe: SignOutcomeObserver;
  audit: Audit;
  policy: PolicyCheck;
}

/** What the step decides about: `req` with its first (or only) digest, and how many signatures it asks for. */
export interface DecisionAsk {
  key: KeyRecord;
  algorithm: SigningAlgorithm;
  req: SignRequest;
  /** The digest named in the audit entries (`hash`), for one digest; a batch names each digest's in its own. */
  hash?: string;
  /** A batch: its details (id, size, digests_sha256) in the velocity and denial entries, and its signature count. */
  batch?: { details: Record<string, unknown>; size: number };
  /**
   * Set for a request that cannot wait for a person's decision: a hold becomes this refusal (given the holding
   * rule), recorded like a denial (`denied` entry, signature.denied event) with the refusal's words as its reason.
   */
  refuseHold?: (rule: string) => ApiError;
}

export interface Decided {
  /** Allow, or a hold (a denial was thrown). */
  decision: Exclude<PolicyDecision, { outcome: 'deny' }>;
  /** The audit details every entry of the request shares (key, algorithm, rule, reason, person, workload, via). */
  about: Record<string, unknown>;
  /** The policy.decided facts of the events, for a digest. */
  decided: (digest: Buffer) => PolicyDecided;
  /** Whether a subscription of the tenant wants signature.signed (asked in the turn the key was read in). */
  wantsSignedEvent: Promise<boolean>;
  /** When the decision started: the outcome's seconds for /metrics count from here. */
  start: number;
}

/** Velocity, then the rules; a denial is recorded and thrown; otherwise the decision (allow, or a hold). */
export async function decide(deps: DecisionDeps, ask: DecisionAsk): Promise<Decided> {
  const { key, algorithm, req, batch } = ask;
  const start = performance.now();
  // Asked now, in the turn the key was read in: the cache's epoch check (one round trip on PostgreSQL) is then
  // the one that turn made already. Awaited only if the policy allows; a failure then fails the request.
  const wantsSignedEvent = deps.store.wantsEvent(req.tenantId, 'signature.signed');
  wantsSignedEvent.catch(() => undefined);
  const workload = req.workload ? { workload: workloadAuditDetails(req.workload) } : {};
  const batchDetails = batch ? { batch: batch.details } : {};
  await deps.policy.enforceVelocity(key, algorithm, req, { ...workload, ...batchDetails }, batch?.size ?? 1);
  const decision = await deps.policy.evaluate(key, algorithm, req.callerId, req.tenantId, req.context);
  const about = {
    key_id: key.id,
    algorithm,
    ...(ask.hash !== undefined && { hash: ask.hash }),
    rule: decision.rule,
    reason: decision.reason,
    inputs_digest: decision.inputsDigest,
    ...(req.personId && { person: req.personId }),
    ...workload,
    ...(req.via && { via: req.via }),
    ...(req.pssSaltLength !== undefined && { pss_salt_length: req.pssSaltLength }),
  };
  const decided = (digest: Buffer): PolicyDecided => ({
    tenantId: req.tenantId,
    keyId: key.id,
    algorithm,
    digest: digest.toString('base64'),
    rule: decision.rule,
    reason: decision.reason,
    inputs: req.context as Record<string, unknown>,
    requester: req.callerId,
  });
  // Recorded and thrown: the policy's denial, or a hold of a request that cannot be held.
  const refuse = async (refusal: ApiError, deny?: { vulnId?: string; fixVersion?: string }): Promise<never> => {
    const reason = deny ? decision.reason : refusal.message;
    const denied = await deps.events.denied({
      ...decided(req.digest),
      reason,
      ...(deny?.vulnId !== undefined && { vulnId: deny.vulnId }),
      ...(deny?.fixVersion !== undefined && { fixVersion: deny.fixVersion }),
    });
    await deps.audit(
      req.tenantId,
      req.callerId,
      req.action ?? 'sign',
      'denied',
      { ...about, reason, ...batchDetails, vuln_id: deny?.vulnId, fix_version: deny?.fixVersion },
      [denied],
    );
    deps.observe('denied', algorithm, req.tenantId, (performance.now() - start) / 1000);
    throw refusal;
  };
  if (decision.outcome === 'deny') return refuse(denial(decision), decision);
  if (decision.outcome !== 'allow' && ask.refuseHold) return refuse(ask.refuseHold(decision.rule));
  return { decision, about, decided, wantsSignedEvent, start };
}
