// Service configuration: defaults < config file (YAML or JSON) < environment < command-line flags.
// With nothing but a data dir, the service runs on the embedded default: SQLite plus a SoftHSM token.
import { existsSync, readFileSync } from 'node:fs';
import { BlockList, isIP } from 'node:net';
import { homedir } from 'node:os';
import { isAbsolute, join, resolve } from 'node:path';
import { type Static, Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import YAML from 'yaml';
import { OidcConfigSchema, type OidcSettings, resolveOidcSettings } from '../auth/oidc/settings.js';
import { busyPollSetting, DEFAULT_BUSY_POLL_MS } from '../busy-poll.js';
import { addCidr, invalidAllowEntries } from '../net/outbound-request.js';
import { RETENTION_DEFAULTS, type RetentionSettings } from '../retention/retention-settings.js';
import { postgresUrlProblem, redactUrl } from '../store/postgres-store.js';
import { LOG_DEFAULTS, type LogSettings } from '../transparency/log-service.js';
import { isValidKeyName } from '../transparency/signed-note.js';
import { CLOCK_CHECKS, type ClockCheck, type ClockTrustSettings } from '../tsa/clock-trust.js';

const Pkcs11KeyStoreConfig = Type.Object(
  {
    type: Type.Literal('pkcs11'),
    module: Type.String({ minLength: 1, description: 'path of the PKCS#11 module' }),
    tokenLabel: Type.String({ minLength: 1 }),
    pin: Type.Optional(Type.String({ minLength: 1 })),
    pinFile: Type.Optional(Type.String({ minLength: 1 })),
    sessions: Type.Optional(Type.Integer({ minimum: 1, maximum: 256 })),
    signThreads: Type.Optional(Type.Integer({ minimum: 0, maximum: 64 })),
    inlineSignBelowMs: Type.Optional(Type.Number({ minimum: 0, maximum: 100 })),
  },
  { additionalProperties: false },
);

const SoftHsmKeyStoreConfig = Type.Object(
  {
    type: Type.Literal('softhsm'),
    sessions: Type.Optional(Type.Integer({ minimum: 1, maximum: 256 })),
    signThreads: Type.Optional(Type.Integer({ minimum: 0, maximum: 64 })),
    inlineSignBelowMs: Type.Optional(Type.Number({ minimum: 0, maximum: 100 })),
  },
  { additionalProperties: false },
);

/**
 * Keys in AWS KMS (docs/aws-kms.md). Region, endpoint and credentials come from the SDK's own settings
 * (AWS_REGION, AWS_ENDPOINT_URL_KMS / AWS_ENDPOINT_URL, the default credential chain, AWS_PROFILE) unless given.
 * `legacy`: a PKCS#11 key store that holds keys made before the move to KMS; they keep signing from it.
 */
const AwsKmsKeyStoreConfig = Type.Object(
  {
    type: Type.Literal('aws-kms'),
    region: Type.Optional(Type.String({ minLength: 1 })),
    endpoint: Type.Optional(Type.String({ pattern: '^https?://' })),
    aliasPrefix: Type.Optional(Type.String({ pattern: '^alias/[a-zA-Z0-9/_-]*$', maxLength: 200 })),
    requestTimeoutMs: Type.Optional(Type.Integer({ minimum: 100, maximum: 120_000 })),
    maxAttempts: Type.Optional(Type.Integer({ minimum: 1, maximum: 10 })),
    legacy: Type.Optional(Type.Union([SoftHsmKeyStoreConfig, Pkcs11KeyStoreConfig])),
  },
  { additionalProperties: false },
);

/** A dotted OID (policy identifiers). */
const OID_PATTERN = '^[0-2](\\.(0|[1-9][0-9]*)){1,40}$';

/**
 * The TSA's default policy OID: under 2.25 (ITU-T X.667, an OID from a UUID; no registration needed), fixed for
 * signbridge. An organisation with its own arc sets tsa.policy to the OID its TSA practice statement names.
 */
export const DEFAULT_TSA_POLICY = '2.25.167930482007121870731071573279625541823';

const SqliteStoreConfig = Type.Object(
  { type: Type.Literal('sqlite'), path: Type.Optional(Type.String()) },
  { additionalProperties: false },
);
const PostgresStoreConfig = Type.Object(
  {
    type: Type.Literal('postgres'),
    /** postgres://user:password@host:port/db?sslmode=require; SIGNBRIDGE_DATABASE_URL wins over it. */
    url: Type.Optional(Type.String({ minLength: 1 })),
    poolSize: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
    /** Cancels a statement that runs longer (default 30000; docs/deployment.md says how it is set). */
    statementTimeoutMs: Type.Optional(Type.Integer({ minimum: 100, maximum: 3_600_000 })),
  },
  { additionalProperties: false },
);

export const SMTP_TLS_MODES = ['starttls', 'implicit', 'none'] as const;
/** Outgoing mail for e-mail subscriptions (docs/events.md#smtp); the password comes from a file or the environment. */
const SmtpConfig = Type.Object(
  {
    host: Type.String({ minLength: 1 }),
    /** Default: 587 with starttls, 465 with implicit, 25 with none. */
    port: Type.Optional(Type.Integer({ minimum: 1, maximum: 65535 })),
    /** The From address: `signbridge@example.com` or `signbridge <signbridge@example.com>`. */
    from: Type.String({ minLength: 3 }),
    user: Type.Optional(Type.String({ minLength: 1 })),
    passwordFile: Type.Optional(Type.String({ minLength: 1 })),
    /** starttls (default: the upgrade is required), implicit (TLS from the first byte), none (clear text). */
    tls: Type.Optional(Type.Union(SMTP_TLS_MODES.map((m) => Type.Literal(m)))),
    /** Extra PEM trust anchors for the server's certificate (a private CA). */
    caFile: Type.Optional(Type.String({ minLength: 1 })),
    /** For connecting, the greeting and each reply (default 30000). */
    timeoutMs: Type.Optional(Type.Integer({ minimum: 1000, maximum: 300_000 })),
  },
  { additionalProperties: false },
);

export const ConfigFileSchema = Type.Object(
  {
    dataDir: Type.Optional(Type.String({ minLength: 1 })),
    listen: Type.Optional(Type.String({ minLength: 1 })),
    logLevel: Type.Optional(
      Type.Union(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].map((l) => Type.Literal(l))),
    ),
    store: Type.Optional(Type.Union([SqliteStoreConfig, PostgresStoreConfig])),
    keyStore: Type.Optional(Type.Union([SoftHsmKeyStoreConfig, Pkcs11KeyStoreConfig, AwsKmsKeyStoreConfig])),
    trial: Type.Optional(
      Type.Object(
        {
          enabled: Type.Optional(Type.Boolean()),
          maxPerWindow: Type.Optional(Type.Integer({ minimum: 1 })),
          windowSeconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 7 * 24 * 3600 })),
        },
        { additionalProperties: false },
      ),
    ),
    /** Addresses or CIDRs of the proxies in front (docs/configuration.md); `true` is refused (trustProxySetting). */
    trustProxy: Type.Optional(Type.Union([Type.Boolean(), Type.Array(Type.String({ minLength: 1 })), Type.String()])),
    bodyLimitBytes: Type.Optional(Type.Integer({ minimum: 1024 })),
    /** Time for a whole request to arrive (headers and body); then 408 request_timeout. */
    requestTimeoutSeconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 3600 })),
    publicUrl: Type.Optional(Type.String()),
    /** The policy document (docs/policy.md); without one the built-in default policy applies. */
    policyFile: Type.Optional(Type.String({ minLength: 1 })),
    /** How long the event loop keeps polling after a request (src/busy-poll.ts); 0 turns it off. */
    busyPollMs: Type.Optional(Type.Number({ minimum: 0, maximum: 10 })),
    /** Prometheus /metrics on a listener of its own (docs/configuration.md); off unless enabled. */
    metrics: Type.Optional(
      Type.Object(
        { enabled: Type.Optional(Type.Boolean()), listen: Type.Optional(Type.String({ minLength: 1 })) },
        { additionalProperties: false },
      ),
    ),
    /** Sign-in through the organisation's OpenID Connect provider (docs/oauth.md). */
    oidc: Type.Optional(OidcConfigSchema),
    /** The CI token exchange (docs/ci.md, docs/configuration.md). */
    workload: Type.Optional(
      Type.Object(
        {
          allow: Type.Optional(Type.Union([Type.Array(Type.String({ minLength: 1 })), Type.String()])),
          caFile: Type.Optional(Type.String({ minLength: 1 })),
          maxTokenAgeSeconds: Type.Optional(Type.Integer({ minimum: 60, maximum: 86_400 })),
          clockToleranceSeconds: Type.Optional(Type.Integer({ minimum: 0, maximum: 300 })),
        },
        { additionalProperties: false },
      ),
    ),
    /** Event delivery (docs/events.md, "Delivery"). */
    events: Type.Optional(
      Type.Object(
        {
          pollMs: Type.Optional(Type.Integer({ minimum: 10, maximum: 60_000 })),
          idlePollMaxMs: Type.Optional(Type.Integer({ minimum: 10, maximum: 300_000 })),
          leaseSeconds: Type.Optional(Type.Integer({ minimum: 2, maximum: 3600 })),
          retryHours: Type.Optional(Type.Number({ minimum: 0.001, maximum: 168 })),
          /** Accepted and ignored since issue 31: a subscription pauses after failing for a time (below). */
          pauseAfterFailures: Type.Optional(Type.Integer({ minimum: 1, maximum: 100_000 })),
          pauseAfterFailingMinutes: Type.Optional(Type.Number({ minimum: 0.01, maximum: 10_080 })),
          concurrency: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000 })),
          concurrencyPerSubscription: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
          remindBeforeMinutes: Type.Optional(Type.Integer({ minimum: 0, maximum: 10_080 })),
        },
        { additionalProperties: false },
      ),
    ),
    /** Pruning what the contract lets go (docs/deployment.md, "Retention"; retentionSetting). */
    retention: Type.Optional(
      Type.Object(
        {
          enabled: Type.Optional(Type.Boolean()),
          eventsHours: Type.Optional(Type.Number({ minimum: 0.001, maximum: 87_600 })),
          requestsDays: Type.Optional(Type.Number({ minimum: 0.001, maximum: 3650 })),
          batchRows: Type.Optional(Type.Integer({ minimum: 10, maximum: 10_000 })),
          batchesPerPass: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000 })),
          intervalSeconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 86_400 })),
        },
        { additionalProperties: false },
      ),
    ),
    /** Webhook delivery (docs/configuration.md): where subscribers' URLs may point. */
    webhooks: Type.Optional(
      Type.Object(
        {
          allow: Type.Optional(Type.Union([Type.Array(Type.String({ minLength: 1 })), Type.String()])),
          caFile: Type.Optional(Type.String({ minLength: 1 })),
          timeoutMs: Type.Optional(Type.Integer({ minimum: 100, maximum: 120_000 })),
        },
        { additionalProperties: false },
      ),
    ),
    smtp: Type.Optional(SmtpConfig),
    /** The transparency log over the audit entries (docs/transparency.md, docs/configuration.md). */
    log: Type.Optional(
      Type.Object(
        {
          checkpointEveryEntries: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000_000 })),
          checkpointEverySeconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 86_400 })),
          origin: Type.Optional(Type.String({ minLength: 1, maxLength: 255 })),
          public: Type.Optional(Type.Boolean()),
          integrateEveryMs: Type.Optional(Type.Integer({ minimum: 0, maximum: 60_000 })),
        },
        { additionalProperties: false },
      ),
    ),
    /** The time-stamping authority (docs/tsa.md). */
    tsa: Type.Optional(
      Type.Object(
        {
          enabled: Type.Optional(Type.Boolean()),
          access: Type.Optional(Type.Union([Type.Literal('anonymous'), Type.Literal('api-key')])),
          allowNetworks: Type.Optional(Type.Union([Type.Array(Type.String({ minLength: 1 })), Type.String()])),
          maxPerWindow: Type.Optional(Type.Integer({ minimum: 1 })),
          windowSeconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 86_400 })),
          policy: Type.Optional(Type.String({ pattern: OID_PATTERN })),
          acceptedPolicies: Type.Optional(Type.Array(Type.String({ pattern: OID_PATTERN }))),
          accuracy: Type.Optional(
            Type.Object(
              {
                seconds: Type.Optional(Type.Integer({ minimum: 0, maximum: 3600 })),
                millis: Type.Optional(Type.Integer({ minimum: 1, maximum: 999 })),
              },
              { additionalProperties: false },
            ),
          ),
          tsaName: Type.Optional(Type.Boolean()),
          clock: Type.Optional(
            Type.Object(
              {
                check: Type.Optional(Type.Union(CLOCK_CHECKS.map((c) => Type.Literal(c)))),
                maxOffsetMs: Type.Optional(Type.Integer({ minimum: 1, maximum: 60_000 })),
                intervalSeconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 3600 })),
              },
              { additionalProperties: false },
            ),
          ),
        },
        { additionalProperties: false },
      ),
    ),
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
  keyStore: Pkcs11Setting | AwsKmsSetting;
  trial: { enabled: boolean; max: number; windowMs: number };
  /** Proxies whose X-Forwarded-For is believed; empty: the peer address is the client. */
  trustProxy: string[];
  bodyLimit: number;
  /** Time for a whole request to arrive, in ms (requestTimeoutSeconds). */
  requestTimeoutMs: number;
  publicUrl?: string;
  policyFile?: string;
  busyPollMs: number;
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

