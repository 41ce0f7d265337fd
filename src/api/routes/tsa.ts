// RFC 3161 over HTTP (docs/tsa.md): POST /tsa (the service's TSA) and POST /tsa/<tenant> (a tenant's own identity)
// take application/timestamp-query and answer application/timestamp-reply, as osslsigncode -ts, jarsigner -tsa,
// signtool /tr and openssl ts expect; GET /tsa/chain.pem (and /tsa/<tenant>/chain.pem) serve the chain.
//
// Every TimeStampResp goes out as HTTP 200, rejections included: the status travels inside it (RFC 3161 §3.4) and
// the clients read it from there (jarsigner prints the failure bit's meaning). HTTP errors are for what is not a
// TSA answer: a wrong content type (415), too large (413), not allowed (403/401), too many (429), and no token
// possible now (503 time_source_unavailable, key_store_unavailable, store_unavailable; with Retry-After).
import { BlockList } from 'node:net';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ApiError } from '../../errors.js';
import { addCidr, unmapped } from '../../net/outbound-request.js';
import { type Counter, counterKey } from '../../store/records/counter-names.js';
import type { Store } from '../../store/store.js';
import { clientNetwork } from '../../tsa/client-network.js';
import type { TsaService } from '../../tsa/tsa-service.js';
import type { AnonymousQuota } from '../../tsa/tsa-settings.js';
import { authenticate } from '../authenticate.js';
import { errorResponse } from '../responses.js';
import { TENANT_ID_PATTERN } from '../schemas.js';

export const TSA_QUERY_TYPE = 'application/timestamp-query';
export const TSA_REPLY_TYPE = 'application/timestamp-reply';
/** A query is 60-100 bytes; the parser refuses over 4 KiB with badRequest, HTTP refuses over this with 413. */
const TSA_BODY_LIMIT = 8 * 1024;

export type TsaAccess = 'anonymous' | 'api-key';

export interface TsaRouteOptions {
  service: TsaService;
  store: Store;
  access: TsaAccess;
  /** Client addresses or CIDRs allowed to ask; empty: everyone. */
  allowNetworks: readonly string[];
  /** Queries per window per client address or IPv6 /64 (counters in the store, shared by every instance). */
  limit: { max: number; windowMs: number };
  /** Anonymous queries per day, per address or /64 and in all (access `anonymous`); absent: no daily quota. */
  anonymousQuota?: AnonymousQuota;
  now: () => Date;
}

function networkCheck(allow: readonly string[]) {
  if (allow.length === 0) return undefined;
  const list = new BlockList();
  for (const entry of allow) addCidr(list, entry);
  return async (request: FastifyRequest): Promise<void> => {
    const { address, type } = unmapped(request.ip);
    if (!list.check(address, type)) {
      throw new ApiError('forbidden', `time-stamping is not offered to ${request.ip} (tsa.allowNetworks)`);
    }
  };
}

function rateLimit(store: Store, limit: TsaRouteOptions['limit'], now: () => Date) {
  return async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    const nowMs = now().getTime();
    // Their own counter name, so time-stamping and the trial endpoint do not share an address's budget.
    const network = clientNetwork(request.ip);
    const resetS = await overLimit(store, 'tsaQueries', [network], limit.max, limit.windowMs, nowMs);
    if (resetS !== undefined) {
      reply.header('retry-after', resetS);
      throw new ApiError(
        'rate_limited',
        `time-stamping limit of ${limit.max} queries per ${limit.windowMs / 1000} s reached for ${network}; retry after ${resetS} s`,
      );
    }
  };
}

const DAY_MS = 86_400_000;

/**
 * tsa.anonymous: every anonymous token is an audit entry kept for good, so anonymous time-stamping has a daily
 * budget per address (or /64) and in all; the address's is counted first, so one client cannot spend the rest's.
 */
function anonymousDailyQuota(store: Store, quota: AnonymousQuota, now: () => Date) {
  return async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    const nowMs = now().getTime();
    const network = clientNetwork(request.ip);
    const own = await overLimit(store, 'tsaAnonymousDaily', [network], quota.perAddress, DAY_MS, nowMs);
    const all = own ?? (await overLimit(store, 'tsaAnonymousDailyTotal', [], quota.perDay, DAY_MS, nowMs));
    if (all === undefined) return;
    reply.header('retry-after', all);
    throw new ApiError(
      'rate_limited',
      own !== undefined
        ? `anonymous time-stamping quota of ${quota.perAddress} queries a day reached for ${network}; retry after ${all} s, or ask the operator for an API key`
        : `this service's anonymous time-stamping quota of ${quota.perDay} queries a day is spent; retry after ${all} s, or ask the operator for an API key`,
    );
  };
}

/** Counts one query against `counter` of `of`; the seconds until the window ends when it is over `max`. */
async function overLimit(
  store: Store,
  counter: Counter,
  of: string[],
  max: number,
  windowMs: number,
  nowMs: number,
): Promise<number | undefined> {
  const { count, windowStartMs } = await store.requestCounts.count(counterKey(counter, ...of), nowMs, windowMs);
  if (count <= max) return undefined;
  return Math.max(1, Math.ceil((windowStartMs + windowMs - nowMs) / 1000));
}

