// POST /trial/sign: no account, rate-limited per client IP, signs with the published test key or mocks.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { decodeBase64Field } from '../../crypto/encoding.js';
import { ApiError } from '../../errors.js';
import { TRIAL_MOCK_SIGNATURE, TrialSigner } from '../../trial/trial-signer.js';
import { documented, errorResponse } from '../responses.js';
import { TrialRequest, TrialResponse } from '../schemas.js';

export interface TrialOptions {
  /** Requests per window per client IP (contract: 10 per hour). */
  max: number;
  windowMs: number;
}

export async function trialRoutes(app: FastifyInstance, opts: TrialOptions): Promise<void> {
  const signer = new TrialSigner();
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/trial/sign',
    {
      config: {
        rateLimit: {
          max: opts.max,
          timeWindow: opts.windowMs,
          keyGenerator: (request) => request.ip,
          errorResponseBuilder: (_request, context) =>
            new ApiError(
              'rate_limited',
              `trial limit of ${context.max} requests per ${context.after} reached for this address; retry later`,
            ),
        },
      },
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
