// May this API key do this action for this tenant: its roles (store/records/roles.ts) and its tenant. Each door
// checks it once, where its protocol wants the refusal (before it reads the request's fields or looks anything up:
// src/api/authenticate.ts re-exports it), and hands what it checked, an Authorization, to the signing entry point
// (signing-entry.ts). The entry takes no API key without one, and only one that authorize made for the request's
// tenant and an action that lets no more roles through than the request's own: so no door reaches a signature
// without the check, and no signature pays for it twice.
import { rolesOf } from '../auth/api-keys.js';
import { ApiError } from '../errors.js';
import { ACTION_ROLES, type Action } from '../store/records/roles.js';
import type { ApiKeyRecord } from '../store/store.js';

/** What a door checked: this API key may do `action` for `tenantId`. Made only by authorize. */
export interface Authorization {
  readonly apiKey: ApiKeyRecord;
  readonly action: Action;
  readonly tenantId: string;
}

/** The Authorizations authorize made: one built by hand (an object literal) is not among them. */
const issued = new WeakSet<Authorization>();

/** The caller's role must allow the action, and a tenant key may act only on its own tenant. */
export function authorize(caller: ApiKeyRecord, action: Action, tenantId: string): Authorization {
  const allowed = ACTION_ROLES[action];
  const roles = rolesOf(caller);
  if (!roles.some((r) => allowed.includes(r))) {
    throw new ApiError('forbidden', `role ${roles.join('+')} may not call ${action} (allowed: ${allowed.join(', ')})`);
  }
  if (caller.tenantId !== null && caller.tenantId !== tenantId) {
    throw new ApiError('forbidden', `this API key belongs to another tenant and may not act on ${tenantId}`);
  }
  const authorization = Object.freeze({ apiKey: caller, action, tenantId });
  issued.add(authorization);
  return authorization;
}

/**
 * The API key of `authorization` when it covers `action` for `tenantId`: made by authorize, for that tenant, for an
 * action whose roles all may do `action` too (Vault's `batch_input` is checked as `sign` and asked as `sign_batch`,
 * which the same roles may do). Anything else is a door that checked something other than what it asks: refused.
 */
export function authorizedKey(authorization: Authorization, action: Action, tenantId: string): ApiKeyRecord {
  const covered =
    issued.has(authorization) &&
    authorization.tenantId === tenantId &&
    ACTION_ROLES[authorization.action].every((role) => ACTION_ROLES[action].includes(role));
  if (!covered) {
    throw new ApiError(
      'forbidden',
      `the caller was authorized for ${authorization.action} on ${authorization.tenantId}, not ${action} on ${tenantId}`,
    );
  }
  return authorization.apiKey;
}
