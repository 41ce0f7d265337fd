// What the service verified about a CI job, carried by the short-lived key its token was exchanged for, and turned
// into policy inputs on every signature (docs/ci.md, "Facts the policy decides on"). Each CI system names the same
// facts differently; this file is the one place that knows how.
import { createHash } from 'node:crypto';
import { claimText, readClaim } from '../../policy/claim-pattern.js';
import { FACT_FIELDS, WORKLOAD_FACT_NAMES } from '../../policy/workload-facts.js';
import type { IssuerKind, WorkloadFacts, WorkloadIdentity } from '../../store/records/workload-identity.js';

export type { IssuerKind, WorkloadFacts, WorkloadIdentity };

/** GitHub's tokens carry run_id and repository; GitLab's pipeline_id and project_path; Kubernetes' its own claim. */
export function issuerKind(claims: Record<string, unknown>): IssuerKind {
  if (claims.repository !== undefined && claims.run_id !== undefined) return 'github';
  if (claims.project_path !== undefined && claims.pipeline_id !== undefined) return 'gitlab';
  if (typeof claims['kubernetes.io'] === 'object' && claims['kubernetes.io'] !== null) return 'kubernetes';
  return 'oidc';
}

const MAX_FACT_LENGTH = 1024;

function text(claims: Record<string, unknown>, name: string): string | undefined {
  const value = claimText(claims[name]);
  return value === undefined || value.length === 0 ? undefined : value.slice(0, MAX_FACT_LENGTH);
}

function flag(claims: Record<string, unknown>, name: string): boolean | undefined {
  const value = text(claims, name);
  return value === undefined ? undefined : value === 'true';
}

/** The claim each fact is read from, per issuer kind (GitLab has no run attempt; Kubernetes no CI facts). */
const FACT_CLAIMS: Record<IssuerKind, Partial<Record<keyof WorkloadFacts, readonly string[]>>> = {
  github: {
    project: ['repository'],
    environment: ['environment'],
    ref: ['ref'],
    refType: ['ref_type'],
    refProtected: ['ref_protected'],
    workflow: ['job_workflow_ref', 'workflow_ref'],
    sha: ['sha'],
    runId: ['run_id'],
    runAttempt: ['run_attempt'],
    actor: ['actor'],
    eventName: ['event_name'],
    runnerEnvironment: ['runner_environment'],
  },
  gitlab: {
    project: ['project_path'],
    environment: ['environment'],
    ref: ['ref'],
    refType: ['ref_type'],
    refProtected: ['ref_protected'],
    workflow: ['ci_config_ref_uri'],
    sha: ['sha'],
    runId: ['pipeline_id'],
    actor: ['user_login'],
    eventName: ['pipeline_source'],
    runnerEnvironment: ['runner_environment'],
  },
  kubernetes: {},
  // Any other issuer: the facts it states under the policy's own names, as the issuer verified them.
  oidc: Object.fromEntries(WORKLOAD_FACT_NAMES.map((fact) => [fact, [FACT_FIELDS[fact]]])),
};

/** The facts of a verified token, named as the policy names them. */
export function factsFromClaims(kind: IssuerKind, claims: Record<string, unknown>): WorkloadFacts {
  const facts: Record<string, string | boolean> = {};
  for (const [fact, names] of Object.entries(FACT_CLAIMS[kind]) as Array<[keyof WorkloadFacts, readonly string[]]>) {
    const value = names
      .map((name) => (fact === 'refProtected' ? flag(claims, name) : text(claims, name)))
      .find((v) => v !== undefined);
    if (value !== undefined) facts[fact] = value;
  }
  return facts as WorkloadFacts;
}

const SAFE_PATH = /^[A-Za-z0-9._~/-]+$/;
const DIGITS = /^[0-9]+$/;

/**
 * The run's page, for the audit entry and the console: github.com and GitHub Enterprise Server (issuer
 * `https://HOST/_services/token`), and GitLab instances (the issuer is the instance URL). Built only from values
 * that cannot turn the link into something else (digits, plain path characters).
 */
