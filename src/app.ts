// The HTTP application, separate from the process that runs it (server.ts): tests build it with their own
// store and key store and call it with inject() or over a real socket.

import swagger from '@fastify/swagger';
import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify';
import { handleError } from './api/error-handler.js';
import {
  clientErrorHandler,
  frameworkErrors,
  notFoundOrWrongMethod,
  parseJsonBody,
  refuseWhileClosing,
} from './api/http-strict.js';
import { IDEMPOTENCY_LIFETIME_MS } from './api/idempotency.js';
import { registerKmsApis } from './api/kms-apis.js';
import { instrumentApp } from './api/request-metrics.js';
import { healthRoutes } from './api/routes/health.js';
import { logRoutes } from './api/routes/log.js';
import { type OAuthOptions, oauthRoutes } from './api/routes/oauth.js';
import { oauthTokenRoutes } from './api/routes/oauth-token.js';
import { trialRoutes } from './api/routes/trial.js';
import { type TsaAccess, tsaRoutes } from './api/routes/tsa.js';
import { v1Routes } from './api/routes/v1.js';
import { NAMED_SCHEMAS } from './api/schemas.js';
import { CREDENTIAL_QUERY_PARAMETERS } from './auth/credential-echo.js';
import { type IssuerKeySettings, IssuerKeys } from './auth/workload/issuer-keys.js';
import { TokenExchange } from './auth/workload/token-exchange.js';
import type { WorkloadSettings } from './auth/workload/workload-settings.js';
import { type Deliver, type DispatcherSettings, EventDispatcher } from './events/dispatcher.js';
import { EventBuilder } from './events/event-builder.js';
import { eventSweeps, type SweepSettings } from './events/event-sweeps.js';
import type { WebhookSendSettings } from './events/webhook-sender.js';
import { type KeyStore, KeyStores } from './keys/key-store.js';
import { sealerAmong } from './keys/sealer.js';
import { type KmsApiSettings, kmsApiSetting } from './kms-api/kms-api-settings.js';
import type { ServiceMetrics } from './metrics/service-metrics.js';
import type { PolicyEngine } from './policy/policy.js';
import { Pruner } from './retention/pruner.js';
import { RETENTION_DEFAULTS, type RetentionSettings } from './retention/retention-settings.js';
import { ExceptionService } from './signing/exception-service.js';
import { KeyImportService } from './signing/key-import-service.js';
import { defaultPolicy } from './signing/policy-settings.js';
import { expireOverdueRequests } from './signing/request-expiry.js';
import { DEFAULT_APPROVAL_RETRY_WINDOW_MS, SigningService } from './signing/signing-service.js';
import type { StoredCheckpoint } from './store/log/log-store.js';
import type { Store } from './store/store.js';
import { LogOriginError, LogService, type LogSettings } from './transparency/log-service.js';
import { Witnesses } from './transparency/witnesses/witnesses.js';
import type { ClockTrust } from './tsa/clock-trust.js';
import { TsaService, type TsaServiceSettings } from './tsa/tsa-service.js';
import type { AnonymousQuota } from './tsa/tsa-settings.js';
import { consoleRoutes } from './web/console.js';

