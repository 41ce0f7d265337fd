// Service configuration, composed from the settings each feature owns next to its code (its part of the config
// file's schema, its environment variables, its defaults and checks). Precedence, for every setting:
//   built-in defaults < config file (YAML or JSON, --config) < environment (SIGNBRIDGE_*) < command-line flags.
// With nothing but a data dir, the service runs on the embedded default: SQLite plus a SoftHSM token.
// docs/configuration.md lists every setting; test/unit/configuration-doc.test.ts checks it against SETTINGS_ENV and
// ConfigFileSchema.
import { existsSync, readFileSync } from 'node:fs';
import { type Static, Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import YAML from 'yaml';
import { OIDC_ENV, OidcConfigSchema, type OidcSettings, resolveOidcSettings } from '../auth/oidc/settings.js';
import {
  WORKLOAD_ENV,
  WorkloadConfigSchema,
  type WorkloadSettings,
  workloadSetting,
} from '../auth/workload/workload-settings.js';
import { ConfigError } from '../config-error.js';
import {
  EVENTS_ENV,
  type EventSettings,
  EventsConfigSchema,
  eventSetting,
  retryForMs,
} from '../events/event-settings.js';
import { SMTP_ENV, SMTP_TLS_MODES, SmtpConfigSchema, type SmtpSettings, smtpSetting } from '../events/smtp-settings.js';
import {
  WEBHOOKS_ENV,
  type WebhookSettings,
  WebhooksConfigSchema,
  webhookSetting,
} from '../events/webhook-settings.js';
import {
  KEY_STORE_ENV,
  KeyStoreConfigSchema,
  type KeyStoreSetting,
  keyStoreError,
  keyStoreSetting,
} from '../keys/key-store-settings.js';
import { KmsApiConfigSchema, type KmsApiSettings, kmsApiSetting } from '../kms-api/kms-api-settings.js';
import { METRICS_ENV, MetricsConfigSchema, metricsSetting } from '../metrics/metrics-settings.js';
import { POLICY_ENV, PolicyFileConfigSchema, policyFileSetting } from '../policy/policy-file-setting.js';
import {
  RETENTION_ENV,
  RetentionConfigSchema,
  type RetentionSettings,
  retentionSetting,
} from '../retention/retention-settings.js';
import {
  databaseUrlSetting,
  isOnPostgres,
  STORE_ENV,
  type StoreConfig,
  StoreConfigSchema,
  storeError,
  storeSetting,
} from '../store/store-settings.js';
import type { LogSettings } from '../transparency/log-service.js';
import { LogConfigSchema, logSetting } from '../transparency/log-settings.js';
import { TrialConfigSchema, type TrialSettings, trialSetting } from '../trial/trial-settings.js';
import { TSA_ENV, TsaConfigSchema, type TsaSettings, tsaSetting } from '../tsa/tsa-settings.js';
import {
  dataDirSetting,
  listenSetting,
  requestHandlingSetting,
  SERVER_ENV,
  ServerConfigProperties as Server,
  type WorkerMemorySettings,
  workerMemorySetting,
  workersSetting,
} from './server-settings.js';

/** Every environment variable the service's settings read (docs/configuration.md lists each). */
export const SETTINGS_ENV: readonly string[] = [
  ...SERVER_ENV,
  ...STORE_ENV,
  ...KEY_STORE_ENV,
  ...POLICY_ENV,
  ...METRICS_ENV,
  ...OIDC_ENV,
  ...WORKLOAD_ENV,
  ...EVENTS_ENV,
  ...RETENTION_ENV,
  ...WEBHOOKS_ENV,
  ...SMTP_ENV,
  ...TSA_ENV,
];

export const ConfigFileSchema = Type.Object(
  {
    dataDir: Server.dataDir,
    listen: Server.listen,
    logLevel: Server.logLevel,
    store: Type.Optional(StoreConfigSchema),
    keyStore: Type.Optional(KeyStoreConfigSchema),
    trial: Type.Optional(TrialConfigSchema),
    /** The drop-in AWS KMS, STS and Vault transit endpoints (docs/kms-api.md). */
    kmsApi: Type.Optional(KmsApiConfigSchema),
    trustProxy: Server.trustProxy,
    bodyLimitBytes: Server.bodyLimitBytes,
    requestTimeoutSeconds: Server.requestTimeoutSeconds,
    publicUrl: Server.publicUrl,
    policyFile: Type.Optional(PolicyFileConfigSchema),
    busyPollMs: Server.busyPollMs,
    workers: Server.workers,
    workerMemory: Server.workerMemory,
    metrics: Type.Optional(MetricsConfigSchema),
    /** Sign-in through the organisation's OpenID Connect provider (docs/oauth.md). */
    oidc: Type.Optional(OidcConfigSchema),
    workload: Type.Optional(WorkloadConfigSchema),
    /** Event delivery (docs/events.md, "Delivery"). */
    events: Type.Optional(EventsConfigSchema),
    retention: Type.Optional(RetentionConfigSchema),
    webhooks: Type.Optional(WebhooksConfigSchema),
    smtp: Type.Optional(SmtpConfigSchema),
    log: Type.Optional(LogConfigSchema),
    tsa: Type.Optional(TsaConfigSchema),
  },
  { additionalProperties: false },
);
export type ConfigFile = Static<typeof ConfigFileSchema>;

export interface ServiceConfig {
  dataDir: string;
  host: string;
  port: number;
  logLevel: string;
  store: StoreConfig;
  keyStore: KeyStoreSetting;
  trial: TrialSettings;
  /** The drop-in AWS KMS, STS and Vault transit endpoints (kmsApiSetting). */
  kmsApi: KmsApiSettings;
  /** Proxies whose X-Forwarded-For is believed; empty: the peer address is the client. */
  trustProxy: string[];
  bodyLimit: number;
  /** Time for a whole request to arrive, in ms (requestTimeoutSeconds). */
  requestTimeoutMs: number;
  publicUrl?: string;
  policyFile?: string;
  busyPollMs: number;
  /** Processes taking requests behind the listening address (workersSetting; 1: this process alone). */
  workers: number;
  /** What each request worker may hold: its young generation, when it is replaced (workerMemorySetting). */
  workerMemory: WorkerMemorySettings;
  /** Where /metrics is served; absent: not served. */
  metrics?: { host: string; port: number };
  /** Absent when no IdP is configured (the /oauth/* endpoints then answer 503 oauth_not_configured). */
  oidc?: OidcSettings;
  /** The CI token exchange's outbound and token-age settings (workloadSetting). */
  workload: WorkloadSettings;
  /** Event delivery: how often to look for work, leases, retries, pausing, reminders (eventSetting). */
  events: EventSettings;
  /** What the pruner deletes and when (retentionSetting). */
  retention: RetentionSettings;
  /** Outgoing mail (smtpSetting); absent: no smtp section, e-mail subscriptions cannot deliver. */
  smtp?: SmtpSettings;
  /** Where webhooks may be sent (webhookSetting); the shape src/events/webhook-sender.ts takes. */
  webhooks: WebhookSettings;
  /** The transparency log (logSetting). */
  log: LogSettings;
  /** The time-stamping authority (tsaSetting). */
  tsa: TsaSettings;
}

export interface ConfigSources {
  configFile?: string;
  /** --database: a postgres:// URL (or sqlite:<file>); wins over SIGNBRIDGE_DATABASE_URL and the file. */
  database?: string;
  dataDir?: string;
  listen?: string;
  /** --workers: request workers (src/workers/); wins over SIGNBRIDGE_WORKERS and the file. */
  workers?: string;
  env?: NodeJS.ProcessEnv;
}

export function loadConfigFile(path: string): ConfigFile {
  if (!existsSync(path)) throw new ConfigError(`config file ${path} does not exist`);
  let parsed: unknown;
  try {
    parsed = YAML.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new ConfigError(`config file ${path} is not valid YAML/JSON: ${(err as Error).message}`);
  }
  parsed ??= {};
  const first = [...Value.Errors(ConfigFileSchema, parsed)][0];
  if (first) {
    const where =
      first.path === '/keyStore'
        ? keyStoreError((parsed as { keyStore?: unknown }).keyStore)
        : first.path === '/store'
          ? storeError((parsed as { store?: unknown }).store)
          : first.path === '/smtp/tls'
            ? `/smtp/tls must be one of ${SMTP_TLS_MODES.join(', ')}`
            : undefined;
    throw new ConfigError(`config file ${path}: ${where ?? `${first.path || '/'} ${first.message}`}`);
  }
  return parsed as ConfigFile;
}

/** Each feature's settings in turn; the first that cannot be used stops the start with a ConfigError. */
export function resolveConfig(sources: ConfigSources): ServiceConfig {
  const env = sources.env ?? process.env;
  const file = sources.configFile ? loadConfigFile(sources.configFile) : {};
  const databaseUrl = databaseUrlSetting(sources.database, env);
  const onPostgres = isOnPostgres(databaseUrl, file.store);
  const dataDir = dataDirSetting(sources.dataDir, env, file, onPostgres);
  const { host, port } = listenSetting(sources.listen, env, file);
  const store = storeSetting(databaseUrl, file.store, dataDir, env);
  const keyStore = keyStoreSetting(file.keyStore, env);
  const server = requestHandlingSetting(env, file, store.type === 'postgres');

  return {
    dataDir,
    host,
    port,
    store,
    keyStore,
    trial: trialSetting(file.trial),
    kmsApi: kmsApiSetting(file.kmsApi),
    ...server,
    workers: workersSetting(sources.workers, env, file),
    workerMemory: workerMemorySetting(env, file),
    ...metricsSetting(env, file.metrics),
    ...oidcSetting(file, env),
    workload: workloadSetting(file.workload, env),
    events: eventSetting(file.events, env),
    retention: retentionSetting(file.retention, env, retryForMs(file.events)),
    ...(file.smtp && { smtp: smtpSetting(file.smtp, env) }),
    webhooks: webhookSetting(file.webhooks, env),
    tsa: tsaSetting(file.tsa, env, store.type === 'postgres'),
    log: logSetting(file.log),
    ...policyFileSetting(env, file.policyFile),
  };
}

/** The IdP's settings, which need the service's public URL: redirect URIs and verification links are built from it. */
function oidcSetting(file: ConfigFile, env: NodeJS.ProcessEnv): { oidc?: OidcSettings } {
  const oidc = resolveOidcSettings(
    file.oidc,
    env,
    (path) => readFileSync(path, 'utf8'),
    (m) => new ConfigError(m),
  );
  if (!oidc) return {};
  const publicUrl = env.SIGNBRIDGE_PUBLIC_URL ?? file.publicUrl;
  // Redirect URIs and verification links are built from it: without it they would point nowhere useful.
  if (!publicUrl || publicUrl.includes('{')) {
    throw new ConfigError('an OIDC issuer is configured: set SIGNBRIDGE_PUBLIC_URL (or publicUrl) to the service URL');
  }
  return { oidc };
}
