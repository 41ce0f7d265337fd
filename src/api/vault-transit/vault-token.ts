// Who calls: a signbridge API key (`sbk_...`) where Vault expects its token, in `X-Vault-Token` (hvac, cosign, the
// vault CLI) or as `Authorization: Bearer` (jsign). Anything missing, unknown, revoked or expired is Vault's bare
// "permission denied" (403), which says nothing about the key.
import type { FastifyRequest } from 'fastify';
import { checkApiKey } from '../../auth/api-keys.js';
import type { Store } from '../../store/store.js';
import { PERMISSION_DENIED, VaultError } from './errors.js';

function presentedToken(request: FastifyRequest): string | undefined {
  const vault = request.headers['x-vault-token'];
  if (typeof vault === 'string' && vault !== '') return vault;
  const [scheme, token, ...rest] = (request.headers.authorization ?? '').split(' ');
  if (scheme?.toLowerCase() === 'bearer' && token && rest.length === 0) return token;
  return undefined;
}

/** onRequest hook: sets request.caller, or answers 403 permission denied. */
export function vaultAuthenticate(store: Store, now: () => Date) {
  return async (request: FastifyRequest): Promise<void> => {
    const token = presentedToken(request);
    if (token === undefined) throw new VaultError(403, [PERMISSION_DENIED]);
    const check = await checkApiKey(store, token, now());
    if ('problem' in check) throw new VaultError(403, [PERMISSION_DENIED]);
    request.caller = check.record;
  };
}
