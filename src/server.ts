// The service process: opens the configured store and key store, serves the app, shuts down gracefully.

import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { buildApp, REDACT_PATHS, serializeRequest } from './app.js';
import { BusyPoll } from './busy-poll.js';
import type { Pkcs11Setting, ServiceConfig } from './config/config.js';
import { destinationsFor } from './events/destinations.js';
import { ensurePrivateDir } from './fs-private.js';
import { AwsKmsKeyStore } from './keys/aws-kms-key-store.js';
import { type KeyStore, KeyStores } from './keys/key-store.js';
import { Pkcs11KeyStore } from './keys/pkcs11-key-store.js';
import { embeddedSoftHsmOptions } from './keys/softhsm.js';
import { SoftwareKeyStore } from './keys/software-key-store.js';
import { startMetricsServer } from './metrics/metrics-server.js';
import { ServiceMetrics } from './metrics/service-metrics.js';
import { policySettings, policySource } from './signing/policy-settings.js';
import { DEFAULT_STATEMENT_TIMEOUT_MS, openPostgresStore, type PostgresStore } from './store/postgres-store.js';
import { openSqliteStore, type SqliteStoreOptions } from './store/sqlite-store.js';
import type { Store } from './store/store.js';
import { permanentConnectionProblem, storeFault } from './store/store-errors.js';
import { ClockTrust } from './tsa/clock-trust.js';

/**
 * The configured key store, with the software key store beside a PKCS#11 token: it holds the key specs the token
 * cannot (ML-DSA, SM2), sealed under a key in that token. On AWS KMS, which holds every key spec, new keys go to
 * KMS; a token that holds keys made before the move (the embedded SoftHSM token of this data dir, or the
 * configured `legacy` one) is opened behind it, so older tenants keep signing from where their keys are.
 */
export function openKeyStore(config: ServiceConfig): KeyStores {
  if (config.keyStore.type !== 'aws-kms') return new KeyStores(tokenAndSoftware(config.dataDir, config.keyStore));
  const { region, endpoint, aliasPrefix, requestTimeoutMs, maxAttempts, legacy } = config.keyStore;
  const kms = new AwsKmsKeyStore({
    ...(region !== undefined && { region }),
    ...(endpoint !== undefined && { endpoint }),
    ...(aliasPrefix !== undefined && { aliasPrefix }),
    ...(requestTimeoutMs !== undefined && { requestTimeoutMs }),
    ...(maxAttempts !== undefined && { maxAttempts }),
  });
  const older = legacy ?? (hasEmbeddedToken(config.dataDir) ? { type: 'softhsm' as const } : undefined);
  try {
    return new KeyStores([kms, ...(older ? tokenAndSoftware(config.dataDir, older) : [])]);
  } catch (err) {
    void kms.close();
    throw err;
  }
}

/** The service ran on the embedded default before: its SoftHSM token (and the keys in it) is in the data dir. */
function hasEmbeddedToken(dataDir: string): boolean {
  const tokens = join(dataDir, 'softhsm', 'tokens');
  return existsSync(tokens) && readdirSync(tokens).length > 0;
}

function tokenAndSoftware(dataDir: string, setting: Pkcs11Setting): KeyStore[] {
  const token = openPkcs11KeyStore(dataDir, setting);
  return [token, new SoftwareKeyStore(token, token.description)];
}

function openPkcs11KeyStore(dataDir: string, setting: Pkcs11Setting): Pkcs11KeyStore {
  if (setting.type === 'softhsm') {
    const { sessions, signThreads, inlineSignBelowMs } = setting;
    return Pkcs11KeyStore.open({
      ...embeddedSoftHsmOptions(dataDir),
      sessions: sessions ?? 8,
      ...(signThreads !== undefined && { signThreads }),
      ...(inlineSignBelowMs !== undefined && { inlineBelowMs: inlineSignBelowMs }),
    });
  }
  const { module, tokenLabel, pin, sessions, signThreads, inlineSignBelowMs } = setting;
  return Pkcs11KeyStore.open({
    modulePath: module,
    tokenLabel,
    pin,
    sessions: sessions ?? 8,
    ...(signThreads !== undefined && { signThreads }),
    ...(inlineSignBelowMs !== undefined && { inlineBelowMs: inlineSignBelowMs }),
  });
}

export interface OpenStoreOptions extends SqliteStoreOptions {
  /** Told while a PostgreSQL server cannot be reached yet (default: a warning on stderr). */
  onWait?: (message: string) => void;
  /**
   * For the service (and the in-process daemon): on PostgreSQL, its sessions get the configured statement timeout
   * and the role gets it as its default in the database (docs/deployment.md). Admin commands leave both alone.
   */
  service?: boolean;
}

