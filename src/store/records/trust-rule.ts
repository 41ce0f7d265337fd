// A tenant's trust rule for CI tokens, as the store keeps it. What it means and how it is checked:
// src/auth/workload/trust-rule.ts.
import type { Role } from './roles.js';

export const WORKLOAD_ROLES = ['signer'] as const satisfies readonly Role[];
export type WorkloadRole = (typeof WORKLOAD_ROLES)[number];

export interface TrustRule {
  /** `tr_` + 16 hex. */
  id: string;
  tenantId: string;
  /** Exactly the `iss` of the tokens (no trailing-slash folding: issuers differ on it and so do their tokens). */
  issuer: string;
  /** The `aud` the token must carry; null: the service's public URL. */
  audience: string | null;
  /** Claim name (or JSON pointer) → exact value or pattern (claim-pattern.ts). */
  conditions: Record<string, string>;
  role: WorkloadRole;
  /** Lifetime of the key an exchange mints (1-60, default 15). */
  keyMinutes: number;
  /** The longest exp - iat of a token the rule admits, in seconds (default a day). */
  maxTokenLifetimeS: number;
  /**
   * The claims whose values make the workload's stable identity, which velocity.perIdentity counts
   * (workload-identity.ts, stableIdentityOf); null: the issuer kind's default (repository and workflow, not ref).
   */
  identityClaims: string[] | null;
  createdAt: string;
  createdBy: string;
}

/** What a rule admits and grants. */
export type TrustRuleTerms = Pick<
  TrustRule,
  'audience' | 'conditions' | 'role' | 'keyMinutes' | 'maxTokenLifetimeS' | 'identityClaims'
>;

/**
 * A rule's terms in the snake_case of the service's JSON, one spelling for everywhere a rule is shown: its audit
 * entries, its trust.changed events and `admin trust list --json`.
 */
export function trustRuleTermsJson(rule: TrustRuleTerms) {
  return {
    audience: rule.audience,
    conditions: rule.conditions,
    role: rule.role,
    key_minutes: rule.keyMinutes,
    max_token_lifetime_s: rule.maxTokenLifetimeS,
    identity_claims: rule.identityClaims,
  };
}
