// A tenant's trust in a CI issuer: which tokens of that issuer may become a short-lived signer key of the tenant
// (docs/ci.md, "Trust rules"). A rule is a set of claim conditions that must all hold; it is checked when it is
// saved, so a rule that would admit every repository of an issuer never exists.

import { claimMatches, claimText, patternProblem, readClaim } from '../../policy/claim-pattern.js';
import { type TrustRule, WORKLOAD_ROLES, type WorkloadRole } from '../../store/records/trust-rule.js';

export { type TrustRule, WORKLOAD_ROLES, type WorkloadRole };

/** The only role a workload may get: people approve, review and administer; a job signs. */

export const DEFAULT_KEY_MINUTES = 15;
export const MAX_KEY_MINUTES = 60;
/** Conditions per rule: more would be a configuration mistake, not a policy. */
export const MAX_CONDITIONS = 32;

/**
 * The longest life (exp - iat) of a token a rule admits unless it says otherwise: a day. CI tokens live minutes
 * (GitHub) to a job's timeout (GitLab); a token that lives for years is a leaked credential waiting to happen
 * (Vault's max_age / expiration_leeway bound the same).
 */
export const DEFAULT_MAX_TOKEN_LIFETIME_S = 24 * 3600;
export const MIN_MAX_TOKEN_LIFETIME_S = 60;
/** Ten years of 365 days: past that a bound is no bound. */
export const MAX_MAX_TOKEN_LIFETIME_S = 3650 * 24 * 3600;
/** Claims a rule's stable identity may name: a handful, or it is not one workload. */
export const MAX_IDENTITY_CLAIMS = 8;
/** Checked by the exchange itself, and (iat, exp, nbf, jti) new in every token: never a condition or identity. */
const EXCHANGE_CLAIMS = ['iss', 'aud', 'exp', 'nbf', 'iat', 'jti'];

/**
 * Claims that name the workload itself (repository, project or the issuer's subject). A rule must pin at least one:
 * otherwise every repository of `https://token.actions.githubusercontent.com` is trusted (AWS's "no :sub condition").
 */
export const SUBJECT_CLAIMS = [
  'sub',
  'repository',
  'repository_id',
  'project_path',
  'project_id',
  '/kubernetes.io/serviceaccount/uid',
] as const;

export type NewTrustRule = Omit<
  TrustRule,
  'id' | 'createdAt' | 'createdBy' | 'role' | 'keyMinutes' | 'audience' | 'maxTokenLifetimeS' | 'identityClaims'
> & {
  audience?: string | null;
  role?: string;
  keyMinutes?: number;
  maxTokenLifetimeS?: number;
  identityClaims?: string[] | null;
};

export class TrustRuleInvalid extends Error {}

const CLAIM_NAME = /^(?:[A-Za-z0-9_.:-]{1,128}|(?:\/[^/\s]{1,128}){1,8})$/;

const DURATION_UNITS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86_400 };

/** A token lifetime as typed (`90m`, `24h`, `30d`, `3600s` or plain seconds) in seconds; TrustRuleInvalid if not. */
export function parseTokenLifetime(text: string): number {
  const match = /^(\d{1,10})([smhd]?)$/.exec(text.trim());
  if (!match) {
    throw new TrustRuleInvalid(
      `max token lifetime must be a whole number with an optional unit s, m, h or d (such as 24h), got ${JSON.stringify(text)}`,
    );
  }
  return Number(match[1]) * (DURATION_UNITS[match[2] || 's'] as number);
}

/** A lifetime in seconds as a person reads it: the largest unit that divides it. */
export function lifetimeText(seconds: number): string {
  for (const [unit, size] of [
    ['d', 86_400],
    ['h', 3600],
    ['m', 60],
  ] as const) {
    if (seconds % size === 0) return `${seconds / size}${unit}`;
  }
  return `${seconds}s`;
}

