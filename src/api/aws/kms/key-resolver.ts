// A KMS KeyId to the key version it names, for one caller: the caller's role and tenant are checked against the
// tenant the name points into before anything about that tenant is looked up, so another tenant's keys answer
// AccessDeniedException whether they exist or not. An alias is a name inside the caller's own account at AWS: one
// that is not the caller's answers NotFoundException, the same for another tenant's alias and one that names nothing,
// as AWS answers an alias its account does not have. Names without a tenant (a bare key id) are the caller's own.

import { ApiError } from '../../../errors.js';
import { aliasArn, aliasExists, keyArn, parseKeyName } from '../../../kms-api/key-ids.js';
import type { Authorization } from '../../../signing/caller-authorization.js';
import type { SigningService } from '../../../signing/signing-service.js';
import type { Action } from '../../../store/records/roles.js';
import type { ApiKeyRecord, KeyRecord } from '../../../store/store.js';
import { authorize } from '../../authenticate.js';
import { AwsJsonError } from './errors.js';

export interface ResolvedKey {
  key: KeyRecord;
  /** The tenant's current version: the only one that signs. */
  current: boolean;
  /** What was checked for the caller on the key's tenant, which Sign hands to the signing entry point. */
  authorization: Authorization;
}

/** The operation's permission in IAM's words, for AccessDeniedException messages. */
export type KmsPermission =
  | 'kms:Sign'
  | 'kms:Verify'
  | 'kms:DescribeKey'
  | 'kms:GetPublicKey'
  | 'kms:ListKeys'
  | 'kms:ListAliases';

/** Which signbridge action's roles a KMS permission needs (store/records/roles.ts). */
const ACTION_OF: Record<KmsPermission, Action> = {
  'kms:Sign': 'sign',
  'kms:Verify': 'get_public_key',
  'kms:DescribeKey': 'get_public_key',
  'kms:GetPublicKey': 'get_public_key',
  'kms:ListKeys': 'get_public_key',
  'kms:ListAliases': 'get_public_key',
};

/** The caller's own tenant, which ListKeys and ListAliases list; an operator's key has none. */
export function callerTenant(caller: ApiKeyRecord, permission: KmsPermission, accessKeyId: string): string {
  if (caller.tenantId === null) {
    throw new AwsJsonError(
      'AccessDeniedException',
      `User: ${accessKeyId} is not authorized to perform: ${permission}: an operator key acts for no tenant; use a key of the tenant`,
    );
  }
  authorizeFor(caller, permission, caller.tenantId, accessKeyId, caller.tenantId);
  return caller.tenantId;
}

function authorizeFor(
  caller: ApiKeyRecord,
  permission: KmsPermission,
  tenantId: string,
  accessKeyId: string,
  resource: string,
): Authorization {
  try {
    return authorize(caller, ACTION_OF[permission], tenantId);
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    throw new AwsJsonError(
      'AccessDeniedException',
      `User: ${accessKeyId} is not authorized to perform: ${permission} on resource: ${resource} because ${err.message}`,
    );
  }
}

export async function resolveKey(
  signing: SigningService,
  caller: ApiKeyRecord,
  accessKeyId: string,
  region: string,
  keyIdText: string,
  permission: KmsPermission,
): Promise<ResolvedKey> {
  const name = parseKeyName(keyIdText);
  if (!name) throw new AwsJsonError('NotFoundException', `Invalid keyId '${keyIdText.slice(0, 200)}'`);
  // Decided from the name and the caller alone, before any lookup: the answer cannot tell which tenants exist.
  if (name.kind === 'alias' && caller.tenantId !== null && name.tenantId !== caller.tenantId) {
    throw aliasNotFound(keyIdText, region, caller.tenantId);
  }
  const tenantId = name.tenantId ?? caller.tenantId;
  if (tenantId === null) {
    throw new AwsJsonError(
      'AccessDeniedException',
      `User: ${accessKeyId} is not authorized to perform: ${permission}: an operator key acts for no tenant`,
    );
  }
  const resource = name.kind === 'alias' ? aliasArn(region, tenantId) : keyArn(region, tenantId, name.keyId);
  const authorization = authorizeFor(caller, permission, tenantId, accessKeyId, resource);
  try {
    const current = await signing.getKey(tenantId);
    if (name.kind === 'alias') {
      if (!aliasExists(name)) throw aliasNotFound(keyIdText, region, tenantId);
      return { key: current, current: true, authorization };
    }
    if (name.keyId === current.id) return { key: current, current: true, authorization };
    return { key: await signing.getKey(tenantId, name.keyId), current: false, authorization };
  } catch (err) {
    if (err instanceof ApiError && (err.code === 'tenant_not_found' || err.code === 'key_not_found')) {
      throw name.kind === 'alias'
        ? aliasNotFound(keyIdText, region, tenantId)
        : new AwsJsonError('NotFoundException', `Key '${resource}' does not exist`);
    }
    throw err;
  }
}

/**
 * AWS's answer for an alias the caller's account does not have: `Alias <alias ARN> is not found.`, the ARN as sent,
 * or made from `alias/<name>` in the caller's account. Only what the caller sent and its own tenant are in it.
 */
function aliasNotFound(keyIdText: string, region: string, callerTenant: string): AwsJsonError {
  const arn = keyIdText.startsWith('arn:') ? keyIdText : `arn:aws:kms:${region}:${callerTenant}:${keyIdText}`;
  return new AwsJsonError('NotFoundException', `Alias ${arn.slice(0, 300)} is not found.`);
}
