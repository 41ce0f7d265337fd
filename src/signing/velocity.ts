// Velocity limits of the policy file (`velocity`: perIdentity, perRun, perTenant; docs/policy.md): at most N signing
// requests per window, so that a compromised job cannot turn the service into a signing oracle. Counted in the store
// (the trial counters: shared by every instance on one database, kept across restarts); the policy engine only
// names the limits, since counting is I/O.
import type { WorkloadIdentity } from '../auth/workload/workload-identity.js';
import { workloadIdentityId } from '../auth/workload/workload-identity.js';
import type { VelocityLimit, VelocityLimits } from '../policy/policy-file.js';
import { type Counter, counterKey } from '../store/records/counter-names.js';
import type { Store } from '../store/store.js';

export type VelocityScope = 'perIdentity' | 'perRun' | 'perTenant';

/** A limit the request went over: which, its numbers, and when its window ends. */
export interface VelocityExceeded {
  limit: VelocityScope;
  max: number;
  windowSeconds: number;
  /** What was counted (the identity, the run or the tenant), for the reason and the audit entry. */
  subject: string;
  retryAfterSeconds: number;
}

export interface VelocityCaller {
  tenantId: string;
  callerId: string;
  workload?: WorkloadIdentity | null;
}

interface VelocityCounter {
  scope: VelocityScope;
  limit: VelocityLimit;
  subject: string;
  counter: Counter;
  of: string[];
}

/** The counters a request counts against, most specific first, each its own counter of what it counts (`of`). */
function countersOf(limits: VelocityLimits, caller: VelocityCaller): VelocityCounter[] {
  const { tenantId, workload } = caller;
  const counters: VelocityCounter[] = [];
  if (limits.perIdentity) {
    // The workload's stable identity counts across its keys, runs and refs (each run of a job gets new keys, and
    // GitHub's sub changes with every tag); a key minted before stable identities by issuer and subject; any other
    // caller by its key.
    const subject = workload
      ? workload.stableIdentity
        ? `${workload.issuer} ${workload.stableIdentity}`
        : workloadIdentityId(workload)
      : `api_key:${caller.callerId}`;
    counters.push({
      scope: 'perIdentity',
      limit: limits.perIdentity,
      subject,
      counter: 'velocityIdentity',
      of: [tenantId, subject],
    });
  }
  const runId = workload?.facts.runId;
  if (limits.perRun && workload && runId !== undefined) {
    // All attempts of a run count together: a retried job does not get a fresh allowance. Each new run gets its own,
    // by design (perIdentity is what bounds a workload across runs).
    const subject = `${workload.issuer} ${workload.facts.project ?? workload.subject} run ${runId}`;
    counters.push({
      scope: 'perRun',
      limit: limits.perRun,
      subject,
      counter: 'velocityRun',
      of: [tenantId, subject],
    });
  }
  if (limits.perTenant) {
    counters.push({
      scope: 'perTenant',
      limit: limits.perTenant,
      subject: `tenant ${tenantId}`,
      counter: 'velocityTenant',
      of: [tenantId],
    });
  }
  return counters;
}

/**
 * Counts one signing request against the limits, most specific first, and stops at the first one it exceeds: a
 * caller over its own limit does not use up its tenant's allowance. Windows start at the first request counted in
 * them (the trial counters' fixed windows); Retry-After is the rest of the exceeded window.
 */
export async function countVelocity(
  store: Store,
  limits: VelocityLimits | undefined,
  caller: VelocityCaller,
  nowMs: number,
  /** Signatures the request asks for (a batch counts each). */
  signatures = 1,
): Promise<VelocityExceeded | undefined> {
  if (!limits) return undefined;
  for (const { scope, limit, subject, counter, of } of countersOf(limits, caller)) {
    const windowMs = limit.windowSeconds * 1000;
    const { count, windowStartMs } = await store.requestCounts.count(
      counterKey(counter, ...of),
      nowMs,
      windowMs,
      signatures,
    );
    if (count <= limit.max) continue;
    return {
      limit: scope,
      max: limit.max,
      windowSeconds: limit.windowSeconds,
      subject,
      retryAfterSeconds: Math.max(1, Math.ceil((windowStartMs + windowMs - nowMs) / 1000)),
    };
  }
  return undefined;
}