/** The rule as it is saved, or TrustRuleInvalid saying what to change. */
export function validateTrustRule(rule: NewTrustRule): Omit<TrustRule, 'id' | 'createdAt' | 'createdBy'> {
  let issuer: URL;
  try {
    issuer = new URL(rule.issuer);
  } catch {
    throw new TrustRuleInvalid(`issuer ${JSON.stringify(rule.issuer)} is not a URL`);
  }
  if (issuer.protocol !== 'https:') throw new TrustRuleInvalid('issuer must be an https URL');
  if (issuer.search || issuer.hash || issuer.username || issuer.password) {
    throw new TrustRuleInvalid('issuer must have no query, fragment or credentials');
  }
  const role = rule.role ?? 'signer';
  if (!(WORKLOAD_ROLES as readonly string[]).includes(role)) {
    throw new TrustRuleInvalid(
      `role ${role} cannot come from a workload identity (only ${WORKLOAD_ROLES.join(', ')}; admin, approver and security_reviewer are for people)`,
    );
  }
  const keyMinutes = rule.keyMinutes ?? DEFAULT_KEY_MINUTES;
  if (!Number.isInteger(keyMinutes) || keyMinutes < 1 || keyMinutes > MAX_KEY_MINUTES) {
    throw new TrustRuleInvalid(`key minutes must be a whole number from 1 to ${MAX_KEY_MINUTES}`);
  }
  const maxTokenLifetimeS = rule.maxTokenLifetimeS ?? DEFAULT_MAX_TOKEN_LIFETIME_S;
  if (
    !Number.isInteger(maxTokenLifetimeS) ||
    maxTokenLifetimeS < MIN_MAX_TOKEN_LIFETIME_S ||
    maxTokenLifetimeS > MAX_MAX_TOKEN_LIFETIME_S
  ) {
    throw new TrustRuleInvalid(
      `max token lifetime must be from ${lifetimeText(MIN_MAX_TOKEN_LIFETIME_S)} to ${lifetimeText(MAX_MAX_TOKEN_LIFETIME_S)} (whole seconds)`,
    );
  }
  const identityClaims = rule.identityClaims ?? null;
  if (identityClaims !== null) {
    if (identityClaims.length === 0 || identityClaims.length > MAX_IDENTITY_CLAIMS) {
      throw new TrustRuleInvalid(`identity claims: 1 to ${MAX_IDENTITY_CLAIMS} claim names (or none for the default)`);
    }
    for (const name of identityClaims) {
      if (!CLAIM_NAME.test(name))
        throw new TrustRuleInvalid(`identity claim ${JSON.stringify(name)} is not a valid name`);
      if (EXCHANGE_CLAIMS.includes(name)) {
        throw new TrustRuleInvalid(
          `identity claim ${name} differs from token to token or is the issuer's own; it cannot name a workload`,
        );
      }
    }
    if (new Set(identityClaims).size !== identityClaims.length) {
      throw new TrustRuleInvalid('identity claims: a claim is named twice');
    }
  }
  const names = Object.keys(rule.conditions);
  if (names.length === 0) throw new TrustRuleInvalid('a rule needs at least one claim condition');
  if (names.length > MAX_CONDITIONS) throw new TrustRuleInvalid(`a rule has at most ${MAX_CONDITIONS} conditions`);
  for (const name of names) {
    if (!CLAIM_NAME.test(name)) throw new TrustRuleInvalid(`claim name ${JSON.stringify(name)} is not valid`);
    if (EXCHANGE_CLAIMS.includes(name)) {
      throw new TrustRuleInvalid(`claim ${name} is checked by the exchange itself; it cannot be a condition`);
    }
    const problem = patternProblem(rule.conditions[name] as string);
    if (problem) throw new TrustRuleInvalid(`the pattern for ${name} ${problem}`);
  }
  if (!names.some((n) => (SUBJECT_CLAIMS as readonly string[]).includes(n))) {
    throw new TrustRuleInvalid(
      `a rule must pin the workload: a condition on one of ${SUBJECT_CLAIMS.join(', ')} (without one, every repository of the issuer would be trusted)`,
    );
  }
  const audience = rule.audience ?? null;
  if (audience !== null && (audience.length === 0 || audience.length > 512)) {
    throw new TrustRuleInvalid('audience must be 1 to 512 characters');
  }
  return {
    tenantId: rule.tenantId,
    issuer: rule.issuer,
    audience,
    conditions: { ...rule.conditions },
    role: role as WorkloadRole,
    keyMinutes,
    maxTokenLifetimeS,
    identityClaims: identityClaims && [...identityClaims],
  };
}

/** Why the token lives longer than the rule admits (exp - iat), or undefined when it does not. */
export function lifetimeProblem(rule: TrustRule, claims: Record<string, unknown>): string | undefined {
  const { exp, iat } = claims;
  // The verifier requires both as numbers before any rule is tried (token-verifier.ts): without them, no lifetime.
  if (typeof exp !== 'number' || typeof iat !== 'number') return undefined;
  const lifetime = exp - iat;
  if (lifetime <= rule.maxTokenLifetimeS) return undefined;
  return `the token lives ${lifetime} s (exp - iat), longer than the rule's max token lifetime of ${rule.maxTokenLifetimeS} s (${lifetimeText(rule.maxTokenLifetimeS)})`;
}

/** The first identity claim of the rule the token lacks: the velocity count needs each. */
export function missingIdentityClaim(rule: TrustRule, claims: Record<string, unknown>): string | undefined {
  const missing = rule.identityClaims?.find((name) => !claimText(readClaim(claims, name)));
  return missing && `the token has no ${missing}, one of the rule's identity claims`;
}

/** The first condition of the rule the claims do not meet, said as a person reads it; undefined when all hold. */
export function unmetCondition(rule: TrustRule, claims: Record<string, unknown>): string | undefined {
  for (const [name, pattern] of Object.entries(rule.conditions)) {
    if (claimMatches(claims, name, pattern)) continue;
    const value = readClaim(claims, name);
    const shown = value === undefined ? 'is missing' : `is ${JSON.stringify(claimText(value) ?? value).slice(0, 200)}`;
    return `${name} ${shown}, the rule wants ${JSON.stringify(pattern)}`;
  }
  return undefined;
}

export type RuleMatch = { rule: TrustRule } | { refusals: string[] };

/**
 * The first rule (oldest first) whose conditions all hold, whose max token lifetime the token keeps to and whose
 * identity claims it carries, or for each rule why not. The caller has already
 * checked the issuer and the audience; `rules` are that issuer's rules for that audience.
 */
export function matchTrustRules(rules: readonly TrustRule[], claims: Record<string, unknown>): RuleMatch {
  const refusals: string[] = [];
  for (const rule of [...rules].sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id))) {
    const unmet = unmetCondition(rule, claims) ?? lifetimeProblem(rule, claims) ?? missingIdentityClaim(rule, claims);
    if (unmet === undefined) return { rule };
    refusals.push(`rule ${rule.id}: ${unmet}`);
  }
  return { refusals };
}