/** tsa.access api-key: a query without a key is told that anonymous time-stamping is off, not just 401. */
async function keyRequired(request: FastifyRequest): Promise<void> {
  if (request.headers.authorization === undefined) {
    throw new ApiError(
      'unauthorized',
      'anonymous time-stamping is off on this service (tsa.access: api-key): send Authorization: Bearer <API key>',
    );
  }
}

const tenantParams = {
  type: 'object',
  properties: { tenant: { type: 'string', pattern: TENANT_ID_PATTERN } },
  required: ['tenant'],
} as const;

const replyContent = {
  description:
    'a TimeStampResp (RFC 3161 §2.4.2), DER: granted, or a rejection whose PKIFailureInfo says why (badAlg, badRequest, badDataFormat, unacceptedPolicy, unacceptedExtension)',
  content: { [TSA_REPLY_TYPE]: { schema: { type: 'string', format: 'binary' } } },
};

export async function tsaRoutes(app: FastifyInstance, opts: TsaRouteOptions): Promise<void> {
  // This plugin's routes only: the rest of the API stays JSON-only.
  app.addContentTypeParser(TSA_QUERY_TYPE, { parseAs: 'buffer', bodyLimit: TSA_BODY_LIMIT }, (_request, body, done) =>
    done(null, body),
  );
  const checks = [
    networkCheck(opts.allowNetworks),
    ...(opts.access === 'api-key' ? [keyRequired, authenticate(opts.store, opts.now)] : []),
    rateLimit(opts.store, opts.limit, opts.now),
    opts.access === 'anonymous' && opts.anonymousQuota
      ? anonymousDailyQuota(opts.store, opts.anonymousQuota, opts.now)
      : undefined,
  ].filter((check) => check !== undefined);

  const answer = async (scope: string, request: FastifyRequest, reply: FastifyReply) => {
    if (opts.access === 'api-key' && scope !== '' && request.caller?.tenantId !== null) {
      if (request.caller?.tenantId !== scope) {
        throw new ApiError('forbidden', `this API key belongs to another tenant and may not use ${scope}'s TSA`);
      }
    }
    if (!Buffer.isBuffer(request.body)) {
      throw new ApiError('unsupported_media_type', `send the query as Content-Type: ${TSA_QUERY_TYPE}`);
    }
    const { reply: body, granted } = await opts.service.timestamp(scope, request.body, {
      address: request.ip,
      ...(request.caller && { apiKeyId: request.caller.id }),
    });
    if (!granted) request.log.info({ tsa: scope || 'service' }, 'time-stamp query rejected');
    return reply.type(TSA_REPLY_TYPE).header('cache-control', 'no-store').send(body);
  };
  const postSchema = (tenant: boolean) => ({
    operationId: tenant ? 'tsa_timestamp_tenant' : 'tsa_timestamp',
    summary: tenant
      ? "RFC 3161 time-stamp from a tenant's own TSA identity"
      : "RFC 3161 time-stamp from the service's TSA (osslsigncode -ts, jarsigner -tsa, signtool /tr, openssl ts)",
    tags: ['tsa'],
    security: opts.access === 'api-key' ? [{ bearerAuth: [] }] : [],
    consumes: [TSA_QUERY_TYPE],
    ...(tenant && { params: tenantParams }),
    response: {
      200: replyContent,
      ...Object.fromEntries([400, 401, 403, 413, 415, 429, 503].map((status) => [status, errorResponse(status)])),
    },
  });
  const chainSchema = (tenant: boolean) => ({
    operationId: tenant ? 'tsa_chain_tenant' : 'tsa_chain',
    summary: tenant ? "The tenant TSA's certificate chain (PEM)" : "The service TSA's certificate chain (PEM)",
    tags: ['tsa'],
    security: [],
    ...(tenant && { params: tenantParams }),
    response: {
      200: {
        description: 'the TSA certificate first, then the CAs above it',
        content: { 'application/pem-certificate-chain': { schema: { type: 'string' } } },
      },
      ...Object.fromEntries([400, 503].map((status) => [status, errorResponse(status)])),
    },
  });

  app.post('/tsa', { onRequest: checks, schema: postSchema(false) }, (request, reply) => answer('', request, reply));
  app.post<{ Params: { tenant: string } }>(
    '/tsa/:tenant',
    { onRequest: checks, schema: postSchema(true) },
    (request, reply) => answer(request.params.tenant, request, reply),
  );
  app.get('/tsa/chain.pem', { schema: chainSchema(false) }, async (_request, reply) =>
    reply.type('application/pem-certificate-chain').send(await opts.service.chainPem('')),
  );
  app.get<{ Params: { tenant: string } }>(
    '/tsa/:tenant/chain.pem',
    { schema: chainSchema(true) },
    async (request, reply) =>
      reply.type('application/pem-certificate-chain').send(await opts.service.chainPem(request.params.tenant)),
  );
}
