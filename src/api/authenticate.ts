import type { FastifyRequest } from 'fastify';
import { checkApiKey } from '../auth/api-keys.js';
import { ApiError } from '../errors.js';
import type { Authorization } from '../signing/caller-authorization.js';
import type { ApiKeyRecord, Store } from '../store/store.js';

declare module 'fastify' {
  interface FastifyRequest {
    caller?: ApiKeyRecord;
    /** What the /v1 door checked for the caller (its preHandler), handed to the signing entry point. */
    authorization?: Authorization;
  }
}

/** onRequest hook: a valid, unrevoked Bearer API key or 401. Runs before the body is parsed. */
export function authenticate(store: Store, now: () => Date = () => new Date()) {
  return async (request: FastifyRequest): Promise<void> => {
    const header = request.headers.authorization;
    if (!header) {
      throw new ApiError('unauthorized', 'missing Authorization header; send "Authorization: Bearer <api key>"');
    }
    const [scheme, token, ...rest] = header.split(' ');
    if (scheme?.toLowerCase() !== 'bearer' || !token || rest.length > 0) {
      // SigV4-style signatures are declared in the OpenAPI document for API-gateway deployments; this server
      // itself verifies only Bearer API keys (docs/api.md, "Authentication").
      throw new ApiError('unauthorized', 'Authorization must be "Bearer <api key>"');
    }
    const check = await checkApiKey(store, token, now());
    if ('problem' in check) throw new ApiError('unauthorized', check.problem);
    request.caller = check.record;
  };
}

/** The role and tenant check; what it checked goes on to the signing entry point (src/signing/caller-authorization.ts). */
export { authorize } from '../signing/caller-authorization.js';
