// The policy wired to the store: the velocity limits counted in it, and the rules' decision with the tenant's
// active exceptions; and how a denial reads.

import type { SigningAlgorithm } from '../crypto/algorithms.js';
import { ApiError } from '../errors.js';
import type { ActiveException, PolicyDecision, PolicyEngine } from '../policy/policy.js';
import type { KeyRecord, Store } from '../store/store.js';
import type { PolicyContext } from './policy-context.js';
import type { Audit } from './service-audit.js';
import type { SignRequest } from './sign-outcome.js';
import { countVelocity } from './velocity.js';

export interface PolicyCheckDeps {
  store: Store;
  policy: PolicyEngine;
  now: () => Date;
  audit: Audit;
}

export class PolicyCheck {
  private readonly store: Store;
  private readonly policy: PolicyEngine;
  private readonly now: () => Date;
  private readonly audit: Audit;

  constructor(deps: PolicyCheckDeps) {
    this.store = deps.store;
    this.policy = deps.policy;
    this.now = deps.now;
    this.audit = deps.audit;
  }

  /** The rules' decision on a request, with the tenant's exceptions that are in force. */
  async evaluate(
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

  /**
   * The policy's velocity limits, counted before the policy decides (every request that reaches the policy counts):
   * over one, the request is 429 rate_limited with the rest of that window as Retry-After, and an audit entry
   * (outcome rate_limited) says which limit.
   */
  async enforceVelocity(
    key: KeyRecord,
    algorithm: SigningAlgorithm,
    req: SignRequest,
    workload: Record<string, unknown>,
    /** A batch counts each of its signatures; over a limit, the whole batch is refused. */
    signatures = 1,
  ): Promise<void> {
    const limits = this.policy.velocityLimits?.(req.tenantId);
    const exceeded = await countVelocity(this.store, limits, req, this.now().getTime(), signatures);
    if (!exceeded) return;
    const reason =
      `velocity.${exceeded.limit}: at most ${exceeded.max} signing requests per ${exceeded.windowSeconds} s for ` +
      `${exceeded.subject}; retry after ${exceeded.retryAfterSeconds} s`;
    await this.audit(req.tenantId, req.callerId, req.action ?? 'sign', 'rate_limited', {
      key_id: key.id,
      algorithm,
      hash: req.digest.toString('base64'),
      ...(signatures > 1 && { signatures }),
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
}

export function denial(decision: PolicyDecision & { outcome: 'deny' }): ApiError {
  return new ApiError('policy_denied', `${decision.rule}: ${decision.reason}${digestNote(decision)}`, {
    ...(decision.vulnId !== undefined && { vuln_id: decision.vulnId }),
    ...(decision.fixVersion !== undefined && { fix_version: decision.fixVersion }),
  });
}

/** The decision names what it saw: the digest of its inputs, also kept in the audit log. */
export function digestNote(decision: PolicyDecision): string {
  return decision.inputsDigest ? ` [inputs ${decision.inputsDigest}]` : '';
}
