// The verified identity of a CI workload, as the store keeps it with a key minted by the exchange (api_keys.workload,
// JSON). What it means and how it is read from a token: src/auth/workload/workload-identity.ts.

/** The policy inputs a workload identity fixes. A request body may repeat them, never contradict them. */
export interface WorkloadFacts {
  /** GitHub `repository` (owner/name), GitLab `project_path` (group/project). */
  project?: string;
  environment?: string;
  /** GitHub: `refs/heads/main`, `refs/tags/v1`; GitLab: the bare name (`main`) with `ref_type`. */
  ref?: string;
  /** branch or tag. */
  refType?: string;
  refProtected?: boolean;
  /** GitHub `job_workflow_ref` (falls back to `workflow_ref`); GitLab `ci_config_ref_uri`. */
  workflow?: string;
  sha?: string;
  /** GitHub `run_id`; GitLab `pipeline_id`. */
  runId?: string;
  /** GitHub `run_attempt`; GitLab has none (a retried job is a new `job_id` in the same pipeline). */
  runAttempt?: string;
  /** GitHub `actor`; GitLab `user_login`. */
  actor?: string;
  /** GitHub `event_name`; GitLab `pipeline_source`. */
  eventName?: string;
  /** github-hosted / self-hosted; GitLab gitlab-hosted / self-hosted. */
  runnerEnvironment?: string;
}

export type IssuerKind = 'github' | 'gitlab' | 'kubernetes' | 'oidc';

/** The verified identity stored with a key minted by the exchange (api_keys.workload, JSON). */
export interface WorkloadIdentity {
  issuer: string;
  subject: string;
  kind: IssuerKind;
  /** The trust rule that admitted the token. */
  ruleId: string;
  /** The token's `jti` (or `claims:` + SHA-256 of its signed claims when it has none): the one use of that token. */
  tokenId: string;
  facts: WorkloadFacts;
  /**
   * What stays the same from run to run and tag to tag of one workload (stableIdentityOf): what velocity.perIdentity
   * counts. Absent on keys minted before it existed; they count by issuer and subject.
   */
  stableIdentity?: string;
  /** A link to the run, when the issuer is one whose run pages are known. */
  runUrl?: string;
}
