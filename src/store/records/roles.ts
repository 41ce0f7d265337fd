// Who may call what. One role per API key; a key is bound to one tenant, except `operator`, which is global
// and can only create tenants (least privilege: the platform operator cannot sign with a tenant's keys).
export const ROLES = ['operator', 'admin', 'signer', 'approver', 'security_reviewer'] as const;
export type Role = (typeof ROLES)[number];

export const ACTIONS = [
  'sign',
  'pkcs11_sign',
  'sign_batch',
  'approve_sign',
  'create_tenant',
  'rotate_key',
  'get_import_params',
  'import_key',
  'get_public_key',
  'create_exception',
  'list_exceptions',
  'revoke_exception',
] as const;
export type Action = (typeof ACTIONS)[number];

export const ACTION_ROLES: Record<Action, readonly Role[]> = {
  sign: ['signer'],
  pkcs11_sign: ['signer'],
  sign_batch: ['signer'],
  approve_sign: ['approver', 'security_reviewer'],
  create_tenant: ['operator'],
  rotate_key: ['admin'],
  get_import_params: ['admin'],
  import_key: ['admin'],
  get_public_key: ['admin', 'signer', 'approver', 'security_reviewer'],
  create_exception: ['admin'],
  list_exceptions: ['admin', 'approver', 'security_reviewer'],
  revoke_exception: ['admin'],
};

export function isRole(value: string): value is Role {
  return (ROLES as readonly string[]).includes(value);
}
