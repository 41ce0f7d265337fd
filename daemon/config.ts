// Daemon configuration: defaults < YAML/JSON file < environment < command-line flags. Paths in the file are
// relative to the file's folder. Secrets are never in the file itself: the API key comes from a 0600 file or,
// for CI, from SIGNBRIDGE_API_KEY.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { type Static, Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import YAML from 'yaml';
import { busyPollSetting } from '../src/busy-poll.js';
import { defaultCertificateDir } from './certificate-store.js';
import { type ApiKeySource, apiKeyFromEnv, apiKeyFromFile } from './credentials.js';
import type { TenantConfig } from './key-catalog.js';
import { type LoginMetadata, loginFilesInUse, readLoginMetadata } from './login-files.js';
import { LoginSession } from './login-session.js';
import { DEFAULT_SBOM_MAX_BYTES } from './sbom.js';
import { defaultSocketPath } from './socket-path.js';
import { type CoalescingOptions, DEFAULT_COALESCING } from './upstream/coalescing-upstream.js';
import { DEFAULT_RETRY_WITHIN_MS } from './upstream/remote-upstream.js';

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

export const DaemonConfigFileSchema = Type.Object(
  {
    socket: Type.Optional(Type.String({ minLength: 1 })),
    certificateDir: Type.Optional(Type.String({ minLength: 1 })),
    logLevel: Type.Optional(Type.Union(LOG_LEVELS.map((l) => Type.Literal(l)))),
    service: Type.Optional(
      Type.Object(
        {
          url: Type.Optional(Type.String({ minLength: 1 })),
          apiKeyFile: Type.Optional(Type.String({ minLength: 1 })),
          timeoutSeconds: Type.Optional(Type.Number({ exclusiveMinimum: 0, maximum: 600 })),
          /** How long a request is sent again while the service cannot answer (restart, 503); 0: once. */
          retrySeconds: Type.Optional(Type.Number({ minimum: 0, maximum: 600 })),
          /** Connections to the service at most (default DEFAULT_CONNECTIONS). */
          connections: Type.Optional(Type.Integer({ minimum: 1, maximum: 1024 })),
        },
        { additionalProperties: false },
      ),
    ),
    inProcess: Type.Optional(
      Type.Object(
        {
          dataDir: Type.String({ minLength: 1 }),
          config: Type.Optional(Type.String({ minLength: 1 })),
        },
        { additionalProperties: false },
      ),
    ),
    tenants: Type.Optional(
      Type.Array(
        Type.Object(
          {
            id: Type.String({ minLength: 1 }),
            label: Type.Optional(Type.String({ minLength: 1 })),
            apiKeyFile: Type.Optional(Type.String({ minLength: 1 })),
            certificates: Type.Optional(Type.Record(Type.String(), Type.String({ minLength: 1 }))),
            /** A directory: each signature's transparency-log proof is kept there (docs/daemon.md). */
            logProofs: Type.Optional(Type.String({ minLength: 1 })),
          },
          { additionalProperties: false },
        ),
      ),
    ),
    /** Concurrent signatures for one key sent as one sign_batch (coalescing-upstream.ts); on by default. */
    coalesce: Type.Optional(
      Type.Object(
        {
          enabled: Type.Optional(Type.Boolean()),
          windowMs: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
          maxBatch: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
          lanes: Type.Optional(Type.Integer({ minimum: 1, maximum: 64 })),
        },
        { additionalProperties: false },
      ),
    ),
    cacheSeconds: Type.Optional(Type.Number({ minimum: 0, maximum: 3600 })),
    /** How long the event loop keeps polling after a request (src/busy-poll.ts); 0 turns it off. */
    busyPollMs: Type.Optional(Type.Number({ minimum: 0, maximum: 10 })),
    approvalWaitSeconds: Type.Optional(Type.Number({ minimum: 0, maximum: 60 })),
    sbomMaxBytes: Type.Optional(Type.Integer({ minimum: 1, maximum: 64 * 1024 * 1024 })),
  },
  { additionalProperties: false },
);
export type DaemonConfigFile = Static<typeof DaemonConfigFileSchema>;

export type UpstreamConfig =
  | {
      type: 'remote';
      url: string;
      apiKey: ApiKeySource | undefined;
      tenantApiKeys: Map<string, ApiKeySource>;
      timeoutMs: number;
      /** service.retrySeconds (loadDaemonConfig's default: DEFAULT_RETRY_WITHIN_MS); unset: RemoteUpstream's 0. */
      retryWithinMs?: number;
      /** service.connections; unset: RemoteUpstream's DEFAULT_CONNECTIONS. */
      connections?: number;
    }
  | { type: 'in-process'; dataDir: string; configFile?: string };

