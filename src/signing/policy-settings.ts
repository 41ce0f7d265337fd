// The policy a data dir's configuration asks for, built one way for every signer of that data dir: the service
// (src/server.ts) and the daemon's in-process mode, so in-process signing is never a way around the policy.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { ServiceConfig } from '../config/config.js';
import type { PolicyEngine } from '../policy/policy.js';
import { loadPolicyFile, type PolicyDocument, parsePolicyDocument } from '../policy/policy-file.js';
import { RulesPolicyEngine } from '../policy/rules-engine.js';
import type { Store } from '../store/store.js';
import { StoreVulnerabilityScanner } from './vulnerability-db.js';

export interface PolicySettings {
  policy: PolicyEngine;
  approvalLifetimeMs?: number;
  approvalRetryWindowMs?: number;
  exceptionMaxLifetimeMs?: number;
}

/**
 * The policy in force without a policy file. Secure by default: inactive identities are denied, an SBOM that is
 * sent is parsed (garbage is 400 invalid_sbom) and checked against the store's vulnerability database, which is
 * empty, so nothing is gated on vulnerabilities, until `signbridge admin vulndb import` fills it.
 */
export const BUILT_IN_POLICY_TEXT = `# signbridge built-in default policy (docs/policy.md)
version: 1
rules:
  denyInactiveIdentities: true
`;
export const BUILT_IN_POLICY: PolicyDocument = parsePolicyDocument(BUILT_IN_POLICY_TEXT, 'built-in default policy');

/** Which policy document is in force and the SHA-256 of its text, for the start-up log and audit entry. */
export interface PolicySource {
  /** The policy file's path, or "built-in default". */
  name: string;
  file: string | null;
  sha256: string;
}

const sha256 = (data: string | Buffer) => createHash('sha256').update(data).digest('hex');

export function policySource(config: Pick<ServiceConfig, 'policyFile'>): PolicySource {
  if (!config.policyFile) return { name: 'built-in default', file: null, sha256: sha256(BUILT_IN_POLICY_TEXT) };
  return { name: config.policyFile, file: config.policyFile, sha256: sha256(readFileSync(config.policyFile)) };
}

/** The built-in default policy over a store's vulnerability database (also buildApp's default). */
export function defaultPolicy(store: Store): PolicyEngine {
  return new RulesPolicyEngine(BUILT_IN_POLICY, new StoreVulnerabilityScanner(store));
}

/** Rules plus the store's vulnerability database: the policy file's, or the built-in default without one. */
export function policySettings(config: Pick<ServiceConfig, 'policyFile'>, store: Store): PolicySettings {
  if (!config.policyFile) return { policy: defaultPolicy(store) };
  const doc = loadPolicyFile(config.policyFile);
  return {
    policy: new RulesPolicyEngine(doc, new StoreVulnerabilityScanner(store)),
    ...(doc.approvals?.lifetimeHours !== undefined && { approvalLifetimeMs: doc.approvals.lifetimeHours * 3_600_000 }),
    ...(doc.approvals?.retryWindowMinutes !== undefined && {
      approvalRetryWindowMs: doc.approvals.retryWindowMinutes * 60_000,
    }),
    ...(doc.exceptions?.maxLifetimeDays !== undefined && {
      exceptionMaxLifetimeMs: doc.exceptions.maxLifetimeDays * 86_400_000,
    }),
  };
}
