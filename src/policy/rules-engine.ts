// The rule engine: policy as data (policy-file.ts) evaluated by named rules in a fixed, documented order.
// The first deny wins over any pending outcome, which wins over allow. Pure: no I/O beyond what it is given.
import { createHash } from 'node:crypto';
import { ApiError } from '../errors.js';
import { matchesPattern } from './claim-pattern.js';
import type { PolicyDecision, PolicyEngine, PolicyInput } from './policy.js';
import {
  type PolicyDocument,
  type PolicyRules,
  rulesForTenant,
  SEVERITIES,
  type Severity,
  type VelocityLimits,
} from './policy-file.js';
import { FACT_FIELDS, type WorkloadFacts } from './workload-facts.js';

export type MatchSeverity = Severity | 'UNKNOWN';

export interface VulnerabilityMatch {
  vulnId: string;
  severity: MatchSeverity;
  fixVersion?: string;
  /** e.g. "lodash@4.17.20" */
  component: string;
}

/** Parses an SBOM and finds the vulnerabilities of its components. Throws SbomRejected for a bad document. */
export interface SbomScanner {
  scan(sbom: string): VulnerabilityMatch[];
  /** Brings the scanner's database up to date; awaited before each scan when present. */
  refresh?(): Promise<void>;
}

export class SbomRejected extends Error {}

type Outcome = PolicyDecision['outcome'];

export interface RuleResult {
  rule: string;
  outcome: Exclude<Outcome, 'allow'>;
  reason: string;
  vulnId?: string;
  fixVersion?: string;
}

export interface RuleContext {
  input: PolicyInput;
  rules: PolicyRules;
  matches: VulnerabilityMatch[];
}

export interface Rule {
  id: string;
  description: string;
  check(ctx: RuleContext): RuleResult | undefined;
}

function listRule(
  id: string,
  description: string,
  section: 'projects' | 'artifactTypes' | 'environments' | 'keySpecs' | 'algorithms',
  field: 'project' | 'artifactType' | 'environment' | 'keySpec' | 'algorithm',
  label: string,
): Rule {
  return {
    id,
    description,
    check({ input, rules }) {
      const lists = rules[section];
      const value = input[field];
      if (!lists) return undefined;
      if (value !== undefined && lists.deny?.includes(value)) {
        return { rule: id, outcome: 'deny', reason: `${label} "${value}" is on the deny list` };
      }
      if (lists.allow && lists.allow.length > 0 && (value === undefined || !lists.allow.includes(value))) {
        const shown = value === undefined ? `no ${label}` : `${label} "${value}"`;
        return { rule: id, outcome: 'deny', reason: `${shown} is not on the allow list (${lists.allow.join(', ')})` };
      }
      return undefined;
    },
  };
}

/** A verified CI fact of the request by its snake_case name, as text (ref_protected: "true" / "false"). */
function factText(input: PolicyInput, snakeName: string): string | undefined {
  const entry = Object.entries(FACT_FIELDS).find(([, snake]) => snake === snakeName);
  if (!entry) return undefined;
  const value = input[entry[0] as keyof WorkloadFacts];
  return value === undefined ? undefined : String(value);
}

const severityRank = (s: MatchSeverity) => (s === 'UNKNOWN' ? -1 : SEVERITIES.indexOf(s));