export interface DaemonConfig {
  socketPath: string;
  /** Where `signbridge cert import` chains are kept. */
  certificateDir: string;
  logLevel: string;
  upstream: UpstreamConfig;
  tenants: TenantConfig[];
  cacheTtlMs: number;
  /** Busy-polling window after each request, ms (src/busy-poll.ts); default DEFAULT_BUSY_POLL_MS, 0 off. */
  busyPollMs?: number;
  /** How long a POLL may hold its answer back before saying "still pending". */
  approvalWaitMs: number;
  sbomMaxBytes: number;
  /** How concurrent signatures are coalesced into batches; undefined: each goes alone (coalesce.enabled false). */
  coalesce?: Omit<CoalescingOptions, 'log'>;
  /** Set when the API key is the one `signbridge login` stored: the daemon follows new logins and warns on expiry. */
  login?: LoginSession;
  /** The tenant came from the login (no --tenant, no tenants in the file): a login for another tenant switches to it. */
  tenantsFromLogin?: boolean;
}

export interface DaemonConfigSources {
  configFile?: string;
  socket?: string;
  certificateDir?: string;
  serviceUrl?: string;
  apiKeyFile?: string;
  /** `tenant` or `tenant=label`, from repeated --tenant flags. */
  tenants?: string[];
  inProcessDataDir?: string;
  logLevel?: string;
  /** A key source the caller built (`daemon --ci`: the CI token exchange); no login is read then. */
  apiKey?: ApiKeySource;
  env?: NodeJS.ProcessEnv;
}

export class DaemonConfigError extends Error {}

export const MAX_TOKEN_LABEL_BYTES = 32;

export function loadDaemonConfigFile(path: string): DaemonConfigFile {
  if (!existsSync(path)) throw new DaemonConfigError(`config file ${path} does not exist`);
  let parsed: unknown;
  try {
    parsed = YAML.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new DaemonConfigError(`config file ${path} is not valid YAML/JSON: ${(err as Error).message}`);
  }
  parsed ??= {};
  const first = [...Value.Errors(DaemonConfigFileSchema, parsed)][0];
  if (first) throw new DaemonConfigError(`config file ${path}: ${first.path || '/'} ${first.message}`);
  return parsed as DaemonConfigFile;
}

function tenantFromFlag(value: string): TenantConfig {
  const eq = value.indexOf('=');
  const tenantId = eq < 0 ? value : value.slice(0, eq);
  const label = eq < 0 ? tenantId : value.slice(eq + 1);
  if (!tenantId || !label) throw new DaemonConfigError(`--tenant must be TENANT or TENANT=LABEL, got "${value}"`);
  return { tenantId, label, certificates: {} };
}