export function runUrlOf(kind: IssuerKind, issuer: string, facts: WorkloadFacts): string | undefined {
  const { project, runId, runAttempt } = facts;
  if (!project || !runId || !SAFE_PATH.test(project) || !DIGITS.test(runId) || project.includes('..')) {
    return undefined;
  }
  if (kind === 'github') {
    const url = new URL(issuer);
    const web =
      url.host === 'token.actions.githubusercontent.com'
        ? 'https://github.com'
        : url.pathname.startsWith('/_services/token')
          ? url.origin
          : undefined;
    if (!web) return undefined;
    const attempt = runAttempt && DIGITS.test(runAttempt) ? `/attempts/${runAttempt}` : '';
    return `${web}/${project}/actions/runs/${runId}${attempt}`;
  }
  if (kind === 'gitlab') return `${issuer.replace(/\/+$/, '')}/${project}/-/pipelines/${runId}`;
  return undefined;
}

/**
 * The claims that name one workload across its runs and refs, per issuer kind, when its trust rule names none: the
 * repository (project) by its id and the workflow file without its `@ref`. Not GitHub's `sub`, which carries the ref
 * or environment: with it each tag would be a new identity with a fresh allowance. Each entry is a claim, or
 * alternatives in order; `@ref` is cut from the workflow claims. Kubernetes and other issuers: `sub`.
 */
const DEFAULT_IDENTITY_CLAIMS: Record<IssuerKind, ReadonlyArray<readonly string[]>> = {
  github: [
    ['repository_id', 'repository'],
    ['job_workflow_ref', 'workflow_ref'],
  ],
  gitlab: [['project_id', 'project_path'], ['ci_config_ref_uri']],
  kubernetes: [['sub']],
  oidc: [['sub']],
};

/** The longest stable identity kept as text (GitHub's repository id and workflow path are well under it). */
const MAX_STABLE_IDENTITY_LENGTH = 512;

/** Claims whose value ends in `@<ref>`: the ref goes, the workflow file stays. */
const WORKFLOW_CLAIMS = new Set(['job_workflow_ref', 'workflow_ref', 'ci_config_ref_uri']);

/**
 * The workload's stable identity: `name=value` of the claims the trust rule names (`identityClaims`, values as
 * they are), or of the issuer kind's defaults (DEFAULT_IDENTITY_CLAIMS), values JSON-quoted so that no value can
 * pass for two. Falls back to `sub` when a token has none of the defaults.
 */
export function stableIdentityOf(
  kind: IssuerKind,
  claims: Record<string, unknown>,
  identityClaims: readonly string[] | null,
): string {
  const parts: string[] = [];
  const add = (name: string, value: string) => parts.push(`${name}=${JSON.stringify(value)}`);
  if (identityClaims) {
    for (const name of identityClaims) add(name, claimText(readClaim(claims, name)) ?? '');
  } else {
    for (const alternatives of DEFAULT_IDENTITY_CLAIMS[kind]) {
      const name = alternatives.find((n) => text(claims, n) !== undefined);
      if (name === undefined) continue;
      const value = text(claims, name) as string;
      add(name, WORKFLOW_CLAIMS.has(name) ? value.replace(/@[^@]*$/, '') : value);
    }
    if (parts.length === 0) add('sub', text(claims, 'sub') ?? '');
  }
  const identity = parts.join(' ');
  // It becomes part of a counter's key (an indexed column): a long one is kept as its digest, still one per value.
  return identity.length <= MAX_STABLE_IDENTITY_LENGTH
    ? identity
    : `sha256:${createHash('sha256').update(identity).digest('hex')}`;
}

/** The identity the policy's `identity_id` input shows for a workload: issuer and subject. */
export function workloadIdentityId(identity: Pick<WorkloadIdentity, 'issuer' | 'subject'>): string {
  return `${identity.issuer}#${identity.subject}`;
}
