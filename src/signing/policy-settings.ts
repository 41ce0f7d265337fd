// The policy a data dir's configuration asks for, built one way for every signer of that data dir: the service
// (src/server.ts) and the daemon's in-process mode, so in-process signing is never a way around the policy.
import type { ServiceConfig } from '../config/config.js';
import { allowAll, type PolicyEngine } from '../policy/policy.js';
import { loadPolicyFile } from '../policy/policy-file.js';
import { RulesPolicyEngine } from '../policy/rules-engine.js';
import type { Store } from '../store/store.js';
import { StoreVulnerabilityScanner } from './vulnerability-db.js';

export interface PolicySettings {
  policy: PolicyEngine;
  approvalLifetimeMs?: number;
  exceptionMaxLifetimeMs?: number;
}

/** Without a policy file every signature is allowed; with one, rules plus the store's vulnerability database. */
export function policySettings(config: Pick<ServiceConfig, 'policyFile'>, store: Store): PolicySettings {
  if (!config.policyFile) return { policy: allowAll };
  const doc = loadPolicyFile(config.policyFile);
  return {
    policy: new RulesPolicyEngine(doc, new StoreVulnerabilityScanner(store)),
    ...(doc.approvals?.lifetimeHours !== undefined && { approvalLifetimeMs: doc.approvals.lifetimeHours * 3_600_000 }),
    ...(doc.exceptions?.maxLifetimeDays !== undefined && {
      exceptionMaxLifetimeMs: doc.exceptions.maxLifetimeDays * 86_400_000,
    }),
  };
}
