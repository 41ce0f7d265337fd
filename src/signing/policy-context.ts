// What a request adds to the policy input beyond the tenant, key and caller: held with a waiting request and
// read back when it continues (held-requests.ts, approvals.ts, request-continuation.ts, workload-context.ts).
import type { PolicyInput } from '../policy/policy.js';

export type PolicyContext = Omit<PolicyInput, 'tenantId' | 'keyId' | 'keySpec' | 'algorithm' | 'callerId'>;