/** The rules, in evaluation order. docs/policy.md is written from this table. */
export const RULES: Rule[] = [
  {
    id: 'identity-inactive',
    description: 'An identity whose identity_status is inactive may not sign.',
    check({ input, rules }) {
      if ((rules.denyInactiveIdentities ?? true) && input.identityStatus === 'inactive') {
        return {
          rule: 'identity-inactive',
          outcome: 'deny',
          reason: `identity ${input.identityId ?? '(unnamed)'} is inactive`,
        };
      }
      return undefined;
    },
  },
  {
    id: 'workload-required',
    description: 'With workload.required (or workload.require), only a key minted by the CI token exchange may sign.',
    check({ input, rules }) {
      const wanted = rules.workload?.required === true || Object.keys(rules.workload?.require ?? {}).length > 0;
      if (!wanted || input.workloadIssuer !== undefined) return undefined;
      return {
        rule: 'workload-required',
        outcome: 'deny',
        reason:
          'this tenant signs only for CI workload identities: use a key from the token exchange (POST /oauth/token)',
      };
    },
  },
  {
    id: 'workload-facts',
    description:
      "Each fact in workload.require must match its pattern (claim-pattern syntax) in the workload key's verified facts.",
    check({ input, rules }) {
      if (input.workloadIssuer === undefined) return undefined; // workload-required refuses such a request
      for (const [fact, pattern] of Object.entries(rules.workload?.require ?? {})) {
        const value = factText(input, fact);
        if (value !== undefined && matchesPattern(pattern, value)) continue;
        const shown = value === undefined ? `the token carries no ${fact}` : `${fact} is "${value}"`;
        return {
          rule: 'workload-facts',
          outcome: 'deny',
          reason: `${shown}; workload.require wants ${fact} to match "${pattern}"`,
        };
      }
      return undefined;
    },
  },
  listRule(
    'project-lists',
    'The project must be allowed and not denied for the tenant.',
    'projects',
    'project',
    'project',
  ),
  listRule(
    'artifact-type-lists',
    'The artifact type must be allowed and not denied for the tenant.',
    'artifactTypes',
    'artifactType',
    'artifact type',
  ),
  listRule(
    'environment-lists',
    'The environment must be allowed and not denied for the tenant.',
    'environments',
    'environment',
    'environment',
  ),
  listRule(
    'key-spec-lists',
    "The tenant's key spec must be allowed and not denied (keySpecs).",
    'keySpecs',
    'keySpec',
    'key spec',
  ),
  listRule(
    'algorithm-lists',
    'The signing algorithm must be allowed and not denied (algorithms).',
    'algorithms',
    'algorithm',
    'algorithm',
  ),
  {
    id: 'sbom-required',
    description: 'When the policy requires it, a signing request must carry an SBOM.',
    check({ input, rules }) {
      if (rules.sbom?.required && !input.sbom) {
        return {
          rule: 'sbom-required',
          outcome: 'deny',
          reason: 'an SBOM is required for this tenant and none was sent',
        };
      }
      return undefined;
    },
  },
  {
    id: 'sbom-vulnerable',
    description:
      'No SBOM component may have a known vulnerability at or above the configured severity, unless an active exception covers it.',
    check({ input, rules, matches }) {
      const threshold = severityRank(rules.sbom?.denySeverity ?? 'LOW');
      const denyUnknown = rules.sbom?.denyUnknownSeverity ?? true;
      for (const m of matches) {
        const denies = m.severity === 'UNKNOWN' ? denyUnknown : severityRank(m.severity) >= threshold;
        if (!denies) continue;
        if (exceptionFor(input, m.vulnId)) continue;
        const fix = m.fixVersion ? `; fixed in ${m.fixVersion}` : '; no fixed version known';
        return {
          rule: 'sbom-vulnerable',
          outcome: 'deny',
          reason: `${m.component} is affected by ${m.vulnId} (${m.severity})${fix}`,
          vulnId: m.vulnId,
          ...(m.fixVersion !== undefined && { fixVersion: m.fixVersion }),
        };
      }
      return undefined;
    },
  },
  {
    id: 'tee-security-review',
    description: 'require_tee sends the request to security review unless its environment is attested.',
    check({ input, rules }) {
      if (!input.requireTee) return undefined;
      const attested = rules.environments?.attested ?? [];
      if (input.environment !== undefined && attested.includes(input.environment)) return undefined;
      return {
        rule: 'tee-security-review',
        outcome: 'pending_security_review',
        reason: `a TEE is required and environment ${input.environment ?? '(none)'} is not attested`,
      };
    },
  },
  {
    id: 'environment-approval',
    description: 'Signatures for environments that require approval wait for an approver.',
    check({ input, rules }) {
      const needs = rules.environments?.requireApproval ?? [];
      if (input.environment !== undefined && needs.includes(input.environment)) {
        return {
          rule: 'environment-approval',
          outcome: 'pending_approval',
          reason: `environment ${input.environment} requires approval`,
        };
      }
      return undefined;
    },
  },
];

function exceptionFor(input: PolicyInput, vulnId: string) {
  return input.exceptions?.find(
    (e) =>
      e.vulnId === vulnId &&
      (e.project === undefined || e.project === input.project) &&
      (e.artifactType === undefined || e.artifactType === input.artifactType),
  );
}

