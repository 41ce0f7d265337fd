// The names of a CI job's verified facts, as the policy reads them (docs/ci.md, "Facts the policy decides on"). Policy
// owns this vocabulary: its rules and its file are written in it, and src/auth/workload/ fills it in from each CI
// system's claims (workload-identity.ts), so the policy needs nothing from auth.
import type { WorkloadFacts } from '../store/records/workload-identity.js';

export type { WorkloadFacts };

export const WORKLOAD_FACT_NAMES = [
  'project',
  'environment',
  'ref',
  'refType',
  'refProtected',
  'workflow',
  'sha',
  'runId',
  'runAttempt',
  'actor',
  'eventName',
  'runnerEnvironment',
] as const satisfies readonly (keyof WorkloadFacts)[];

/** The request body's (and policy file's) snake_case name of each fact. */
export const FACT_FIELDS: Record<keyof WorkloadFacts, string> = {
  project: 'project',
  environment: 'environment',
  ref: 'ref',
  refType: 'ref_type',
  refProtected: 'ref_protected',
  workflow: 'workflow',
  sha: 'sha',
  runId: 'run_id',
  runAttempt: 'run_attempt',
  actor: 'actor',
  eventName: 'event_name',
  runnerEnvironment: 'runner_environment',
};