export interface AppOptions {
  store: Store;
  keyStore: KeyStore | KeyStores;
  /** Default: the built-in default policy (src/signing/policy-settings.ts). */
  policy?: PolicyEngine;
  /** Test seam (src/signing/tenant-keys.ts): awaited before a signing request reads the tenant's current key. */
  beforeSigningKeyRead?: (tenantId: string) => Promise<void>;
  /** Lifetime of pending signing requests (default 24 h). */
  approvalLifetimeMs?: number;
  /** How long a retry of a rejected or approved request gets that outcome again (default 10 min). */
  approvalRetryWindowMs?: number;
  /** Longest allowed policy-exception lifetime (default 90 days). */
  exceptionMaxLifetimeMs?: number;
  /** The clock; tests control it to expire approvals and exceptions. */
  now?: () => Date;
  logger?: FastifyServerOptions['logger'];
  /** Largest accepted request body; SBOMs ride in `sign` requests, so the default is generous. */
  bodyLimit?: number;
  /**
   * Time for a whole request (headers and body) to arrive (default 60 s, DEFAULT_REQUEST_TIMEOUT_MS); a request still
   * arriving then gets 408 request_timeout and its connection closes. Checked every quarter of it (at most every
   * 30 s), so the cut comes between 1 and 1.25 times this after the request began.
   */
  requestTimeoutMs?: number;
  /** Proxy addresses/CIDRs whose X-Forwarded-For is believed (config.ts: never every hop). */
  trustProxy?: readonly string[];
  trial?: { enabled: boolean; max: number; windowMs: number };
  /** The drop-in AWS KMS, STS and Vault transit endpoints (docs/kms-api.md); default: on, 30 s held wait. */
  kmsApi?: KmsApiSettings;
  /** Production server URL template for the OpenAPI document; `{region}` is a server variable. */
  publicUrl?: string;
  localUrl?: string;
  /** Counts requests and signatures for /metrics (served apart from the API, src/metrics/metrics-server.ts). */
  metrics?: ServiceMetrics;
  /** Sign-in through the organisation's IdP (docs/oauth.md); without `oidc` the /oauth endpoints answer 503. */
  oauth?: Pick<OAuthOptions, 'oidc' | 'publicUrl' | 'sessions' | 'codeEntryLimit' | 'deviceStartLimit'>;
  /** The CI token exchange, POST /oauth/token (docs/ci.md); defaults: no allow-list, 3600 s token age, 60 s leeway. */
  workload?: Partial<WorkloadSettings> & {
    /** Exchanges an address may ask for per window (default 60 per minute). */
    exchangeLimit?: { max: number; windowMs: number };
    /** Issuer key caching (tests shorten or show it); defaults in issuer-keys.ts. */
    keys?: Omit<IssuerKeySettings, 'allow' | 'extraCaPem'>;
  };
  /**
   * Deliver events (docs/events.md): a dispatcher runs while the app is up. Without it events are still written
   * to the outbox, for an instance that delivers.
   */
  eventDelivery?: { deliver: Deliver; settings?: DispatcherSettings; sweeps?: SweepSettings };
  /**
   * Where webhooks may be sent (config webhooks.*): the console checks a new subscription's URL with it. Default:
   * no allow list (https to public addresses only).
   */
  webhooks?: WebhookSendSettings;
  /**
   * The transparency log over the audit entries (docs/transparency.md): its key, integrator and /log endpoints.
   * Without it there are no /log endpoints and nothing integrates (another instance may).
   */
  log?: LogSettings;
  /** The time-stamping authority (docs/tsa.md); absent: no /tsa routes. */
  tsa?: TsaAppOptions;
  /**
   * Prune what the contract lets go (docs/deployment.md, "Retention"), with these settings over RETENTION_DEFAULTS.
   * Absent: this app prunes nothing (the server always passes its configuration's).
   */
  retention?: Partial<RetentionSettings>;
  /**
   * Whether this app runs the instance's background passes: the event dispatcher and its sweeps, the log
   * integrator, the pruner (default true). A request worker (src/workers/) runs none of them: its primary runs each
   * once for the instance. Its events and log entries are still written, for the primary to deliver and integrate.
   */
  background?: boolean;
  /**
   * With `background: false`: how this app tells the process that runs the passes that it wrote work for them
   * (events to deliver, audit entries to integrate), so that they take it now rather than at their next poll.
   */
  wakeBackground?: (pass: BackgroundPass) => void;
}

/** A background pass a request worker wakes in its primary (AppOptions.wakeBackground). */
export type BackgroundPass = 'events' | 'log';

export interface TsaAppOptions extends TsaServiceSettings {
  clock: ClockTrust;
  access: TsaAccess;
  allowNetworks: readonly string[];
  limit: { max: number; windowMs: number };
  /** Daily quotas of anonymous queries (access `anonymous`); absent: none (the server always passes its own). */
  anonymousQuota?: AnonymousQuota;
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The event dispatcher, when the app delivers events (AppOptions.eventDelivery). */
    eventDispatcher?: EventDispatcher;
    /** The transparency log, when the app runs one (AppOptions.log). */
    transparencyLog?: LogService;
    /** The pruner, when the app prunes (AppOptions.retention). */
    pruner?: Pruner;
  }
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

/**
 * Query parameters that carry secrets (the device flow's poll and user code, the IdP's callback): never logged with
 * the URL, also not percent-encoded inside another parameter (the sign-in's `return_to=%2Foauth%2Fdevice%3Fuser_code
 * %3D...`). Also the credentials a client may put in a query string where none is accepted
 * (src/auth/credential-echo.ts): the request is refused, and its URL is still logged.
 */
const SECRET_QUERY = new RegExp(
  `((?:[?&]|%3F|%26)(?:${['device_code', 'user_code', 'code', 'state', ...CREDENTIAL_QUERY_PARAMETERS].join('|')})(?:=|%3D))(?:(?!%26)[^&#])*`,
  'gi',
);