/**
 * The digests of the inputs seen lately, by their canonical text: a caller's requests repeat the same inputs
 * (tenant, key, algorithm, caller, context; the digest signed is not one of them), and the SHA-256 was most of what
 * the rules cost per `sign`. Only short texts (an SBOM's are not kept); the map is emptied when full. The text is
 * the key, so a changed input can never find another input's digest.
 */
const recentDigests = new Map<string, string>();
export const REMEMBERED_DIGESTS = 1024;
const REMEMBERED_TEXT_LENGTH = 1024;

/**
 * The inputs' canonical text: `JSON.stringify(rest, sortedKeys)`, which the digests have always hashed. Built by
 * hand when every value is a string, number or boolean (every request but a CI workload's facts): the replacer
 * array sends JSON.stringify down its slow path, as long as the SHA-256 itself. Same text (the test compares).
 */
export function canonicalInputsText(input: PolicyInput): string {
  const { exceptions: _e, ...rest } = input;
  const keys = Object.keys(rest).sort();
  const values = rest as Record<string, unknown>;
  let text = '{';
  for (const key of keys) {
    const value = values[key];
    if (value === undefined) continue;
    const kind = typeof value;
    if (kind !== 'string' && kind !== 'number' && kind !== 'boolean') return JSON.stringify(rest, keys);
    text += `${text === '{' ? '' : ','}${JSON.stringify(key)}:${JSON.stringify(value)}`;
  }
  return `${text}}`;
}

/** SHA-256 over the inputs in a canonical form (sorted keys), so a decision can be tied to what it saw. */
export function inputsDigest(input: PolicyInput): string {
  const canonical = canonicalInputsText(input);
  const known = recentDigests.get(canonical);
  if (known !== undefined) return known;
  const digest = `sha256:${createHash('sha256').update(canonical).digest('hex')}`;
  if (canonical.length <= REMEMBERED_TEXT_LENGTH) {
    if (recentDigests.size >= REMEMBERED_DIGESTS) recentDigests.clear();
    recentDigests.set(canonical, digest);
  }
  return digest;
}

/** How many input digests are remembered (tests: the memory stays bounded). */
export function rememberedInputDigests(): number {
  return recentDigests.size;
}

export class RulesPolicyEngine implements PolicyEngine {
  constructor(
    private readonly doc: PolicyDocument,
    private readonly scanner?: SbomScanner,
  ) {}

  velocityLimits(tenantId: string): VelocityLimits | undefined {
    return rulesForTenant(this.doc, tenantId).velocity;
  }

  async evaluate(input: PolicyInput): Promise<PolicyDecision> {
    const rules = rulesForTenant(this.doc, input.tenantId);
    let matches: VulnerabilityMatch[] = [];
    if (input.sbom !== undefined) {
      if (!this.scanner)
        throw new ApiError('invalid_request', 'this service has no vulnerability database configured for SBOMs');
      await this.scanner.refresh?.();
      try {
        matches = this.scanner.scan(input.sbom);
      } catch (err) {
        if (err instanceof SbomRejected) throw new ApiError('invalid_sbom', `body.sbom: ${err.message}`);
        throw err;
      }
    }
    const ctx: RuleContext = { input, rules, matches };
    const results = RULES.map((r) => r.check(ctx)).filter((r): r is RuleResult => r !== undefined);
    const digest = inputsDigest(input);
    const applied = matches
      .map((m) => ({ m, e: exceptionFor(input, m.vulnId) }))
      .filter((x) => x.e !== undefined)
      .map((x) => `${x.m.vulnId} (exception ${x.e?.id})`);
    const note = applied.length > 0 ? `; exceptions applied: ${[...new Set(applied)].join(', ')}` : '';
    const chosen = results.find((r) => r.outcome === 'deny') ?? results.find((r) => r.outcome !== 'deny');
    if (!chosen) {
      return { outcome: 'allow', rule: 'default-allow', reason: `no rule objected${note}`, inputsDigest: digest };
    }
    const stages = chosen.outcome === 'deny' ? undefined : [...new Set(results.map((r) => r.outcome))];
    return {
      outcome: chosen.outcome,
      rule: chosen.rule,
      ...(stages !== undefined && { stages }),
      reason: `${chosen.reason}${note}`,
      inputsDigest: digest,
      ...(chosen.vulnId !== undefined && { vulnId: chosen.vulnId }),
      ...(chosen.fixVersion !== undefined && { fixVersion: chosen.fixVersion }),
    } as PolicyDecision;
  }
}
