// A client's own retry of a signature held for approval continues the request it already opened. pkcs11-tool and
// osslsigncode sign again by themselves after a refusal (the module's approval timeout is one); without this each
// retry opened a new pending request for the same digest, and the person waited a second full timeout.
// docs/policy.md (Retries continue their request) says what matches and what a retry gets.
import { createHash } from 'node:crypto';
import type { WorkloadIdentity } from '../auth/workload/workload-identity.js';
import type { SigningAlgorithm } from '../crypto/algorithms.js';
import { canonicalJson } from '../store/audit/audit-chain.js';
import type { PolicyContext } from './policy-context.js';

/** The authenticated caller of a signing request, as the signing path knows it. */
export interface ContinuationCaller {
  /** The API key id. */
  callerId: string;
  /** The person behind the key, when it is a person's key. */
  personId?: string | null;
  /** The CI workload identity of a key from the token exchange. */
  workload?: WorkloadIdentity | null;
}

/**
 * Whose retry may continue a request. A CI job's run: the same issuer, subject, project and run id, whatever the
 * attempt, so attempt 2 of a run (which exchanged its token for a new key) continues attempt 1's request; another
 * run opens its own. Otherwise exactly the same API key: another key of the same person, or another signer of the
 * tenant, opens a request of its own.
 */
export function continuationIdentity(caller: ContinuationCaller): string {
  const workload = caller.workload;
  if (workload?.facts.runId !== undefined) {
    return `workload_run:${JSON.stringify([workload.issuer, workload.subject, workload.facts.project ?? null, workload.facts.runId])}`;
  }
  return `api_key:${caller.callerId}`;
}

export interface ContinuationParts {
  identity: string;
  tenantId: string;
  /** The key version the request signs with: after a rotation a retry opens a new request for the new key. */
  keyId: string;
  algorithm: SigningAlgorithm;
  digest: Buffer;
  /** The policy inputs; a request with different inputs is a different request. */
  context: PolicyContext;
  /** A held batch's size (`digest` is then the batch's digest): never the key of a one-digest request. */
  batchSize?: number;
  /** An RSA PSS salt length other than the hash's: a retry asking for another salt is another signature. */
  pssSaltLength?: number;
}

/**
 * What a retry must match, as one value the store indexes: SHA-256 over the parts in canonical JSON (sorted keys,
 * so the order a client sends its fields in does not matter). The policy inputs may hold a whole SBOM; the hash
 * keeps the indexed value short.
 */
export function continuationKey(parts: ContinuationParts): string {
  // The run's attempt is the one input a retried job changes; every other input still has to match.
  const { runAttempt: _attempt, ...inputs } = parts.context;
  const canonical = canonicalJson({
    identity: parts.identity,
    tenant_id: parts.tenantId,
    key_id: parts.keyId,
    algorithm: parts.algorithm,
    hash: parts.digest.toString('base64'),
    inputs,
    ...(parts.batchSize !== undefined && { batch_size: parts.batchSize }),
    ...(parts.pssSaltLength !== undefined && { pss_salt_length: parts.pssSaltLength }),
  });
  return createHash('sha256').update(canonical).digest('hex');
}
