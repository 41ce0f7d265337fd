// A workload key's verified facts as policy inputs, and the request body's word on them checked against those facts
// (docs/policy.md, "CI workload facts"). The body may repeat a fact, never contradict it: every conflict is a 400
// claims_conflict naming the field and the verified value, so no caller can assert a fact the token did not carry.
import { type WorkloadIdentity, workloadIdentityId } from '../auth/workload/workload-identity.js';
import { ApiError } from '../errors.js';
import { FACT_FIELDS, type WorkloadFacts } from '../policy/workload-facts.js';
import type { PolicyContext } from './policy-context.js';

/** The CI fact fields of a request body (all facts but project and environment, which any key may state). */
export const CI_FACT_FIELDS = Object.values(FACT_FIELDS).filter((f) => f !== 'project' && f !== 'environment');

/** A request body's fields that a workload key's identity fixes, with the verified value each must equal. */
function verifiedFields(identity: WorkloadIdentity): Array<[field: string, verified: string | boolean | undefined]> {
  const facts = Object.entries(FACT_FIELDS).map(
    ([name, field]) => [field, identity.facts[name as keyof WorkloadFacts]] as [string, string | boolean | undefined],
  );
  return [...facts, ['identity_id', workloadIdentityId(identity)], ['identity_status', 'active']];
}

/**
 * The body's CI facts checked against the caller's key: a workload key's verified values (a stated field must equal
 * its value, and a field the token did not carry may not be stated), or, for any other key, no CI fact at all.
 */
export function checkStatedFacts(body: Record<string, unknown>, identity: WorkloadIdentity | null | undefined): void {
  if (!identity) {
    const stated = CI_FACT_FIELDS.filter((field) => body[field] !== undefined);
    if (stated.length > 0) {
      throw new ApiError(
        'claims_conflict',
        `${stated.join(', ')}: CI facts come only with a key from the token exchange (POST /oauth/token), which ` +
          'verified them; this key has none, so omit them',
      );
    }
    return;
  }
  for (const [field, verified] of verifiedFields(identity)) {
    const stated = body[field];
    if (stated === undefined || stated === verified) continue;
    throw new ApiError(
      'claims_conflict',
      verified === undefined
        ? `${field}: the workload identity's token carries no ${field}, so the body may not state one; omit it`
        : `${field} is ${JSON.stringify(stated)} but the workload identity's token verified ${JSON.stringify(verified)}; omit it or send that value`,
    );
  }
}

/** The policy inputs a workload key fixes: its facts, its identity, and `active` (an expired key never gets here). */
export function workloadInputs(identity: WorkloadIdentity): PolicyContext {
  const f = identity.facts;
  const context: PolicyContext = {
    identityId: workloadIdentityId(identity),
    identityStatus: 'active',
    workloadIssuer: identity.issuer,
    workloadSubject: identity.subject,
  };
  for (const name of Object.keys(FACT_FIELDS) as Array<keyof WorkloadFacts>) {
    const value = f[name];
    if (value !== undefined) Object.assign(context, { [name]: value });
  }
  return context;
}

/** Who signed, for the audit entry of a signature or request by a workload key (the contract's `workload` detail). */
export function workloadAuditDetails(identity: WorkloadIdentity): Record<string, string> {
  const f = identity.facts;
  const details: Record<string, string | undefined> = {
    issuer: identity.issuer,
    subject: identity.subject,
    project: f.project,
    ref: f.ref,
    workflow: f.workflow,
    run_id: f.runId,
    run_attempt: f.runAttempt,
    sha: f.sha,
    run_url: identity.runUrl,
  };
  return Object.fromEntries(Object.entries(details).filter(([, v]) => v !== undefined)) as Record<string, string>;
}
