// The service process: opens the configured store and key store, serves the app, shuts down gracefully. With
// request workers (src/workers/) each process builds its part of the same service from the pieces below.

import type { FastifyInstance } from 'fastify';
import { type BackgroundPass, buildApp, REDACT_PATHS, serializeRequest } from './app.js';
import { BusyPoll } from './busy-poll.js';
import type { ServiceConfig } from './config/config.js';
import { destinationsFor } from './events/destinations.js';
import type { KeyStores } from './keys/key-store.js';
import { Pkcs11KeyStore } from './keys/pkcs11/pkcs11-key-store.js';
import { startMetricsServer } from './metrics/metrics-server.js';
import { ServiceMetrics } from './metrics/service-metrics.js';
import { openStores } from './open-stores.js';
import { policySettings, policySource } from './signing/policy-settings.js';
import { startStep } from './start-timing.js';
import type { CommitSink } from './store/commit/commit-sink.js';
import type { Store } from './store/store.js';
import { ClockTrust } from './tsa/clock-trust.js';

export interface RunningServer {
  app: FastifyInstance;
  url: string;
  /** The /metrics URL, when config.metrics asks for it. */
  metricsUrl?: string;
  close(): Promise<void>;
}

/** What one process of the service does (src/workers/ runs a primary and its request workers). */
export interface ServiceRole {
  /** Takes requests: its app gets the TSA's clock and busy polling. */
  serves: boolean;
  /**
   * Runs the instance's background passes (the event dispatcher and its sweeps, the log integrator, the pruner) and
   * reports the store's gauges: once per instance.
   */
  background: boolean;
  /** On SQLite, where signature records and audit entries are committed (a request worker's primary). */
  commitSink?: CommitSink;
  /** Without the background passes: how to wake them where they run (AppOptions.wakeBackground). */
  wakeBackground?: (pass: BackgroundPass) => void;
}

/** A service process's parts, built and ready to listen. */
export interface ServiceParts {
  app: FastifyInstance;
  store: Store;
  keyStore: KeyStores;
  metrics?: ServiceMetrics;
}

/** The single process of a service without request workers: everything, listening. */
export async function startServer(config: ServiceConfig): Promise<RunningServer> {
  const parts = await buildService(config, { serves: true, background: true });
  const { app } = parts;
  await recordStart(parts, config);
  busyPollAround(parts, config);
  const metricsServer =
    parts.metrics && config.metrics
      ? await startMetricsServer(parts.metrics.registry, config.metrics, (err) =>
          app.log.error({ err }, 'metrics collection failed'),
        )
      : undefined;
  if (metricsServer) app.addHook('onClose', () => metricsServer.close());
  const url = await app.listen({ host: config.host, port: config.port }).catch(async (err) => {
    await metricsServer?.close();
    throw err;
  });
  app.log.info(
    { store: parts.store.description, keyStore: parts.keyStore.description, url, metrics: metricsServer?.url },
    'signbridge service ready',
  );
  return {
    app,
    url,
    ...(metricsServer && { metricsUrl: metricsServer.url }),
    close: () => closeServing(app),
  };
}

/** How often a closing server ends the keep-alive connections that went idle since the last look. */
const IDLE_SWEEP_MS = 50;

/**
 * Closes a listening app: requests in flight are answered, then its store and key store close. A keep-alive
 * connection whose request was in flight when the close began stays open after its answer (Node closes the idle
 * ones once, when the close begins): left alone, it held the close until the connection's keep-alive timeout, and
 * the process was ended by the 10 s shutdown limit. So they are closed as they go idle.
 */
export async function closeServing(app: FastifyInstance): Promise<void> {
  const sweep = setInterval(() => app.server.closeIdleConnections(), IDLE_SWEEP_MS);
  try {
    await app.close();
  } finally {
    clearInterval(sweep);
  }
}