export interface TsaSettings {
  enabled: boolean;
  access: 'anonymous' | 'api-key';
  allowNetworks: string[];
  limit: { max: number; windowMs: number };
  policy: string;
  acceptedPolicies: string[];
  accuracy: { seconds?: number; millis?: number };
  tsaName: boolean;
  clock: ClockTrustSettings;
}

export interface WebhookSettings {
  /** Hosts or CIDRs that may be http and may resolve to loopback/private/link-local addresses. */
  allow: string[];
  /** Extra PEM trust anchors for receivers (webhooks.caFile's contents). */
  extraCaPem?: string;
  /** Per request (10 s). */
  timeoutMs: number;
}

export type SmtpTlsMode = (typeof SMTP_TLS_MODES)[number];

export interface SmtpSettings {
  host: string;
  port: number;
  from: string;
  tls: SmtpTlsMode;
  /** Present when smtp.user is set; `pass` from SIGNBRIDGE_SMTP_PASSWORD or smtp.passwordFile. Never log it. */
  auth?: { user: string; pass: string };
  /** Extra PEM trust anchors (smtp.caFile's contents). */
  caPem?: string;
  timeoutMs: number;
}

export interface WorkloadSettings {
  /** Issuer hosts or CIDRs that may resolve to loopback/private/link-local addresses. */
  allow: string[];
  /** Extra PEM trust anchors for issuers (workload.caFile's contents). */
  caPem?: string;
  maxTokenAgeSeconds: number;
  clockToleranceSeconds: number;
}

