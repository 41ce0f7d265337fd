// The policy seam every signature passes through. Policy code is pure: no fastify, no store writes.
// The rule engine (rules-engine.ts) implements PolicyEngine; without a policy file the built-in default
// (signing/policy-settings.ts) decides. allowAll is for unit tests of the signing path only.

import type { KeySpec, SigningAlgorithm } from '../crypto/algorithms.js';
import type { VelocityLimits } from './policy-file.js';
import type { WorkloadFacts } from './workload-facts.js';

/** Everything a policy may look at: the contract's policy inputs plus who asks, for which tenant and key. */
/** The CI facts beyond project and environment (workload-facts.ts names each). */
type CiFacts = Omit<WorkloadFacts, 'project' | 'environment'>;

export interface PolicyInput extends CiFacts {
  tenantId: string;
  keyId: string;
  keySpec: KeySpec;
  algorithm: SigningAlgorithm;
  /** API key id of the caller. */
  callerId: string;
  artifactType?: string;
  artifactVersion?: string;
  environment?: string;
  identityId?: string;
  identityStatus?: 'active' | 'inactive';
  project?: string;
  requireTee?: boolean;
  sbom?: string;
  /**
   * Facts of a CI workload identity (docs/ci.md). Present only on a key minted by the token exchange, and then
   * verified by the service: `workloadIssuer` says so, and `project` and `environment` above are the token's too.
   * No request body sets them.
   */
  workloadIssuer?: string;
  workloadSubject?: string;
  /** The tenant's active policy exceptions (fetched by the caller, so policy code stays free of I/O). */
  exceptions?: ActiveException[];
}

export interface ActiveException {
  id: string;
  vulnId: string;
  project?: string;
  artifactType?: string;
}

interface DecisionBase {
  rule: string;
  reason: string;
  /** Digest of the inputs the decision saw (rules-engine.ts: inputsDigest). */
  inputsDigest?: string;
}

export type PolicyDecision =
  | (DecisionBase & { outcome: 'allow' })
  | (DecisionBase & {
      outcome: 'pending_approval' | 'pending_security_review';
      /** Every stage the request must pass, in order; the first is `outcome`. Absent means just `outcome`. */
      stages?: Array<'pending_approval' | 'pending_security_review'>;
    })
  | (DecisionBase & { outcome: 'deny'; vulnId?: string; fixVersion?: string });

export interface PolicyEngine {
  evaluate(input: PolicyInput): Promise<PolicyDecision>;
  /**
   * The tenant's velocity limits (the policy file's `velocity`), which the signing path counts in the store
   * (src/signing/velocity.ts) before it asks evaluate(): counting is I/O, so it stays out of the policy code.
   */
  velocityLimits?(tenantId: string): VelocityLimits | undefined;
}

export const allowAll: PolicyEngine = {
  async evaluate() {
    return { outcome: 'allow', rule: 'default', reason: 'no policy rules are configured' };
  },
};
