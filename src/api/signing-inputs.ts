// The policy inputs of a signing request, from what the caller's key says about it and what the body states: shared
// by POST /v1/sign and the drop-in KMS and Vault transit endpoints (whose bodies state nothing, so only the key's
// facts apply there).
import { ApiError } from '../errors.js';
import type { PolicyContext } from '../signing/signing-service.js';
import { checkStatedFacts, workloadInputs } from '../signing/workload-context.js';
import type { ApiKeyRecord } from '../store/store.js';

/**
 * For a person's key the identity inputs come from the server: the person's id, and `active` (a disabled person's
 * keys do not authenticate at all). A body that says otherwise is refused rather than silently overridden. Admin
 * keys keep the body's values (docs/api.md, "Identity inputs").
 */
function identityInputs(body: Record<string, unknown>, caller: ApiKeyRecord): Record<string, unknown> {
  if (!caller.personId) return body;
  const claimed = body.identity_id;
  if (claimed !== undefined && claimed !== caller.personId) {
    throw new ApiError(
      'invalid_request',
      `identity_id is set by the server for a person's API key (${caller.personId}); omit it or send that value`,
    );
  }
  if (body.identity_status !== undefined && body.identity_status !== 'active') {
    throw new ApiError('invalid_request', "identity_status is set by the server for a person's API key (active)");
  }
  return { ...body, identity_id: caller.personId, identity_status: 'active' };
}

function policyContext(body: Record<string, unknown>): PolicyContext {
  const pick = <T>(k: string) => body[k] as T | undefined;
  const ctx: PolicyContext = {};
  const assign = <K extends keyof PolicyContext>(key: K, value: PolicyContext[K] | undefined) => {
    if (value !== undefined) ctx[key] = value;
  };
  assign('artifactType', pick<string>('artifact_type'));
  assign('artifactVersion', pick<string>('artifact_version'));
  assign('environment', pick<string>('environment'));
  assign('identityId', pick<string>('identity_id'));
  assign('identityStatus', pick<'active' | 'inactive'>('identity_status'));
  assign('project', pick<string>('project'));
  assign('requireTee', pick<boolean>('require_tee'));
  assign('sbom', pick<string>('sbom'));
  return ctx;
}

/**
 * The policy inputs of a signing request. A workload key's verified facts (project, environment, identity, CI
 * facts) replace what the body says, after the body was checked not to contradict them; any other key may state no
 * CI fact (docs/policy.md, "CI workload facts").
 */
export function signingContext(body: Record<string, unknown>, caller: ApiKeyRecord): PolicyContext {
  checkStatedFacts(body, caller.workload);
  if (caller.workload) return { ...policyContext(body), ...workloadInputs(caller.workload) };
  return policyContext(identityInputs(body, caller));
}