/** The embedded SoftHSM token, or another PKCS#11 token with its PIN resolved. */
export type Pkcs11Setting =
  | Static<typeof SoftHsmKeyStoreConfig>
  | (Static<typeof Pkcs11KeyStoreConfig> & { pin: string });
export type AwsKmsSetting = Omit<Static<typeof AwsKmsKeyStoreConfig>, 'legacy'> & { legacy?: Pkcs11Setting };
export type StoreConfig =
  | { type: 'sqlite'; path: string }
  | {
      type: 'postgres';
      url: string;
      poolSize?: number;
      statementTimeoutMs?: number;
      /** How long a starting process waits for a server it cannot reach (SIGNBRIDGE_DATABASE_WAIT_SECONDS, 30). */
      waitSeconds?: number;
    };

export interface ConfigSources {
  configFile?: string;
  /** --database: a postgres:// URL (or sqlite:<file>); wins over SIGNBRIDGE_DATABASE_URL and the file. */
  database?: string;
  dataDir?: string;
  listen?: string;
  env?: NodeJS.ProcessEnv;
}

export class ConfigError extends Error {}

export function parseListen(value: string, setting = 'listen'): { host: string; port: number } {
  const m = /^(\[[0-9a-fA-F:]+\]|[^:]+):(\d{1,5})$/.exec(value);
  const port = m ? Number(m[2]) : Number.NaN;
  if (!m || port > 65535) throw new ConfigError(`${setting} must be HOST:PORT (e.g. 127.0.0.1:8080), got "${value}"`);
  return { host: (m[1] as string).replace(/^\[|\]$/g, ''), port };
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

/** The store block checked against the variant its `type` names, as keyStoreError does for keyStore. */
function storeError(block: unknown): string | undefined {
  const type = (block as { type?: unknown } | null)?.type;
  const variant = [SqliteStoreConfig, PostgresStoreConfig].find((v) => v.properties.type.const === type);
  if (!variant) return '/store/type must be one of sqlite, postgres';
  const error = [...Value.Errors(variant, block)][0];
  return error && `/store${error.path} ${error.message}`;
}

/** The keyStore block checked against the variant its `type` names, so the error names the setting, not "union". */
function keyStoreError(block: unknown): string | undefined {
  const type = (block as { type?: unknown } | null)?.type;
  const variant = [SoftHsmKeyStoreConfig, Pkcs11KeyStoreConfig, AwsKmsKeyStoreConfig].find(
    (v) => v.properties.type.const === type,
  );
  if (!variant) return '/keyStore/type must be one of softhsm, pkcs11, aws-kms';
  const error = [...Value.Errors(variant, block)][0];
  return error && `/keyStore${error.path} ${error.message}`;
}

/**
 * Where state lives: SQLite in the data dir (the default), or PostgreSQL when a URL is given (--database,
 * SIGNBRIDGE_DATABASE_URL, or store.type postgres in the file). `sqlite:<file>` names a SQLite file explicitly.
 */
function storeSetting(url: string | undefined, file: ConfigFile['store'], dataDir: string): StoreConfig {
  const sqliteAt = (path: string): StoreConfig => ({
    type: 'sqlite',
    path: isAbsolute(path) ? path : join(dataDir, path),
  });
  const postgresAt = (from: string, at: string) => {
    const problem = postgresUrlProblem(at);
    if (problem) throw new ConfigError(`the database URL (${from}) ${problem}; got "${redactUrl(at)}"`);
  };
  if (url !== undefined) {
    if (/^postgres(ql)?:\/\//.test(url)) {
      postgresAt('--database or SIGNBRIDGE_DATABASE_URL', url);
      return { type: 'postgres', url, ...(file?.type === 'postgres' && postgresTuning(file)) };
    }
    if (url.startsWith('sqlite:') && url.length > 'sqlite:'.length) return sqliteAt(url.slice('sqlite:'.length));
    throw new ConfigError(
      'the database must be a postgres://user:password@host:port/dbname URL (or sqlite:<file>); got ' +
        `"${url.replace(/\/\/[^@/]*@/, '//***@')}" (from --database or SIGNBRIDGE_DATABASE_URL)`,
    );
  }
  if (file?.type === 'postgres') {
    if (!file.url) throw new ConfigError('store.type postgres needs store.url or SIGNBRIDGE_DATABASE_URL');
    postgresAt('store.url', file.url);
    return { type: 'postgres', url: file.url, ...postgresTuning(file) };
  }
  return sqliteAt(file?.path ?? 'signbridge.db');
}

/** The file's pool size and statement timeout, which apply whichever source gave the URL. */
function postgresTuning(file: { poolSize?: number; statementTimeoutMs?: number }) {
  return {
    ...(file.poolSize !== undefined && { poolSize: file.poolSize }),
    ...(file.statementTimeoutMs !== undefined && { statementTimeoutMs: file.statementTimeoutMs }),
  };
}

export function resolveConfig(sources: ConfigSources): ServiceConfig {
  const env = sources.env ?? process.env;
  const file = sources.configFile ? loadConfigFile(sources.configFile) : {};
  const databaseUrl = sources.database ?? env.SIGNBRIDGE_DATABASE_URL;
  // (a URL that is neither postgres: nor sqlite: is refused below by storeSetting, with the reason)
  const onPostgres =
    (databaseUrl !== undefined && !databaseUrl.startsWith('sqlite:')) || file.store?.type === 'postgres';
  // With PostgreSQL the data dir holds only the embedded token (if any): admin commands need none of it.
  const dataDirRaw =
    sources.dataDir ??
    env.SIGNBRIDGE_DATA_DIR ??
    file.dataDir ??
    (onPostgres ? join(env.XDG_DATA_HOME ?? join(homedir(), '.local', 'share'), 'signbridge') : undefined);
  if (!dataDirRaw) {
    throw new ConfigError('no data dir: pass --data-dir DIR, set SIGNBRIDGE_DATA_DIR, or set dataDir in --config');
  }
  const dataDir = resolve(dataDirRaw);
  const { host, port } = parseListen(sources.listen ?? env.SIGNBRIDGE_LISTEN ?? file.listen ?? '127.0.0.1:8080');
  const store = storeSetting(databaseUrl, file.store, dataDir);
  if (store.type === 'postgres' && env.SIGNBRIDGE_DATABASE_WAIT_SECONDS !== undefined) {
    const raw = env.SIGNBRIDGE_DATABASE_WAIT_SECONDS;
    if (!/^\d{1,3}$/.test(raw) || Number(raw) > 600) {
      throw new ConfigError(`SIGNBRIDGE_DATABASE_WAIT_SECONDS must be whole seconds from 0 to 600, got "${raw}"`);
    }
    store.waitSeconds = Number(raw);
  }

  const keyStore = keyStoreSetting(file.keyStore, env);

  return {
    dataDir,
    host,
    port,
    logLevel: env.SIGNBRIDGE_LOG_LEVEL ?? file.logLevel ?? 'info',
    store,
    keyStore,
    trial: {
      enabled: file.trial?.enabled ?? true,
      max: file.trial?.maxPerWindow ?? 10,
      windowMs: (file.trial?.windowSeconds ?? 3600) * 1000,
    },
    trustProxy: trustProxySetting(env.SIGNBRIDGE_TRUST_PROXY ?? file.trustProxy),
    bodyLimit: file.bodyLimitBytes ?? 4 * 1024 * 1024,
    requestTimeoutMs: requestTimeoutSetting(env.SIGNBRIDGE_REQUEST_TIMEOUT_SECONDS, file.requestTimeoutSeconds),
    // Off by default on PostgreSQL: there the loop waits for the database under load too, and polling through
    // those waits took the CPU of PostgreSQL and of other instances (docs/benchmarks.md: 14-18% of the throughput).
    busyPollMs: busyPollSetting(
      env.SIGNBRIDGE_BUSY_POLL_MS,
      file.busyPollMs,
      (m) => new ConfigError(m),
      store.type === 'postgres' ? 0 : DEFAULT_BUSY_POLL_MS,
    ),
    ...metricsSetting(env.SIGNBRIDGE_METRICS_LISTEN, file.metrics),
    ...((env.SIGNBRIDGE_PUBLIC_URL ?? file.publicUrl) !== undefined && {
      publicUrl: (env.SIGNBRIDGE_PUBLIC_URL ?? file.publicUrl) as string,
    }),
    ...oidcSetting(file, env),
    workload: workloadSetting(file.workload, env),
    events: eventSetting(file.events, env),
    retention: retentionSetting(file.retention, env, (file.events?.retryHours ?? 24) * 3600_000),
    ...(file.smtp && { smtp: smtpSetting(file.smtp, env) }),
    webhooks: webhookSetting(file.webhooks, env),
    tsa: tsaSetting(file.tsa, env, store.type === 'postgres'),
    log: logSetting(file.log),
    ...((env.SIGNBRIDGE_POLICY_FILE ?? file.policyFile) !== undefined && {
      policyFile: resolve((env.SIGNBRIDGE_POLICY_FILE ?? file.policyFile) as string),
    }),
  };
}

/** SIGNBRIDGE_REQUEST_TIMEOUT_SECONDS over the file's requestTimeoutSeconds over 60 s; whole seconds, 1 to 3600. */
function requestTimeoutSetting(fromEnv: string | undefined, fromFile: number | undefined): number {
  if (fromEnv === undefined || fromEnv === '') return (fromFile ?? 60) * 1000;
  if (!/^\d{1,4}$/.test(fromEnv) || Number(fromEnv) < 1 || Number(fromEnv) > 3600) {
    throw new ConfigError(`SIGNBRIDGE_REQUEST_TIMEOUT_SECONDS must be whole seconds from 1 to 3600, got "${fromEnv}"`);
  }
  return Number(fromEnv) * 1000;
}

/**
 * The file's `keyStore`, unless SIGNBRIDGE_KEY_STORE names another type: `aws-kms` moves a deployment to KMS (a
 * PKCS#11 block in the file stays behind it as the legacy store holding older keys), `softhsm` the embedded token,
 * `pkcs11` the file's PKCS#11 block.
 */
function keyStoreSetting(file: ConfigFile['keyStore'], env: NodeJS.ProcessEnv): ServiceConfig['keyStore'] {
  const wanted = env.SIGNBRIDGE_KEY_STORE;
  if (wanted === undefined || wanted === '' || wanted === file?.type) {
    if (file?.type === 'aws-kms') {
      const { legacy, ...kms } = file;
      return { ...kms, ...(legacy && { legacy: pkcs11Setting(legacy, env, 'keyStore.legacy') }) };
    }
    return file ? pkcs11Setting(file, env, 'keyStore') : { type: 'softhsm' };
  }
  if (wanted === 'aws-kms') {
    return {
      type: 'aws-kms',
      ...(file && file.type !== 'aws-kms' && { legacy: pkcs11Setting(file, env, 'keyStore') }),
    };
  }
  if (wanted === 'softhsm') return { type: 'softhsm' };
  const legacy = file?.type === 'aws-kms' ? file.legacy : undefined;
  if (wanted === 'pkcs11' && legacy?.type === 'pkcs11') return pkcs11Setting(legacy, env, 'keyStore.legacy');
  throw new ConfigError(
    wanted === 'pkcs11'
      ? 'SIGNBRIDGE_KEY_STORE=pkcs11 needs a keyStore block of type pkcs11 in the config file (module, tokenLabel)'
      : `SIGNBRIDGE_KEY_STORE must be aws-kms, softhsm or pkcs11, got "${wanted}"`,
  );
}

function pkcs11Setting(
  block: Exclude<ConfigFile['keyStore'], undefined | { type: 'aws-kms' }>,
  env: NodeJS.ProcessEnv,
  where: string,
): Pkcs11Setting {
  if (block.type === 'softhsm') return block;
  const { pinFile } = block;
  const pin = block.pin ?? (pinFile ? readFileSync(pinFile, 'utf8').trim() : undefined) ?? env.SIGNBRIDGE_PKCS11_PIN;
  if (!pin) throw new ConfigError(`${where}.type pkcs11 needs pin, pinFile or SIGNBRIDGE_PKCS11_PIN`);
  return { ...block, pin };
}

/** Names proxy-addr (fastify's trustProxy) knows for common ranges. */
const PROXY_RANGE_NAMES = ['loopback', 'linklocal', 'uniquelocal'];

/**
 * trustProxy: a list (or comma-separated string) of proxy addresses or CIDRs, or false. `true` would believe
 * every hop, so the left-most X-Forwarded-For address, which the client writes, would become the client address
 * (and the trial limit could be bypassed): it is refused with what to write instead.
 */
export function trustProxySetting(value: boolean | string | string[] | undefined): string[] {
  if (value === undefined || value === false || value === 'false' || value === '') return [];
  if (value === true || value === 'true') {
    throw new ConfigError(
      'trustProxy: true would trust every hop, so a client could choose its own address with X-Forwarded-For; ' +
        'list the addresses or CIDRs of your proxies instead, e.g. trustProxy: ["10.0.0.0/8"] ' +
        '(SIGNBRIDGE_TRUST_PROXY=10.0.0.0/8,192.0.2.7)',
    );
  }
  const entries = (Array.isArray(value) ? value : value.split(',')).map((e) => e.trim()).filter((e) => e !== '');
  for (const entry of entries) {
    if (!isProxyAddress(entry)) {
      throw new ConfigError(
        `trustProxy: "${entry}" is not an IP address, a CIDR (e.g. 10.0.0.0/8) or one of ${PROXY_RANGE_NAMES.join(', ')}`,
      );
    }
  }
  return entries;
}

function isProxyAddress(entry: string): boolean {
  if (PROXY_RANGE_NAMES.includes(entry)) return true;
  const [address = '', prefix, ...rest] = entry.split('/');
  const family = isIP(address);
  if (family === 0 || rest.length > 0) return false;
  if (prefix === undefined) return true;
  if (!/^\d{1,3}$/.test(prefix)) return false;
  return Number(prefix) <= (family === 4 ? 32 : 128);
}

/** The default /metrics address: loopback, the port Prometheus exporters of this kind commonly use. */
export const DEFAULT_METRICS_LISTEN = '127.0.0.1:9464';

/**
 * SIGNBRIDGE_METRICS_LISTEN (HOST:PORT, or "off") wins over the file's `metrics` block; without either, /metrics is
 * not served: it needs no API key, so an operator chooses where it listens.
 */
function metricsSetting(
  envListen: string | undefined,
  file: ConfigFile['metrics'],
): { metrics?: { host: string; port: number } } {
  if (envListen !== undefined && envListen !== '') {
    return envListen === 'off' ? {} : { metrics: parseListen(envListen, 'SIGNBRIDGE_METRICS_LISTEN') };
  }
  if (!file || file.enabled === false || (file.enabled === undefined && file.listen === undefined)) return {};
  return { metrics: parseListen(file.listen ?? DEFAULT_METRICS_LISTEN, 'metrics.listen') };
}

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

/**
 * workload.* with SIGNBRIDGE_WORKLOAD_ALLOW (comma list) and SIGNBRIDGE_WORKLOAD_CA_FILE over the file. The CA file
 * is read now: a missing or unreadable file stops the start instead of failing every exchange later.
 */
/** log.* with the defaults of LOG_DEFAULTS; the origin must be a signed-note key name (no spaces, no '+'). */
function logSetting(file: ConfigFile['log']): LogSettings {
  if (file?.origin !== undefined && !isValidKeyName(file.origin)) {
    throw new ConfigError(`log.origin must have no spaces, control characters or '+', got "${file.origin}"`);
  }
  return {
    checkpointEveryEntries: file?.checkpointEveryEntries ?? LOG_DEFAULTS.checkpointEveryEntries,
    checkpointEverySeconds: file?.checkpointEverySeconds ?? LOG_DEFAULTS.checkpointEverySeconds,
    public: file?.public ?? LOG_DEFAULTS.public,
    intervalMs: file?.integrateEveryMs ?? LOG_DEFAULTS.intervalMs,
    ...(file?.origin !== undefined && { origin: file.origin }),
  };
}

export interface EventSettings {
  pollMs: number;
  idlePollMaxMs: number;
  leaseMs: number;
  retryForMs: number;
  /** A subscription failing this long with no delivery pauses (and is probed until its receiver answers). */
  pauseAfterFailingMs: number;
  /** Attempts in flight from one instance, in all and per subscription (docs/events.md, "Isolation"). */
  concurrency: number;
  concurrencyPerSubscription: number;
  remindBeforeMs: number;
}

/** events.* (SIGNBRIDGE_EVENTS_POLL_MS over the file, for tests and tuning); defaults in docs/events.md. */
function eventSetting(file: ConfigFile['events'], env: NodeJS.ProcessEnv): EventSettings {
  const pollEnv = env.SIGNBRIDGE_EVENTS_POLL_MS;
  if (pollEnv !== undefined && !/^\d{2,5}$/.test(pollEnv)) {
    throw new ConfigError(`SIGNBRIDGE_EVENTS_POLL_MS must be a number of milliseconds (10-60000), got ${pollEnv}`);
  }
  return {
    pollMs: pollEnv !== undefined ? Number(pollEnv) : (file?.pollMs ?? 1000),
    idlePollMaxMs: file?.idlePollMaxMs ?? 15_000,
    leaseMs: (file?.leaseSeconds ?? 60) * 1000,
    retryForMs: (file?.retryHours ?? 24) * 3600_000,
    pauseAfterFailingMs: (file?.pauseAfterFailingMinutes ?? 60) * 60_000,
    concurrency: file?.concurrency ?? 256,
    concurrencyPerSubscription: file?.concurrencyPerSubscription ?? 16,
    remindBeforeMs: (file?.remindBeforeMinutes ?? 60) * 60_000,
  };
}

/** A whole number from an environment variable, within bounds; undefined when the variable is unset or empty. */
function envInteger(env: NodeJS.ProcessEnv, name: string, min: number, max: number): number | undefined {
  const raw = env[name];
  if (raw === undefined || raw === '') return undefined;
  if (!/^\d{1,9}$/.test(raw) || Number(raw) < min || Number(raw) > max) {
    throw new ConfigError(`${name} must be a whole number from ${min} to ${max}, got "${raw}"`);
  }
  return Number(raw);
}

/**
 * retention.* with SIGNBRIDGE_RETENTION_* over the file (docs/configuration.md). Events are kept at least as long as
 * deliveries are retried (events.retryHours, which is also the default): a shorter setting is refused rather than
 * silently raised, so the configuration says what happens. SIGNBRIDGE_RETENTION_ENABLED=false turns pruning off.
 */
function retentionSetting(
  file: ConfigFile['retention'],
  env: NodeJS.ProcessEnv,
  retryForMs: number,
): RetentionSettings {
  const enabledEnv = env.SIGNBRIDGE_RETENTION_ENABLED;
  if (enabledEnv !== undefined && enabledEnv !== '' && enabledEnv !== 'true' && enabledEnv !== 'false') {
    throw new ConfigError(`SIGNBRIDGE_RETENTION_ENABLED must be true or false, got "${enabledEnv}"`);
  }
  const eventsHours = envInteger(env, 'SIGNBRIDGE_RETENTION_EVENTS_HOURS', 1, 87_600) ?? file?.eventsHours;
  const eventsMs =
    eventsHours === undefined ? Math.max(RETENTION_DEFAULTS.eventsMs, retryForMs) : eventsHours * 3600_000;
  if (eventsMs < retryForMs) {
    throw new ConfigError(
      `retention.eventsHours (${eventsHours}) is shorter than events.retryHours (${retryForMs / 3600_000}): ` +
        'an event is kept at least as long as its deliveries may be retried',
    );
  }
  const requestsDays = envInteger(env, 'SIGNBRIDGE_RETENTION_REQUESTS_DAYS', 1, 3650) ?? file?.requestsDays;
  const intervalSeconds = envInteger(env, 'SIGNBRIDGE_RETENTION_INTERVAL_SECONDS', 1, 86_400) ?? file?.intervalSeconds;
  return {
    enabled:
      enabledEnv === 'false' ? false : enabledEnv === 'true' ? true : (file?.enabled ?? RETENTION_DEFAULTS.enabled),
    eventsMs,
    requestsMs: requestsDays === undefined ? RETENTION_DEFAULTS.requestsMs : requestsDays * 86_400_000,
    batchRows:
      envInteger(env, 'SIGNBRIDGE_RETENTION_BATCH_ROWS', 10, 10_000) ?? file?.batchRows ?? RETENTION_DEFAULTS.batchRows,
    batchesPerPass: file?.batchesPerPass ?? RETENTION_DEFAULTS.batchesPerPass,
    intervalMs: intervalSeconds === undefined ? RETENTION_DEFAULTS.intervalMs : intervalSeconds * 1000,
  };
}

/**
 * tsa.* (docs/tsa.md); SIGNBRIDGE_TSA_CLOCK_CHECK over the file. The clock check defaults to `ntp`: a TSA states
 * the time to the world, so it refuses unless the host shows its clock is synchronised. `database` needs a
 * database server (PostgreSQL).
 */
function tsaSetting(file: ConfigFile['tsa'], env: NodeJS.ProcessEnv, onPostgres: boolean): TsaSettings {
  const checkEnv = env.SIGNBRIDGE_TSA_CLOCK_CHECK;
  if (checkEnv !== undefined && !(CLOCK_CHECKS as readonly string[]).includes(checkEnv)) {
    throw new ConfigError(`SIGNBRIDGE_TSA_CLOCK_CHECK must be one of ${CLOCK_CHECKS.join(', ')}, got ${checkEnv}`);
  }
  const check = (checkEnv as ClockCheck | undefined) ?? file?.clock?.check ?? 'ntp';
  if (check === 'database' && !onPostgres) {
    throw new ConfigError("tsa.clock.check database compares with the database server's clock: it needs PostgreSQL");
  }
  const accuracy = file?.accuracy ?? { seconds: 1 };
  const accuracyMs = (accuracy.seconds ?? 0) * 1000 + (accuracy.millis ?? 0);
  if (accuracyMs === 0) throw new ConfigError('tsa.accuracy must state some time (seconds or millis)');
  const maxOffsetMs = file?.clock?.maxOffsetMs ?? Math.min(500, accuracyMs);
  if (maxOffsetMs > accuracyMs) {
    throw new ConfigError(
      `tsa.clock.maxOffsetMs (${maxOffsetMs}) is larger than the accuracy tokens state (${accuracyMs} ms): a token could state a time further off than it says`,
    );
  }
  return {
    enabled: file?.enabled ?? true,
    access: file?.access ?? 'anonymous',
    allowNetworks: allowNetworkSetting(file?.allowNetworks),
    limit: { max: file?.maxPerWindow ?? 600, windowMs: (file?.windowSeconds ?? 60) * 1000 },
    policy: file?.policy ?? DEFAULT_TSA_POLICY,
    acceptedPolicies: file?.acceptedPolicies ?? [],
    accuracy,
    tsaName: file?.tsaName ?? true,
    clock: { check, maxOffsetMs, intervalMs: (file?.clock?.intervalSeconds ?? 10) * 1000 },
  };
}

/** tsa.allowNetworks: IP addresses or CIDRs only (a client is an address; a host name would mean nothing here). */
function allowNetworkSetting(source: string | string[] | undefined): string[] {
  const entries = (typeof source === 'string' ? source.split(',') : (source ?? []))
    .map((entry) => entry.trim())
    .filter((entry) => entry.length > 0);
  const invalid = entries.filter((entry) => !addCidr(new BlockList(), entry));
  if (invalid.length > 0) {
    throw new ConfigError(
      `tsa.allowNetworks: ${invalid.map((e) => JSON.stringify(e)).join(', ')} is not an IP address or a CIDR`,
    );
  }
  return entries;
}

function workloadSetting(file: ConfigFile['workload'], env: NodeJS.ProcessEnv): WorkloadSettings {
  const allow = allowSetting(env.SIGNBRIDGE_WORKLOAD_ALLOW ?? file?.allow, 'workload.allow');
  const caPem = caFileSetting(env.SIGNBRIDGE_WORKLOAD_CA_FILE || file?.caFile, 'workload.caFile');
  return {
    allow,
    ...(caPem !== undefined && { caPem }),
    maxTokenAgeSeconds: file?.maxTokenAgeSeconds ?? 3600,
    clockToleranceSeconds: file?.clockToleranceSeconds ?? 60,
  };
}

const SMTP_DEFAULT_PORTS: Record<SmtpTlsMode, number> = { starttls: 587, implicit: 465, none: 25 };

/**
 * The smtp section with its password (SIGNBRIDGE_SMTP_PASSWORD over smtp.passwordFile) and CA file read now: a
 * missing file or a user without a password stops the start instead of failing every mail later. Errors name the
 * setting and the file, never the password.
 */
function smtpSetting(file: NonNullable<ConfigFile['smtp']>, env: NodeJS.ProcessEnv): SmtpSettings {
  // A CR or LF in From would let the address add header lines to every mail.
  if (!file.from.includes('@') || /[\r\n]/.test(file.from)) {
    throw new ConfigError(
      `smtp.from must be one address such as signbridge@example.com or "signbridge <signbridge@example.com>", got ${JSON.stringify(file.from)}`,
    );
  }
  let pass = env.SIGNBRIDGE_SMTP_PASSWORD || undefined;
  if (pass === undefined && file.passwordFile) {
    try {
      pass = readFileSync(file.passwordFile, 'utf8').replace(/[\r\n]+$/, '');
    } catch (err) {
      throw new ConfigError(
        `smtp.passwordFile ${file.passwordFile} cannot be read: ${(err as NodeJS.ErrnoException).code ?? 'error'}`,
      );
    }
    if (pass === '') throw new ConfigError(`smtp.passwordFile ${file.passwordFile} is empty`);
  }
  if (file.user && pass === undefined) {
    throw new ConfigError('smtp.user is set: give its password in smtp.passwordFile or SIGNBRIDGE_SMTP_PASSWORD');
  }
  if (!file.user && pass !== undefined) {
    throw new ConfigError(
      'an SMTP password is set (smtp.passwordFile or SIGNBRIDGE_SMTP_PASSWORD) but smtp.user is not',
    );
  }
  let caPem: string | undefined;
  if (file.caFile) {
    try {
      caPem = readFileSync(file.caFile, 'utf8');
    } catch (err) {
      throw new ConfigError(`smtp.caFile ${file.caFile} cannot be read: ${(err as Error).message}`);
    }
    if (!caPem.includes('-----BEGIN CERTIFICATE-----')) {
      throw new ConfigError(`smtp.caFile ${file.caFile} holds no PEM certificate`);
    }
  }
  const tls = file.tls ?? 'starttls';
  return {
    host: file.host,
    port: file.port ?? SMTP_DEFAULT_PORTS[tls],
    from: file.from,
    tls,
    ...(file.user && pass !== undefined && { auth: { user: file.user, pass } }),
    ...(caPem !== undefined && { caPem }),
    timeoutMs: file.timeoutMs ?? 30_000,
  };
}

/**
 * webhooks.* with SIGNBRIDGE_WEBHOOK_ALLOW (comma list) and SIGNBRIDGE_WEBHOOK_CA_FILE over the file, checked like
 * workload.*: subscribers' URLs are https to public addresses unless the allow list names them.
 */
function webhookSetting(file: ConfigFile['webhooks'], env: NodeJS.ProcessEnv): WebhookSettings {
  const allow = allowSetting(env.SIGNBRIDGE_WEBHOOK_ALLOW ?? file?.allow, 'webhooks.allow');
  const extraCaPem = caFileSetting(env.SIGNBRIDGE_WEBHOOK_CA_FILE || file?.caFile, 'webhooks.caFile');
  return { allow, ...(extraCaPem !== undefined && { extraCaPem }), timeoutMs: file?.timeoutMs ?? 10_000 };
}

/** A comma list or a YAML list of hosts, IP addresses and CIDRs; an entry that is none of them stops the start. */
function allowSetting(source: string | string[] | undefined, setting: string): string[] {
  const allow = (typeof source === 'string' ? source.split(',') : (source ?? []))
    .map((entry) => entry.trim())
    .filter((entry) => entry.length > 0);
  const invalid = invalidAllowEntries(allow);
  if (invalid.length > 0) {
    throw new ConfigError(
      `${setting}: ${invalid.map((e) => JSON.stringify(e)).join(', ')} is not a host name, an IP address or a CIDR`,
    );
  }
  return allow;
}

/** A PEM file of extra trust anchors, read now: a missing or unreadable file stops the start, not every request later. */
function caFileSetting(caFile: string | undefined, setting: string): string | undefined {
  if (!caFile) return undefined;
  let caPem: string;
  try {
    caPem = readFileSync(caFile, 'utf8');
  } catch (err) {
    throw new ConfigError(`${setting} ${caFile} cannot be read: ${(err as Error).message}`);
  }
  if (!caPem.includes('-----BEGIN CERTIFICATE-----'))
    throw new ConfigError(`${setting} ${caFile} holds no PEM certificate`);
  return caPem;
}
