// POST /oauth/token: the RFC 8693 token exchange of a CI job (docs/ci.md, "The exchange"; docs/api.md). It works
// with or without an IdP configured (a plugin of its own, apart from oauth.ts's sign-in endpoints), takes only
// form-encoded bodies, and answers errors as RFC 6749 §5.2 says: {"error", "error_description"} plus "reason" (the
// same text, the field every other signbridge error has).

import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { EXCHANGE_RETRY_AFTER_S, ExchangeError, type TokenExchange } from '../../auth/workload/token-exchange.js';
import { formObject } from '../../net/form-fields.js';
import type { Store } from '../../store/store.js';
import { storeFault } from '../../store/store-errors.js';
import { TENANT_ID_PATTERN } from '../schemas.js';
import { countTokenExchange, DEFAULT_EXCHANGE_LIMIT, type ExchangeLimit } from '../token-exchange-limit.js';

export const TOKEN_EXCHANGE_GRANT = 'urn:ietf:params:oauth:grant-type:token-exchange';
const SUBJECT_TOKEN_TYPES = ['urn:ietf:params:oauth:token-type:jwt', 'urn:ietf:params:oauth:token-type:id_token'];
const ISSUED_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token';

export interface OAuthTokenOptions {
  store: Store;
  now: () => Date;
  exchange: TokenExchange;
  /** Exchanges an address may ask for per window (default 60 per minute). */
  limit?: ExchangeLimit;
}

const TokenExchangeRequest = Type.Object(
  {
    grant_type: Type.String({ description: `${TOKEN_EXCHANGE_GRANT} (the only grant type of this endpoint)` }),
    subject_token: Type.String({ minLength: 1, maxLength: 16384, description: "the CI job's OIDC ID token (a JWT)" }),
    subject_token_type: Type.String({ description: SUBJECT_TOKEN_TYPES.join(' or ') }),
    tenant_id: Type.String({ pattern: TENANT_ID_PATTERN, description: 'the tenant whose trust rules apply' }),
  },
  // RFC 6749 §3.2: parameters the server does not know are ignored (resource, audience, scope, ...).
  { additionalProperties: true, title: 'TokenExchangeRequest' },
);

const TokenExchangeResponse = Type.Object(
  {
    access_token: Type.String({ description: 'a short-lived API key (sbk_...) bound to the tenant, role and claims' }),
    issued_token_type: Type.String({ description: ISSUED_TOKEN_TYPE }),
    token_type: Type.String({ description: 'Bearer' }),
    expires_in: Type.Integer({ description: "seconds until the key expires (the trust rule's key minutes)" }),
    expires_at: Type.String({ format: 'date-time' }),
    tenant_id: Type.String(),
    role: Type.String({ description: 'signer' }),
  },
  { title: 'TokenExchangeResponse', description: 'the key the exchange minted (RFC 8693 §2.2.1)' },
);

const OAuthErrorResponse = Type.Object(
  {
    error: Type.String({
      description:
        'invalid_request, unsupported_grant_type, invalid_grant (400); rate_limited (429); temporarily_unavailable (503)',
    }),
    error_description: Type.String({ description: 'which check failed; never the token' }),
    reason: Type.String({ description: 'the same text as error_description' }),
  },
  { title: 'OAuthErrorResponse' },
);

/** The error schema with the codes of one status in its description (as errorResponse does for ErrorResponse). */
const oauthError = (codes: string) => ({
  ...OAuthErrorResponse,
  description: `RFC 6749 §5.2 error; error is one of: ${codes}`,
});

function sendError(reply: FastifyReply, status: number, error: string, description: string, retryAfterS?: number) {
  if (retryAfterS !== undefined) reply.header('retry-after', retryAfterS);
  return reply
    .code(status)
    .header('cache-control', 'no-store')
    .send({ error, error_description: description, reason: description });
}

/** RFC 6749 §3.1: a parameter sent twice is an invalid request. */
const repeatedParameter = (name: string) =>
  new ExchangeError('invalid_request', 400, `${name} is given more than once`);

