// POST /trial/sign: no account, limited per client IP (counters in the store), signs with the published test key
// or mocks.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { decodeBase64Field } from '../../crypto/encoding.js';
import { ApiError } from '../../errors.js';
import { counterKey } from '../../store/records/counter-names.js';
import type { Store } from '../../store/store.js';
import { TRIAL_MOCK_SIGNATURE, TrialSigner } from '../../trial/trial-signer.js';
import { documented, errorResponse } from '../responses.js';
import { TrialRequest, TrialResponse } from '../schemas.js';

export interface TrialOptions {
  /** Requests per window per client IP (contract: 10 per hour). */
  max: number;
  windowMs: number;
  /** Where the counters live, so they survive a restart and are shared by every instance on the store. */
  store: Store;
  now: () => Date;
}

/** onRequest hook: counts the request against its address (request.ip: trustProxy decides it) or answers 429. */
function trialLimit(opts: TrialOptions) {
  const window = opts.windowMs % 3_600_000 === 0 ? `${opts.windowMs / 3_600_000} h` : `${opts.windowMs / 1000} s`;
  return async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    const nowMs = opts.now().getTime();
    const { count, windowStartMs } = await opts.store.requestCounts.count(
      counterKey('trial', request.ip),
      nowMs,
      opts.windowMs,
    );
    const resetS = Math.max(1, Math.ceil((windowStartMs + opts.windowMs - nowMs) / 1000));
    reply.header('x-ratelimit-limit', opts.max);
    reply.header('x-ratelimit-remaining', Math.max(0, opts.max - count));
    reply.header('x-ratelimit-reset', resetS);
    if (count > opts.max) {
      reply.header('retry-after', resetS);
      throw new ApiError(
        'rate_limited',
        `trial limit of ${opts.max} requests per ${window} reached for this address; retry after ${resetS} s`,
      );
    }
  };
}

export async function trialRoutes(app: FastifyInstance, opts: TrialOptions): Promise<void> {
  const signer = new TrialSigner();
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/trial/sign',
    {
      onRequest: trialLimit(opts),
      schema: {
        operationId: 'trial_sign',
        summary: 'Trial signing with the published test key (no account; 10 requests per hour per IP)',
        tags: ['trial'],
        security: [],
        body: TrialRequest,
        response: {
          200: documented(TrialResponse, 'the signature (real) or the mock placeholder'),
          ...Object.fromEntries([400, 413, 415, 429, 500, 503].map((status) => [status, errorResponse(status)])),
        },
      },
    },
    async (request) => {
      const digest = decodeBase64Field('hash', request.body.hash);
      if (digest.length !== 32) {
        throw new ApiError('invalid_hash', `hash must be a 32-byte SHA-256 digest, got ${digest.length} bytes`);
      }
      const mode = request.body.mode ?? 'mock';
      const algorithm = request.body.algorithm ?? 'RSASSA_PKCS1_V1_5_SHA_256';
      const signature = mode === 'real' ? signer.signSha256(digest) : TRIAL_MOCK_SIGNATURE;
      return { status: 'success' as const, mode, algorithm, signature };
    },
  );
}
