// The policy document: global rules with per-tenant overrides, validated before the service starts.
// Format and rule order: docs/policy.md.
import { readFileSync } from 'node:fs';
import { type Static, Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import YAML from 'yaml';
import { KEY_SPECS, SIGNING_ALGORITHMS } from '../crypto/algorithms.js';
import { patternProblem } from './claim-pattern.js';
import { FACT_FIELDS } from './workload-facts.js';

export const SEVERITIES = ['LOW', 'MEDIUM', 'HIGH', 'CRITICAL'] as const;
export type Severity = (typeof SEVERITIES)[number];

const Names = Type.Array(Type.String({ minLength: 1, maxLength: 256 }), { maxItems: 1000 });
const AllowDeny = Type.Object(
  { allow: Type.Optional(Names), deny: Type.Optional(Names) },
  { additionalProperties: false },
);

/** The snake_case names of the verified CI facts a `workload.require` may name. */
export const REQUIRABLE_FACTS: readonly string[] = Object.values(FACT_FIELDS);

/** The longest velocity window: the store's counters keep no window longer (COUNT_WINDOW_MAX_MS). */
export const MAX_VELOCITY_WINDOW_SECONDS = 7 * 24 * 3600;

const VelocityLimit = Type.Object(
  {
    /** Signing requests allowed per window; the next one is 429 rate_limited. */
    max: Type.Integer({ minimum: 1, maximum: 1_000_000_000 }),
    /** The window, counted from the first request in it. */
    windowSeconds: Type.Integer({ minimum: 1, maximum: MAX_VELOCITY_WINDOW_SECONDS }),
  },
  { additionalProperties: false },
);
export type VelocityLimit = Static<typeof VelocityLimit>;

export const PolicyRulesSchema = Type.Object(
  {
    /** Deny requests whose identity_status is inactive (default true). */
    denyInactiveIdentities: Type.Optional(Type.Boolean()),
    projects: Type.Optional(AllowDeny),
    artifactTypes: Type.Optional(AllowDeny),
    /** The key specs a tenant's key may have to sign (KMS names: ECC_NIST_EDWARDS25519, ECC_SECG_P256K1, ...). */
    keySpecs: Type.Optional(AllowDeny),
    /** The signing algorithms a request may use (KMS names: ED25519_SHA_512, ED25519_PH_SHA_512, ...). */
    algorithms: Type.Optional(AllowDeny),
    environments: Type.Optional(
      Type.Object(
        {
          allow: Type.Optional(Names),
          deny: Type.Optional(Names),
          /** Environments whose signatures wait for an approver (202 pending_approval). */
          requireApproval: Type.Optional(Names),
          /** Environments that run in an attested TEE: require_tee passes there without a security review. */
          attested: Type.Optional(Names),
        },
        { additionalProperties: false },
      ),
    ),
    sbom: Type.Optional(
      Type.Object(
        {
          /** Deny signing requests that carry no SBOM. */
          required: Type.Optional(Type.Boolean()),
          /** The lowest severity that denies; vulnerabilities below it pass (default LOW: every one denies). */
          denySeverity: Type.Optional(Type.Union(SEVERITIES.map((s) => Type.Literal(s)))),
          /** Whether vulnerabilities of unknown severity deny (default true). */
          denyUnknownSeverity: Type.Optional(Type.Boolean()),
        },
        { additionalProperties: false },
      ),
    ),
    /** CI workload identities (docs/policy.md, "CI workload facts"). */
    workload: Type.Optional(
      Type.Object(
        {
          /** Only keys minted by the token exchange may sign (default false). */
          required: Type.Optional(Type.Boolean()),
          /** Verified facts that must hold: snake_case fact name -> claim pattern. Implies `required`. */
          require: Type.Optional(
            Type.Record(Type.String(), Type.String(), { additionalProperties: false, maxProperties: 64 }),
          ),
        },
        { additionalProperties: false },
      ),
    ),
    /** Most signing requests per window, per identity, per CI run and per tenant (429 rate_limited beyond). */
    velocity: Type.Optional(
      Type.Object(
        {
          perIdentity: Type.Optional(VelocityLimit),
          perRun: Type.Optional(VelocityLimit),
          perTenant: Type.Optional(VelocityLimit),
        },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false },
);
export type PolicyRules = Static<typeof PolicyRulesSchema>;
export type VelocityLimits = NonNullable<PolicyRules['velocity']>;

export const PolicyDocumentSchema = Type.Object(
  {
    version: Type.Literal(1),
    rules: Type.Optional(PolicyRulesSchema),
    /** Per-tenant overrides: each section given here replaces the global section of the same name. */
    tenants: Type.Optional(
      Type.Record(Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$' }), PolicyRulesSchema, {
        additionalProperties: false,
      }),
    ),
    approvals: Type.Optional(
      Type.Object(
        {
          lifetimeHours: Type.Optional(Type.Number({ exclusiveMinimum: 0, maximum: 24 * 30 })),
          /** How long a client's retry of a rejected or approved request gets that outcome again (default 10). */
          retryWindowMinutes: Type.Optional(Type.Number({ minimum: 0, maximum: 24 * 60 })),
        },
        { additionalProperties: false },
      ),
    ),
    exceptions: Type.Optional(
      Type.Object(
        { maxLifetimeDays: Type.Optional(Type.Number({ exclusiveMinimum: 0, maximum: 365 })) },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false },
);
export type PolicyDocument = Static<typeof PolicyDocumentSchema>;

export class PolicyFileError extends Error {}

/** An empty document: every rule off, so every signature is allowed. */
export const EMPTY_POLICY: PolicyDocument = { version: 1 };

export function parsePolicyDocument(text: string, source: string): PolicyDocument {
  let parsed: unknown;
  try {
    parsed = YAML.parse(text);
  } catch (err) {
    throw new PolicyFileError(`${source}: not valid YAML/JSON: ${(err as Error).message}`);
  }
  const first = [...Value.Errors(PolicyDocumentSchema, parsed)][0];
  if (first) throw new PolicyFileError(`${source}: ${first.path || '/'}: ${first.message}`);
  const doc = parsed as PolicyDocument;
  for (const [scope, rules] of [
    ['rules', doc.rules],
    ...Object.entries(doc.tenants ?? {}).map(([t, r]) => [`tenants/${t}`, r]),
  ] as const) {
    checkRuleConsistency(rules as PolicyRules | undefined, `${source}: /${scope}`);
  }
  return doc;
}

export function loadPolicyFile(path: string): PolicyDocument {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new PolicyFileError(`${path}: cannot read: ${(err as Error).message}`);
  }
  return parsePolicyDocument(text, path);
}

/** Catches contradictions the schema cannot: a name both allowed and denied. */
function checkRuleConsistency(rules: PolicyRules | undefined, where: string): void {
  if (!rules) return;
  for (const section of ['projects', 'artifactTypes', 'environments', 'keySpecs', 'algorithms'] as const) {
    const lists = rules[section];
    const both = (lists?.allow ?? []).filter((n) => (lists?.deny ?? []).includes(n));
    if (both.length > 0) throw new PolicyFileError(`${where}/${section}: ${both.join(', ')} both allowed and denied`);
  }
  // A misspelt key spec or algorithm would never match, silently: refused, naming the ones that exist.
  for (const [section, known] of [
    ['keySpecs', KEY_SPECS],
    ['algorithms', SIGNING_ALGORITHMS],
  ] as const) {
    for (const list of ['allow', 'deny'] as const) {
      const unknown = (rules[section]?.[list] ?? []).filter((n) => !(known as readonly string[]).includes(n));
      if (unknown.length > 0) {
        throw new PolicyFileError(
          `${where}/${section}/${list}: ${unknown.join(', ')} unknown (one of ${known.join(', ')})`,
        );
      }
    }
  }
  for (const [fact, pattern] of Object.entries(rules.workload?.require ?? {})) {
    if (!REQUIRABLE_FACTS.includes(fact)) {
      throw new PolicyFileError(
        `${where}/workload/require/${fact}: not a CI fact (one of ${REQUIRABLE_FACTS.join(', ')})`,
      );
    }
    const problem = patternProblem(pattern);
    if (problem) throw new PolicyFileError(`${where}/workload/require/${fact}: the pattern ${problem}`);
  }
}

/** The rules in force for a tenant: the global rules with the tenant's sections replacing theirs. */
export function rulesForTenant(doc: PolicyDocument, tenantId: string): PolicyRules {
  return { ...(doc.rules ?? {}), ...(doc.tenants?.[tenantId] ?? {}) };
}
