// The HTTP application, separate from the process that runs it (server.ts): tests build it with their own
// store and key store and call it with inject() or over a real socket.
import rateLimit from '@fastify/rate-limit';
import swagger from '@fastify/swagger';
import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify';
import { handleError } from './api/error-handler.js';
import { type OAuthOptions, oauthRoutes } from './api/routes/oauth.js';
import { trialRoutes } from './api/routes/trial.js';
import { v1Routes } from './api/routes/v1.js';
import { ErrorResponse } from './api/schemas.js';
import type { KeyStore } from './keys/key-store.js';
import { allowAll, type PolicyEngine } from './policy/policy.js';
import { ExceptionService } from './signing/exception-service.js';
import { SigningService } from './signing/signing-service.js';
import type { Store } from './store/store.js';

export interface AppOptions {
  store: Store;
  keyStore: KeyStore;
  policy?: PolicyEngine;
  /** Lifetime of pending signing requests (default 24 h). */
  approvalLifetimeMs?: number;
  /** Longest allowed policy-exception lifetime (default 90 days). */
  exceptionMaxLifetimeMs?: number;
  /** The clock; tests control it to expire approvals and exceptions. */
  now?: () => Date;
  logger?: FastifyServerOptions['logger'];
  /** Largest accepted request body; SBOMs ride in `sign` requests, so the default is generous. */
  bodyLimit?: number;
  trustProxy?: boolean;
  trial?: { enabled: boolean; max: number; windowMs: number };
  /** Production server URL template for the OpenAPI document; `{region}` is a server variable. */
  publicUrl?: string;
  localUrl?: string;
  /** Sign-in through the organisation's IdP (docs/oauth.md); without `oidc` the /oauth endpoints answer 503. */
  oauth?: Pick<OAuthOptions, 'oidc' | 'publicUrl' | 'sessions' | 'codeEntryLimit' | 'deviceStartLimit'>;
}

/** Headers and fields that may carry secrets; pino replaces them with "[redacted]". */
export const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'headers.authorization',
  'body.api_key',
  'body.csrf_token',
  'api_key',
  'pin',
];

/** Query parameters that carry secrets (the device flow's poll, the IdP's callback): never logged with the URL. */
const SECRET_QUERY = /([?&](?:device_code|code|state)=)[^&]*/g;

/** pino's request serializer: fastify's fields, with the secret query parameters of the URL redacted. */
export function serializeRequest(req: { method: string; url: string; ip?: string; socket?: { remotePort?: number } }) {
  return {
    method: req.method,
    url: req.url.replace(SECRET_QUERY, '$1[redacted]'),
    remoteAddress: req.ip,
    remotePort: req.socket?.remotePort,
  };
}

export async function buildApp(opts: AppOptions): Promise<FastifyInstance> {
  const app = Fastify({
    logger: opts.logger ?? false,
    bodyLimit: opts.bodyLimit ?? 4 * 1024 * 1024,
    trustProxy: opts.trustProxy ?? false,
    requestIdHeader: false,
    genReqId: () => crypto.randomUUID(),
    ajv: {
      // Strict JSON: no silent type coercion, and unknown fields are errors rather than silently dropped.
      customOptions: { coerceTypes: false, removeAdditional: false, useDefaults: false, allErrors: false },
    },
  });

  app.setErrorHandler(handleError);
  app.setNotFoundHandler((request, reply) =>
    reply.code(404).send({ error: 'not_found', reason: `no route ${request.method} ${request.url.split('?')[0]}` }),
  );
  // Set when the request arrives (a synchronous hook: an async onSend cost a promise per reply); errors keep it.
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id);
    done();
  });
  app.addSchema(ErrorResponse);

  await app.register(swagger, {
    openapi: {
      openapi: '3.0.0',
      info: {
        title: 'signbridge signing service',
        version: '1.0.0',
        description:
          'Policy-checked signing with keys held in an HSM or KMS. Contract: SIGNING-API.md; additions: docs/api.md.',
      },
      servers: [
        {
          url: opts.publicUrl ?? 'https://signbridge.{region}.example.com',
          description: 'production',
          variables: { region: { default: 'us-east-1', description: 'deployment region' } },
        },
        { url: opts.localUrl ?? 'http://127.0.0.1:8080', description: 'local development' },
      ],
      components: {
        securitySchemes: {
          bearerAuth: {
            type: 'http',
            scheme: 'bearer',
            description: 'API key from OAuth sign-in or `signbridge admin`',
          },
          sigv4: {
            type: 'apiKey',
            in: 'header',
            name: 'Authorization',
            description:
              'Cloud request signature (SigV4-style), for deployments behind an API gateway that verifies it. ' +
              'The signbridge server itself accepts only bearerAuth (docs/api.md).',
            'x-amazon-apigateway-authtype': 'awsSigv4',
          } as never,
        },
      },
    },
    refResolver: { buildLocalReference: (json, _baseUri, _fragment, i) => String(json.$id ?? `def-${i}`) },
  });

  await app.register(rateLimit, { global: false });

  const now = opts.now ?? (() => new Date());
  const signing = new SigningService({
    store: opts.store,
    keyStore: opts.keyStore,
    policy: opts.policy ?? allowAll,
    now,
    ...(opts.approvalLifetimeMs !== undefined && { approvalLifetimeMs: opts.approvalLifetimeMs }),
  });
  const exceptions = new ExceptionService(opts.store, opts.exceptionMaxLifetimeMs ?? 90 * 86_400_000, now);
  await app.register(v1Routes, { store: opts.store, signing, exceptions, now });
  await app.register(oauthRoutes, {
    store: opts.store,
    now,
    publicUrl: opts.publicUrl,
    ...opts.oauth,
  });
  const trial = opts.trial ?? { enabled: true, max: 10, windowMs: 60 * 60 * 1000 };
  if (trial.enabled) await app.register(trialRoutes, trial);

  app.get('/api/openapi.yml', { schema: { hide: true } }, async (_request, reply) =>
    reply.type('application/yaml').send(app.swagger({ yaml: true })),
  );
  app.get('/api/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  app.get('/healthz', { schema: { hide: true } }, async () => ({ status: 'ok' }));
  app.get('/readyz', { schema: { hide: true } }, async (request, reply) => {
    const checks = await Promise.allSettled([opts.store.ping(), opts.keyStore.ping()]);
    const [store, keyStore] = checks.map((c) => (c.status === 'fulfilled' ? 'ok' : 'unavailable'));
    const ready = store === 'ok' && keyStore === 'ok';
    if (!ready) request.log.warn({ checks }, 'not ready');
    return reply.code(ready ? 200 : 503).send({ status: ready ? 'ready' : 'not_ready', store, key_store: keyStore });
  });

  return app;
}