/** Default of AppOptions.requestTimeoutMs. */
export const DEFAULT_REQUEST_TIMEOUT_MS = 60_000;
/** HSTS for a public URL on https: a year, this host only (subdomains may be other services). */
const HSTS = 'max-age=31536000';

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
  const requestTimeout = opts.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
  const securityHeaders = responseSecurityHeaders(opts.oauth?.publicUrl ?? opts.publicUrl);
  const app = Fastify({
    logger: opts.logger ?? false,
    bodyLimit: opts.bodyLimit ?? 4 * 1024 * 1024,
    // A body that trickles in (slowloris) holds a connection and a request: cut after requestTimeout. Node checks
    // running requests every connectionsCheckingInterval (30 s by default), hence a quarter of the timeout. With a
    // headersTimeout longer than requestTimeout (fastify sets only the latter) Node 20 was seen never to cut a
    // trickling body, so both are set as Node's own default pairs them (test/api/strict-http.test.ts).
    requestTimeout,
    http: {
      requestTimeout,
      headersTimeout: Math.min(60_000, requestTimeout),
      connectionsCheckingInterval: Math.max(50, Math.min(30_000, Math.floor(requestTimeout / 4))),
    },
    trustProxy: opts.trustProxy && opts.trustProxy.length > 0 ? [...opts.trustProxy] : false,
    // Requests during shutdown and client errors get ErrorResponse bodies (api/http-strict.ts), not fastify's.
    return503OnClosing: false,
    clientErrorHandler: clientErrorHandler(securityHeaders),
    frameworkErrors,
    requestIdHeader: false,
    genReqId: () => crypto.randomUUID(),
    ajv: {
      // Strict JSON: no silent type coercion, and unknown fields are errors rather than silently dropped.
      customOptions: { coerceTypes: false, removeAdditional: false, useDefaults: false, allErrors: false },
    },
  });

  app.setErrorHandler(handleError);
  app.setNotFoundHandler(notFoundOrWrongMethod(app));
  // JSON only: fastify's text/plain parser would hand a string to the schema (a 400 instead of 415).
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'string' }, parseJsonBody);
  // Set when the request arrives (a synchronous hook: an async onSend cost a promise per reply), before any other
  // hook can answer: every answer keeps them, errors, 404s and the refusals while closing included.
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id);
    reply.headers(securityHeaders());
    done();
  });
  refuseWhileClosing(app);
  for (const schema of NAMED_SCHEMAS) app.addSchema(schema);
  if (opts.metrics) instrumentApp(app, opts.metrics);

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
              'AWS Signature Version 4. The drop-in AWS KMS endpoint (POST /) verifies it itself, with an ' +
              'AWS-format API key or STS temporary credentials (docs/kms-api.md); on the /v1 actions it is for ' +
              'deployments behind an API gateway that verifies it, the server itself accepting bearerAuth there ' +
              '(docs/api.md).',
            'x-amazon-apigateway-authtype': 'awsSigv4',
          } as never,
        },
      },
    },
    refResolver: { buildLocalReference: (json, _baseUri, _fragment, i) => String(json.$id ?? `def-${i}`) },
  });

  const now = opts.now ?? (() => new Date());
  // Events tell of changes (docs/events.md); their console links use the public URL.
  const events = new EventBuilder(opts.store, opts.oauth?.publicUrl ?? opts.publicUrl);
  // Periodic passes (the dispatcher, its sweeps, the log integrator) run on the background store; Store.background
  // says why.
  const background = opts.store.background();
  const signing = new SigningService({
    store: opts.store,
    events,
    keyStore: opts.keyStore,
    policy: opts.policy ?? defaultPolicy(opts.store),
    now,
    ...(opts.approvalLifetimeMs !== undefined && { approvalLifetimeMs: opts.approvalLifetimeMs }),
    ...(opts.approvalRetryWindowMs !== undefined && { approvalRetryWindowMs: opts.approvalRetryWindowMs }),
    ...(opts.metrics && { onSignOutcome: opts.metrics.signOutcome.bind(opts.metrics) }),
    ...(opts.beforeSigningKeyRead && { beforeSigningKeyRead: opts.beforeSigningKeyRead }),
  });
  const exceptions = new ExceptionService(opts.store, opts.exceptionMaxLifetimeMs ?? 90 * 86_400_000, now, events);
  const keyImports = new KeyImportService({ store: opts.store, keyStore: opts.keyStore, now, events });
  const runsBackground = opts.background !== false;
  const wake = runsBackground ? undefined : opts.wakeBackground;
  if (wake) {
    opts.store.events.onWritten = () => wake('events');
    background.events.onWritten = () => wake('events');
  }
  if (opts.eventDelivery && runsBackground) {
    const { deliver, settings, sweeps } = opts.eventDelivery;
    const dispatcher = new EventDispatcher(
      background,
      deliver,
      { onError: (message) => app.log.warn(message), ...settings },
      now,
      eventSweeps(background, events, (iso) => expireOverdueRequests(background, events, iso), sweeps, now),
      // signature.signed read from the log, with the console's links (docs/events.md).
      (entry) => events.signedFromLog(entry),
    );
    app.decorate('eventDispatcher', dispatcher);
    opts.store.events.onWritten = () => dispatcher.nudge();
    background.events.onWritten = () => dispatcher.nudge();
    app.addHook('onReady', async () => dispatcher.start());
    // Before the store closes (onClose): a pass under way finishes; what it leased and did not send is taken
    // over by another instance, or by this one after a restart, once the leases end.
    app.addHook('preClose', async () => dispatcher.stop());
  }
  if (opts.log) {
    // Set below once the witnesses exist (they need the log for their consistency proofs).
    let onPublished: ((checkpoint: StoredCheckpoint) => void) | undefined;
    let witnessesToAwait: (() => readonly string[]) | undefined;
    const log = new LogService({
      onPublished: (checkpoint) => onPublished?.(checkpoint),
      witnessesToAwait: () => witnessesToAwait?.() ?? [],
      ...(wake && { integratesElsewhere: () => wake('log') }),
      store: background.log,
      keyStores: KeyStores.of(opts.keyStore),
      // Keeps the log's Ed25519 key sealed, as the software key store keeps its keys.
      sealer: sealerAmong(KeyStores.of(opts.keyStore).stores),
      settings: opts.log,
      ...(typeof opts.publicUrl === 'string' && { publicUrl: opts.publicUrl }),
      now,
      onIntegrityFailure: (message) => {
        app.log.error({ transparencyLog: 'refused' }, message);
        opts.metrics?.logIntegrityFailure();
      },
      onError: (message) => app.log.warn(message),
      // The verifier key is what verifiers pin (docs/transparency.md): the entry says which key the log began with.
      onKeyCreated: async (record, verifierKey) => {
        await opts.store.audit.append({
          at: now().toISOString(),
          tenantId: null,
          actor: 'service',
          action: 'log_key_create',
          outcome: 'created',
          details: {
            origin: record.origin,
            key_store: record.keyStore,
            key_spec: record.keySpec,
            verifier_key: verifierKey,
          },
        });
      },
    });
    app.decorate('transparencyLog', log);
    if (opts.log.witnesses && opts.log.witnesses.length > 0) {
      const witnesses = new Witnesses(opts.log.witnesses, {
        store: background.log,
        consistency: (from, to) => log.consistency(from, to),
        onProblem: (witness, message) => app.log.warn({ witness }, `transparency log witness: ${message}`),
        onCosigned: () => log.witnessCosigned(),
      });
      onPublished = (checkpoint) => witnesses.offer(checkpoint);
      witnessesToAwait = () => witnesses.awaited();
      app.addHook('preClose', async () => witnesses.stop());
    }
    opts.store.audit.onAppended = () => log.nudge();
    // The key is made (or checked against log.origin) before the service answers: a wrong origin stops the start.
    // A key store that cannot make the key now does not: signing may still work, and every pass tries again.
    app.addHook('onReady', async () => {
      await log.ensureKey().catch((err) => {
        if (err instanceof LogOriginError) throw err;
        app.log.warn(`transparency log: no log key yet (${(err as Error).message}); retrying in the background`);
      });
      if (runsBackground) log.start();
    });
    app.addHook('preClose', async () => log.stop());
    await app.register(logRoutes, { store: opts.store, log, now });
  }
  if (opts.retention && runsBackground) {
    const pruner = new Pruner(background, {
      settings: { ...RETENTION_DEFAULTS, ...opts.retention },
      floors: {
        // The dispatcher's own default when none is given (src/events/dispatcher.ts, retryForMs).
        retryForMs: opts.eventDelivery?.settings?.retryForMs ?? 24 * 3600_000,
        approvalRetryWindowMs: opts.approvalRetryWindowMs ?? DEFAULT_APPROVAL_RETRY_WINDOW_MS,
        idempotencyLifetimeMs: IDEMPOTENCY_LIFETIME_MS,
      },
      now,
      onPruned: (counts, ms) => {
        app.log.info({ pruned: counts, ms: Math.round(ms) }, 'retention: pruned finished rows');
        opts.metrics?.pruned(counts);
      },
      onError: (message) => app.log.warn(message),
    });
    app.decorate('pruner', pruner);
    app.addHook('onReady', async () => {
      if (!pruner.enabled) return;
      const { eventsMs, requestsMs, idempotencyMs } = pruner.retention;
      app.log.info(
        {
          retention: {
            events_hours: eventsMs / 3600_000,
            requests_hours: requestsMs / 3600_000,
            idempotency_hours: idempotencyMs / 3600_000,
          },
        },
        'retention: pruning finished rows (never the audit log or the transparency log)',
      );
      pruner.start();
    });
    app.addHook('preClose', async () => pruner.stop());
  }
  await app.register(v1Routes, { store: opts.store, signing, exceptions, keyImports, now, publicUrl: opts.publicUrl });
  await app.register(oauthRoutes, {
    store: opts.store,
    now,
    publicUrl: opts.publicUrl,
    ...opts.oauth,
  });
  // The CI token exchange: its own plugin, so it works without an IdP and answers RFC 6749 errors.
  const workload = opts.workload ?? {};
  const publicUrlSetting = opts.oauth?.publicUrl ?? opts.publicUrl;
  const issuerKeys = new IssuerKeys(
    {
      ...workload.keys,
      allow: workload.allow ?? [],
      ...(workload.caPem !== undefined && { extraCaPem: workload.caPem }),
    },
    now,
  );
  const exchange = new TokenExchange({
    store: opts.store,
    keys: issuerKeys,
    now,
    // The OpenAPI server template ({region}) is no audience; only a concrete URL is.
    publicUrl: () => {
      const url = typeof publicUrlSetting === 'function' ? publicUrlSetting() : publicUrlSetting;
      return url && !url.includes('{') ? url : undefined;
    },
    maxTokenAgeS: workload.maxTokenAgeSeconds ?? 3600,
    clockToleranceS: workload.clockToleranceSeconds ?? 60,
  });
  await app.register(oauthTokenRoutes, {
    store: opts.store,
    now,
    ...(workload.exchangeLimit && { limit: workload.exchangeLimit }),
    exchange,
  });
  await registerKmsApis(app, {
    store: opts.store,
    keyStore: opts.keyStore,
    signing,
    settings: opts.kmsApi ?? kmsApiSetting(undefined),
    exchange,
    now,
    publicUrl: opts.publicUrl,
    exchangeLimit: workload.exchangeLimit,
    log: app.transparencyLog,
  });
  // The web console for people (src/web/), behind the same browser session as the sign-in pages.
  await app.register(consoleRoutes, {
    prefix: '/console',
    store: opts.store,
    signing,
    exceptions,
    events,
    now,
    signInConfigured: opts.oauth?.oidc !== undefined,
    publicUrl: opts.oauth?.publicUrl ?? opts.publicUrl,
    ...(opts.oauth?.sessions && { sessions: opts.oauth.sessions }),
    personKeyMs: opts.oauth?.oidc?.personKeyMs ?? 12 * 3_600_000,
    webhooks: opts.webhooks ?? { allow: [] },
  });
  const trial = opts.trial ?? { enabled: true, max: 10, windowMs: 60 * 60 * 1000 };
  if (trial.enabled) await app.register(trialRoutes, { ...trial, store: opts.store, now });

  app.get('/api/openapi.yml', { schema: { hide: true } }, async (_request, reply) =>
    reply.type('application/yaml').send(app.swagger({ yaml: true })),
  );
  app.get('/api/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  let tsa: TsaService | undefined;
  if (opts.tsa) {
    const { clock, access, allowNetworks, limit, anonymousQuota, ...settings } = opts.tsa;
    tsa = new TsaService(opts.store, KeyStores.of(opts.keyStore), settings, clock, now);
    await app.register(tsaRoutes, {
      service: tsa,
      store: opts.store,
      access,
      allowNetworks,
      limit,
      ...(anonymousQuota && { anonymousQuota }),
      now,
    });
  }
  await app.register(healthRoutes, {
    store: opts.store,
    keyStore: opts.keyStore,
    ...(tsa && { clock: tsa.clock, tsaInUse: () => (tsa as TsaService).inUse() }),
  });

  return app;
}

/**
 * Headers on every answer: `nosniff` (a browser never reads an answer as another type than it says), and HSTS when
 * the public URL is https (browsers then never use plain http for it). `publicUrl` is a function only in tests.
 */
function responseSecurityHeaders(publicUrl: string | (() => string) | undefined): () => Record<string, string> {
  const plain = { 'x-content-type-options': 'nosniff' };
  const withHsts = { ...plain, 'strict-transport-security': HSTS };
  if (typeof publicUrl === 'function') return () => (publicUrl().startsWith('https:') ? withHsts : plain);
  const headers = publicUrl?.startsWith('https:') ? withHsts : plain;
  return () => headers;
}