/** Opens and migrates the configured store. A PostgreSQL server that is not reachable yet is waited for (below). */
export async function openStore(config: ServiceConfig, options: OpenStoreOptions = {}): Promise<Store> {
  ensurePrivateDir(config.dataDir);
  if (config.store.type === 'postgres') {
    const store = openPostgresStore(config.store.url, {
      ...(config.store.poolSize !== undefined && { poolSize: config.store.poolSize }),
      ...(options.service && { statementTimeoutMs: config.store.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS }),
    });
    try {
      await migrateWhenReachable(
        store,
        (config.store.waitSeconds ?? 30) * 1000,
        options.onWait ?? ((m) => process.stderr.write(`signbridge: ${m}\n`)),
      );
      if (options.service) await store.applyStatementTimeoutDefault();
    } catch (err) {
      await store.close().catch(() => undefined);
      throw err;
    }
    return store;
  }
  const store = openSqliteStore(config.store.path, options);
  await store.migrate();
  return store;
}

/** Between two attempts to reach a PostgreSQL server that is not there yet (a restart, a failover). */
const DATABASE_RETRY_MS = 2_000;

/**
 * Migrates (which also proves the connection), retrying while the server cannot be reached, with a line of
 * progress each time; after `waitMs` (SIGNBRIDGE_DATABASE_WAIT_SECONDS, default 30 s), fails with what the last
 * attempt said. Any other error (bad password, missing database, a failed migration, a protocol error such as
 * PgBouncer's "unsupported startup parameter") fails at once, with the fix when we know it: waiting would not fix it.
 */
async function migrateWhenReachable(
  store: PostgresStore,
  waitMs: number,
  onWait: (message: string) => void,
): Promise<void> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    try {
      await store.migrate();
      return;
    } catch (err) {
      const cause = (err as { cause?: unknown }).cause;
      const permanent = permanentConnectionProblem(err) ?? permanentConnectionProblem(cause);
      const fault = permanent ? undefined : (storeFault(err) ?? storeFault(cause));
      const left = Math.ceil((deadline - Date.now()) / 1000);
      if (!fault || left <= 0) {
        const fix = permanent ? `; ${permanent}` : '';
        throw new Error(`cannot use the database ${store.description}: ${(err as Error).message}${fix}`);
      }
      onWait(`waiting for the database ${store.description} (${fault}); giving up in ${left} s`);
      await new Promise((r) => setTimeout(r, DATABASE_RETRY_MS));
    }
  }
}

export interface RunningServer {
  app: FastifyInstance;
  url: string;
  /** The /metrics URL, when config.metrics asks for it. */
  metricsUrl?: string;
  close(): Promise<void>;
}

/** How often the checkpointer thread of a long-running process checkpoints the WAL (sqlite-checkpointer.cjs). */
const CHECKPOINT_INTERVAL_MS = 200;

/**
 * The store and the key store of a data dir, opened together for a long-running signer (the service, the
 * in-process daemon): WAL checkpoints run on a thread of their own. The store is closed again if the key store
 * fails.
 */
export async function openStores(
  config: ServiceConfig,
  onStoreError: (message: string) => void = (message) => process.emitWarning(`SQLite store: ${message}`),
  options: Pick<SqliteStoreOptions, 'writerThread'> = {},
): Promise<{ store: Store; keyStore: KeyStores }> {
  const store = await openStore(config, {
    service: true,
    backgroundCheckpoints: { intervalMs: CHECKPOINT_INTERVAL_MS, onError: onStoreError },
    ...(options.writerThread && { writerThread: { onError: onStoreError, ...options.writerThread } }),
  });
  try {
    return { store, keyStore: openKeyStore(config) };
  } catch (err) {
    await store.close();
    throw err;
  }
}

export async function startServer(config: ServiceConfig): Promise<RunningServer> {
  const { store, keyStore } = await openStores(config);
  const clock = config.tsa.enabled
    ? new ClockTrust(
        config.tsa.clock,
        store.databaseTime ? () => (store.databaseTime as () => Promise<Date>)() : undefined,
      )
    : undefined;
  const metrics = config.metrics ? new ServiceMetrics({ store, keyStore }) : undefined;
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
  });
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
  // The policy in force is part of the record: every start logs the digest of the policy document it loaded.
  const policy = policySource(config);
  app.log.info({ policy: policy.name, policy_sha256: policy.sha256 }, `policy in force: ${policy.name}`);
  await store.appendAudit({
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
  // Keep the loop polling while a request is handled and just after it (src/busy-poll.ts): the next request of a
  // sequential client, or a signing thread's answer, then finds a running process instead of a sleeping one.
  const busyPoll = new BusyPoll(config.busyPollMs, { busyThreads: () => keyStore.threadsBusy?.() ?? 0 });
  app.server.on('request', (_req, res) => {
    busyPoll.touch();
    res.once('finish', () => busyPoll.touch());
  });
  const metricsServer =
    metrics && config.metrics
      ? await startMetricsServer(metrics, config.metrics, (err) => app.log.error({ err }, 'metrics collection failed'))
      : undefined;
  if (metricsServer) app.addHook('onClose', () => metricsServer.close());
  const url = await app.listen({ host: config.host, port: config.port }).catch(async (err) => {
    await metricsServer?.close();
    throw err;
  });
  app.log.info(
    { store: store.description, keyStore: keyStore.description, url, metrics: metricsServer?.url },
    'signbridge service ready',
  );
  return {
    app,
    url,
    ...(metricsServer && { metricsUrl: metricsServer.url }),
    close: () => app.close(),
  };
}
