// May this API key do this action for this tenant: its roles (store/records/roles.ts) and its tenant. Checked by
// every door before it reads the protocol's fields (src/api/authenticate.ts re-exports it), and again by the signing
// entry point (signing-entry.ts) for every signature, so that no door can reach a signature without it.
import { rolesOf } from '../auth/api-keys.js';
import { ApiError } from '../errors.js';
import { ACTION_ROLES, type Action } from '../store/records/roles.js';
import type { ApiKeyRecord } from '../store/store.js';

/** The caller's role must allow the action, and a tenant key may act only on its own tenant. */
export function authorize(caller: ApiKeyRecord, action: Action, tenantId: string): void {
  const allowed = ACTION_ROLES[action];
  const roles = rolesOf(caller);
  if (!roles.some((r) => allowed.includes(r))) {
    throw new ApiError('forbidden', `role ${roles.join('+')} may not call ${action} (allowed: ${allowed.join(', ')})`);
  }
  if (caller.tenantId !== null && caller.tenantId !== tenantId) {
    throw new ApiError('forbidden', `this API key belongs to another tenant and may not act on ${tenantId}`);
  }
}