export function resolveDaemonConfig(sources: DaemonConfigSources): DaemonConfig {
  const env = sources.env ?? process.env;
  const file = sources.configFile ? loadDaemonConfigFile(sources.configFile) : {};
  const base = sources.configFile ? dirname(resolve(sources.configFile)) : process.cwd();
  const fromFile = (p: string) => resolve(base, p);

  // What `signbridge login` stored fills in whatever flags, environment and file leave open (not in-process).
  const loginFiles = loginFilesInUse(env);
  let login: LoginMetadata | undefined;
  if (!sources.inProcessDataDir && !file.inProcess && !sources.apiKey) {
    try {
      login = readLoginMetadata(loginFiles);
    } catch (err) {
      throw new DaemonConfigError(`${(err as Error).message}: run \`signbridge login\` again`);
    }
  }

  let tenantsFromLogin = false;
  let tenants: TenantConfig[] = sources.tenants?.length
    ? sources.tenants.map(tenantFromFlag)
    : (file.tenants ?? []).map((t) => ({
        tenantId: t.id,
        label: t.label ?? t.id,
        certificates: Object.fromEntries(Object.entries(t.certificates ?? {}).map(([k, p]) => [k, fromFile(p)])),
        ...(t.logProofs !== undefined && { logProofs: fromFile(t.logProofs) }),
      }));
  if (tenants.length === 0 && login) {
    tenants = [{ tenantId: login.tenant_id, label: login.tenant_id, certificates: {} }];
    tenantsFromLogin = true;
  }
  if (tenants.length === 0) {
    throw new DaemonConfigError(
      'no tenants to expose: pass --tenant ID[=LABEL], list tenants in --config, or run `signbridge login`',
    );
  }
  const seen = new Set<string>();
  for (const t of tenants) {
    if (Buffer.byteLength(t.label, 'utf8') > MAX_TOKEN_LABEL_BYTES) {
      throw new DaemonConfigError(
        `token label "${t.label}" is longer than ${MAX_TOKEN_LABEL_BYTES} bytes; set a shorter label`,
      );
    }
    if (seen.has(t.tenantId)) throw new DaemonConfigError(`tenant ${t.tenantId} is listed twice`);
    seen.add(t.tenantId);
  }

  let upstream: UpstreamConfig;
  let loginSession: LoginSession | undefined;
  const inProcessDir = sources.inProcessDataDir ?? (file.inProcess ? fromFile(file.inProcess.dataDir) : undefined);
  if (inProcessDir) {
    const configFile = sources.inProcessDataDir ? undefined : file.inProcess?.config;
    upstream = {
      type: 'in-process',
      dataDir: resolve(inProcessDir),
      ...(configFile !== undefined && { configFile: fromFile(configFile) }),
    };
  } else {
    // An empty SIGNBRIDGE_SERVICE_URL counts as unset, as an empty SIGNBRIDGE_API_KEY does.
    const url = sources.serviceUrl ?? (env.SIGNBRIDGE_SERVICE_URL || file.service?.url || login?.service_url);
    if (!url) {
      throw new DaemonConfigError(
        'no service: pass --service-url URL, set SIGNBRIDGE_SERVICE_URL or service.url in --config, ' +
          'run `signbridge login --service-url URL` (or use --in-process)',
      );
    }
    let apiKey: ApiKeySource | undefined;
    const tenantApiKeys = new Map<string, ApiKeySource>();
    const keyFile = sources.apiKeyFile ?? env.SIGNBRIDGE_API_KEY_FILE;
    try {
      if (sources.apiKey) apiKey = sources.apiKey;
      else if (keyFile) apiKey = apiKeyFromFile(resolve(keyFile));
      else if (env.SIGNBRIDGE_API_KEY) apiKey = apiKeyFromEnv(env.SIGNBRIDGE_API_KEY);
      else if (file.service?.apiKeyFile) apiKey = apiKeyFromFile(fromFile(file.service.apiKeyFile));
      else if (existsSync(loginFiles.keyFile)) {
        loginSession = new LoginSession(loginFiles);
        apiKey = loginSession.apiKeySource();
      }
      if (!sources.tenants?.length) {
        for (const t of file.tenants ?? []) {
          if (t.apiKeyFile) tenantApiKeys.set(t.id, apiKeyFromFile(fromFile(t.apiKeyFile)));
        }
      }
    } catch (err) {
      throw new DaemonConfigError((err as Error).message);
    }
    const without = tenants.filter((t) => !tenantApiKeys.has(t.tenantId));
    if (!apiKey && without.length > 0) {
      throw new DaemonConfigError(
        `no credentials for ${without.map((t) => t.tenantId).join(', ')}: run \`signbridge login\`, ` +
          'pass --api-key-file FILE (mode 600), set SIGNBRIDGE_API_KEY, or set service.apiKeyFile / ' +
          'tenants[].apiKeyFile in --config',
      );
    }
    upstream = {
      type: 'remote',
      url,
      apiKey,
      tenantApiKeys,
      timeoutMs: Math.round((file.service?.timeoutSeconds ?? 30) * 1000),
      retryWithinMs:
        file.service?.retrySeconds === undefined
          ? DEFAULT_RETRY_WITHIN_MS
          : Math.round(file.service.retrySeconds * 1000),
      ...(file.service?.connections !== undefined && { connections: file.service.connections }),
    };
  }

  return {
    socketPath: resolve(
      sources.socket ?? (env.SIGNBRIDGE_SOCKET || (file.socket ? fromFile(file.socket) : defaultSocketPath(env))),
    ),
    certificateDir: resolve(
      sources.certificateDir ??
        (env.SIGNBRIDGE_CERT_DIR || (file.certificateDir ? fromFile(file.certificateDir) : defaultCertificateDir(env))),
    ),
    logLevel: sources.logLevel ?? env.SIGNBRIDGE_LOG_LEVEL ?? file.logLevel ?? 'info',
    upstream,
    tenants,
    cacheTtlMs: Math.round((file.cacheSeconds ?? 60) * 1000),
    busyPollMs: busyPollSetting(env.SIGNBRIDGE_BUSY_POLL_MS, file.busyPollMs, (m) => new DaemonConfigError(m)),
    approvalWaitMs: Math.round((file.approvalWaitSeconds ?? 5) * 1000),
    sbomMaxBytes: file.sbomMaxBytes ?? DEFAULT_SBOM_MAX_BYTES,
    ...coalesceSetting(env.SIGNBRIDGE_COALESCE, file.coalesce),
    ...(loginSession !== undefined && { login: loginSession }),
    // Only a daemon whose key is the login's follows the login's tenant.
    ...(tenantsFromLogin && loginSession !== undefined && { tenantsFromLogin }),
  };
}

/** coalesce in the file, SIGNBRIDGE_COALESCE (0 or 1) over its `enabled`. */
function coalesceSetting(
  envValue: string | undefined,
  file: DaemonConfigFile['coalesce'],
): { coalesce?: Omit<CoalescingOptions, 'log'> } {
  let enabled = file?.enabled ?? true;
  if (envValue !== undefined && envValue !== '') {
    if (envValue !== '0' && envValue !== '1') {
      throw new DaemonConfigError(`SIGNBRIDGE_COALESCE must be 0 or 1, got "${envValue}"`);
    }
    enabled = envValue === '1';
  }
  if (!enabled) return {};
  return {
    coalesce: {
      windowMs: file?.windowMs ?? DEFAULT_COALESCING.windowMs,
      maxBatch: file?.maxBatch ?? DEFAULT_COALESCING.maxBatch,
      lanes: file?.lanes ?? DEFAULT_COALESCING.lanes,
    },
  };
}