/** Opens the store and the key store and builds the app on them for `role`; closing the app closes both. */
export async function buildService(config: ServiceConfig, role: ServiceRole): Promise<ServiceParts> {
  startStep('opening the stores');
  const { store, keyStore } = await openStores(
    config,
    undefined,
    role.commitSink ? { commitSink: role.commitSink } : {},
  );
  const clock =
    config.tsa.enabled && role.serves
      ? new ClockTrust(
          config.tsa.clock,
          store.databaseTime ? () => (store.databaseTime as () => Promise<Date>)() : undefined,
        )
      : undefined;
  startStep('building the app');
  const metrics = config.metrics ? new ServiceMetrics({ store, keyStore, storeGauges: role.background }) : undefined;
  const app = await buildApp({
    ...(metrics && { metrics }),
    store,
    keyStore,
    ...policySettings(config, store),
    logger: {
      level: config.logLevel,
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      serializers: { req: serializeRequest },
    },
    trial: config.trial,
    kmsApi: config.kmsApi,
    trustProxy: config.trustProxy,
    bodyLimit: config.bodyLimit,
    requestTimeoutMs: config.requestTimeoutMs,
    localUrl: `http://${config.host}:${config.port}`,
    ...(config.publicUrl !== undefined && { publicUrl: config.publicUrl }),
    ...(config.oidc && { oauth: { oidc: config.oidc } }),
    workload: config.workload,
    webhooks: config.webhooks,
    ...(clock && {
      tsa: {
        clock,
        access: config.tsa.access,
        allowNetworks: config.tsa.allowNetworks,
        limit: config.tsa.limit,
        anonymousQuota: config.tsa.anonymousQuota,
        policy: config.tsa.policy,
        acceptedPolicies: config.tsa.acceptedPolicies,
        accuracy: config.tsa.accuracy,
        tsaName: config.tsa.tsaName,
      },
    }),
    log: config.log,
    eventDelivery: {
      deliver: destinationsFor(store, config),
      settings: {
        pollMs: config.events.pollMs,
        idlePollMaxMs: config.events.idlePollMaxMs,
        leaseMs: config.events.leaseMs,
        retryForMs: config.events.retryForMs,
        pauseAfterFailingMs: config.events.pauseAfterFailingMs,
        concurrency: config.events.concurrency,
        perSubscription: config.events.concurrencyPerSubscription,
        ...(metrics && {
          onOutcome: (claim, result) => metrics.eventDelivery(claim.subscription.format, result.outcome),
        }),
      },
      sweeps: { remindBeforeMs: config.events.remindBeforeMs },
    },
    retention: config.retention,
    background: role.background,
    ...(role.wakeBackground && { wakeBackground: role.wakeBackground }),
  });
  startStep('app built');
  for (const one of keyStore.stores) {
    if (one instanceof Pkcs11KeyStore) one.onEvent = (message) => app.log.warn({ keyStore: one.description }, message);
  }
  if (clock) {
    // The first verdict before the first request; then in the background. Changes are logged: an operator must
    // hear that time-stamping stopped (or resumed).
    await clock.start((verdict) =>
      verdict.trusted
        ? app.log.info({ time_source: verdict.source }, 'time-stamping: clock trusted again')
        : app.log.error(
            { time_source: verdict.source, reason: verdict.reason },
            'time-stamping stopped: clock not trusted',
          ),
    );
    // Only where a TSA identity exists: a service that does not time-stamp has nothing to warn of.
    const timeStamps = (await store.tsa.listIdentities().catch(() => [])).length > 0;
    if (timeStamps && !clock.verdict.trusted) {
      app.log.warn(
        { reason: clock.verdict.reason },
        'time-stamping unavailable until the clock is trusted (docs/tsa.md)',
      );
    } else if (timeStamps && clock.check === 'none') {
      app.log.warn("tsa.clock.check is none: tokens state this host's time unchecked; for tests and trials only");
    }
  }
  app.addHook('onClose', async () => {
    clock?.stop();
    await keyStore.close();
    await store.close();
  });
  return { app, store, keyStore, ...(metrics && { metrics }) };
}

/**
 * Logs the policy in force and appends the `service_start` entry: once per start of an instance (its primary's,
 * with request workers).
 */
export async function recordStart({ app, store }: ServiceParts, config: ServiceConfig): Promise<void> {
  // The policy in force is part of the record: every start logs the digest of the policy document it loaded.
  const policy = policySource(config);
  app.log.info({ policy: policy.name, policy_sha256: policy.sha256 }, `policy in force: ${policy.name}`);
  await store.audit.append({
    at: new Date().toISOString(),
    tenantId: null,
    actor: 'service',
    action: 'service_start',
    outcome: 'started',
    details: {
      policy_file: policy.file,
      policy_sha256: policy.sha256,
    },
  });
}

/**
 * Keeps the loop polling while a request is handled and just after it (src/busy-poll.ts): the next request of a
 * sequential client, or a signing thread's answer, then finds a running process instead of a sleeping one.
 */
export function busyPollAround({ app, keyStore }: ServiceParts, config: ServiceConfig): void {
  const busyPoll = new BusyPoll(config.busyPollMs, { busyThreads: () => keyStore.threadsBusy?.() ?? 0 });
  app.server.on('request', (_req, res) => {
    busyPoll.touch();
    res.once('finish', () => busyPoll.touch());
  });
}