export async function oauthTokenRoutes(app: FastifyInstance, opts: OAuthTokenOptions): Promise<void> {
  const typed = app.withTypeProvider<TypeBoxTypeProvider>();
  const limit = opts.limit ?? DEFAULT_EXCHANGE_LIMIT;

  // This plugin's own parsers: only forms, as RFC 8693 §2.1 says.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (_req, body, done) => {
    try {
      done(null, formObject(body as string, { refuseRepeated: repeatedParameter }));
    } catch (err) {
      done(err as Error, undefined);
    }
  });

  app.setErrorHandler((err: FastifyError | ExchangeError, request: FastifyRequest, reply: FastifyReply) => {
    if (err instanceof ExchangeError) return sendError(reply, err.status, err.error, err.message, err.retryAfterS);
    if ((err as FastifyError).validation) {
      if (request.body === undefined || request.body === null) {
        return sendError(reply, 400, 'invalid_request', 'the body must be application/x-www-form-urlencoded');
      }
      const first = (err as FastifyError).validation?.[0];
      const field = first?.instancePath ? first.instancePath.slice(1) : String(first?.params?.missingProperty ?? '');
      const problem = first?.keyword === 'required' ? 'is required' : `is invalid (${first?.message ?? 'bad value'})`;
      return sendError(reply, 400, 'invalid_request', `${field} ${problem}`);
    }
    if ((err as FastifyError).code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') {
      return sendError(reply, 400, 'invalid_request', 'the body must be application/x-www-form-urlencoded');
    }
    if ((err as FastifyError).code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
      return sendError(reply, 400, 'invalid_request', 'the body is too large for a token exchange');
    }
    const fault = storeFault(err);
    if (fault) {
      return sendError(
        reply,
        503,
        'temporarily_unavailable',
        `the database cannot serve right now (${fault}); retry later`,
        EXCHANGE_RETRY_AFTER_S,
      );
    }
    request.log.error({ err }, 'token exchange failed');
    return sendError(reply, 500, 'server_error', 'the token exchange failed on the server; see its log');
  });

  typed.post(
    '/oauth/token',
    {
      bodyLimit: 64 * 1024,
      // Unauthenticated: limited per address with the store's counters (shared by every instance, kept across
      // restarts), one allowance with STS's AssumeRoleWithWebIdentity (token-exchange-limit.ts).
      onRequest: async (request, reply) => {
        const retryS = await countTokenExchange(opts.store, request.ip, limit, opts.now().getTime());
        if (retryS === undefined) return;
        return sendError(
          reply,
          429,
          'rate_limited',
          `token exchanges are limited to ${limit.max} per ${limit.windowMs / 1000} s per address; retry after ${retryS} s`,
          retryS,
        );
      },
      schema: {
        operationId: 'oauth_token_exchange',
        summary: "Exchange a CI job's OIDC ID token for a short-lived signer key (RFC 8693 token exchange)",
        description:
          "The tenant's trust rules decide (docs/ci.md). Errors follow RFC 6749 §5.2; invalid_grant says which check " +
          'failed. No IdP needs to be configured.',
        tags: ['oauth'],
        consumes: ['application/x-www-form-urlencoded'],
        body: TokenExchangeRequest,
        security: [],
        response: {
          200: TokenExchangeResponse,
          400: oauthError('invalid_request, unsupported_grant_type, invalid_grant'),
          429: oauthError('rate_limited'),
          503: oauthError('temporarily_unavailable'),
        },
      },
    },
    async (request, reply) => {
      const body = request.body;
      if (body.grant_type !== TOKEN_EXCHANGE_GRANT) {
        throw new ExchangeError(
          'unsupported_grant_type',
          400,
          `grant_type must be ${TOKEN_EXCHANGE_GRANT} (the only grant this endpoint serves)`,
        );
      }
      if (!SUBJECT_TOKEN_TYPES.includes(body.subject_token_type)) {
        throw new ExchangeError(
          'invalid_request',
          400,
          `subject_token_type must be ${SUBJECT_TOKEN_TYPES.join(' or ')}`,
        );
      }
      const issued = await opts.exchange.exchange(body.subject_token, body.tenant_id);
      const expiresIn = Math.round((issued.expiresAt.getTime() - issued.issuedAt.getTime()) / 1000);
      return reply.header('cache-control', 'no-store').header('pragma', 'no-cache').send({
        access_token: issued.accessToken,
        issued_token_type: ISSUED_TOKEN_TYPE,
        token_type: 'Bearer',
        expires_in: expiresIn,
        expires_at: issued.expiresAt.toISOString(),
        tenant_id: issued.tenantId,
        role: issued.role,
      });
    },
  );
}
