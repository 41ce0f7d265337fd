// The server process's own settings: its data dir, where it listens, what it logs, and how it takes requests
// (proxies in front, body and time limits, its public URL, busy polling). docs/configuration.md.
import { isIP } from 'node:net';
import { availableParallelism, homedir } from 'node:os';
import { join, resolve } from 'node:path';
import { type Static, Type } from '@sinclair/typebox';
import { busyPollSetting, DEFAULT_BUSY_POLL_MS } from '../busy-poll.js';
import { ConfigError } from '../config-error.js';
import { parseListen } from '../net/listen-address.js';

/** The most request workers one instance runs (`workers`). */
export const MAX_WORKERS = 256;

/** The largest young-generation semi-space a worker may be given (V8 takes up to 1 GB; past this it only wastes). */
export const MAX_SEMI_SPACE_MB = 256;
/** The largest resident set a worker may be allowed before it is replaced (64 GB). */
export const MAX_RESTART_ABOVE_MB = 65_536;
/** Below this a worker would be replaced before it finished starting (a worker starts at about 200 MB). */
export const MIN_RESTART_ABOVE_MB = 256;

/** The environment variables the server's own settings read. */
export const SERVER_ENV = [
  'SIGNBRIDGE_DATA_DIR',
  'SIGNBRIDGE_LISTEN',
  'SIGNBRIDGE_LOG_LEVEL',
  'SIGNBRIDGE_TRUST_PROXY',
  'SIGNBRIDGE_REQUEST_TIMEOUT_SECONDS',
  'SIGNBRIDGE_PUBLIC_URL',
  'SIGNBRIDGE_BUSY_POLL_MS',
  'SIGNBRIDGE_WORKERS',
  'SIGNBRIDGE_WORKER_SEMI_SPACE_MB',
  'SIGNBRIDGE_WORKER_RESTART_ABOVE_MB',
  // Read by src/start-timing.ts: `1` prints where each step of a start went (a diagnosis, not a setting).
  'SIGNBRIDGE_START_TIMING',
] as const;

/** The config file's top-level keys these settings take (config.ts places them in the file's schema). */
export const ServerConfigProperties = {
  dataDir: Type.Optional(Type.String({ minLength: 1 })),
  listen: Type.Optional(Type.String({ minLength: 1 })),
  logLevel: Type.Optional(
    Type.Union(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].map((l) => Type.Literal(l))),
  ),
  /** Addresses or CIDRs of the proxies in front (docs/configuration.md); `true` is refused (trustProxySetting). */
  trustProxy: Type.Optional(Type.Union([Type.Boolean(), Type.Array(Type.String({ minLength: 1 })), Type.String()])),
  bodyLimitBytes: Type.Optional(Type.Integer({ minimum: 1024 })),
  /** Time for a whole request to arrive (headers and body); then 408 request_timeout. */
  requestTimeoutSeconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 3600 })),
  publicUrl: Type.Optional(Type.String()),
  /** How long the event loop keeps polling after a request (src/busy-poll.ts); 0 turns it off. */
  busyPollMs: Type.Optional(Type.Number({ minimum: 0, maximum: 10 })),
  /** Processes that take requests behind the one listening address (src/workers/); 1: this process alone. */
  workers: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_WORKERS })),
  /** What each request worker may hold (workerMemorySetting; docs/configuration.md, "Request workers"). */
  workerMemory: Type.Optional(
    Type.Object(
      {
        semiSpaceMb: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_SEMI_SPACE_MB })),
        restartAboveMb: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_RESTART_ABOVE_MB })),
      },
      { additionalProperties: false },
    ),
  ),
};

/** The file's keys as it spells them, with what applies when one is not set. */
export const SERVER_DEFAULTS = {
  listen: '127.0.0.1:8080',
  logLevel: 'info',
  bodyLimitBytes: 4 * 1024 * 1024,
  requestTimeoutSeconds: 60,
};

/** The config file's keys above, as the file gives them. */
type ServerConfigFile = Static<ReturnType<typeof Type.Object<typeof ServerConfigProperties>>>;

/**
 * --data-dir over SIGNBRIDGE_DATA_DIR over the file's dataDir. With PostgreSQL the data dir holds only the embedded
 * token (if any): admin commands need none of it, so it defaults to the XDG data home there.
 */
export function dataDirSetting(
  flag: string | undefined,
  env: NodeJS.ProcessEnv,
  file: ServerConfigFile,
  onPostgres: boolean,
): string {
  const dataDirRaw =
    flag ??
    env.SIGNBRIDGE_DATA_DIR ??
    file.dataDir ??
    (onPostgres ? join(env.XDG_DATA_HOME ?? join(homedir(), '.local', 'share'), 'signbridge') : undefined);
  if (!dataDirRaw) {
    throw new ConfigError('no data dir: pass --data-dir DIR, set SIGNBRIDGE_DATA_DIR, or set dataDir in --config');
  }
  return resolve(dataDirRaw);
}

/** --listen over SIGNBRIDGE_LISTEN over the file's listen. */
export function listenSetting(
  flag: string | undefined,
  env: NodeJS.ProcessEnv,
  file: ServerConfigFile,
): { host: string; port: number } {
  return parseListen(flag ?? env.SIGNBRIDGE_LISTEN ?? file.listen ?? SERVER_DEFAULTS.listen);
}

/** How the server takes requests and logs; `onPostgres` sets busy polling's default. */
export function requestHandlingSetting(env: NodeJS.ProcessEnv, file: ServerConfigFile, onPostgres: boolean) {
  const publicUrl = env.SIGNBRIDGE_PUBLIC_URL ?? file.publicUrl;
  return {
    logLevel: env.SIGNBRIDGE_LOG_LEVEL ?? file.logLevel ?? SERVER_DEFAULTS.logLevel,
    trustProxy: trustProxySetting(env.SIGNBRIDGE_TRUST_PROXY ?? file.trustProxy),
    bodyLimit: file.bodyLimitBytes ?? SERVER_DEFAULTS.bodyLimitBytes,
    requestTimeoutMs: requestTimeoutSetting(env.SIGNBRIDGE_REQUEST_TIMEOUT_SECONDS, file.requestTimeoutSeconds),
    // Off by default on PostgreSQL: there the loop waits for the database under load too, and polling through
    // those waits took the CPU of PostgreSQL and of other instances (docs/benchmarks.md: 14-18% of the throughput).
    busyPollMs: busyPollSetting(
      env.SIGNBRIDGE_BUSY_POLL_MS,
      file.busyPollMs,
      (m) => new ConfigError(m),
      onPostgres ? 0 : DEFAULT_BUSY_POLL_MS,
    ),
    ...(publicUrl !== undefined && { publicUrl }),
  };
}

/** SIGNBRIDGE_REQUEST_TIMEOUT_SECONDS over the file's requestTimeoutSeconds over 60 s; whole seconds, 1 to 3600. */
function requestTimeoutSetting(fromEnv: string | undefined, fromFile: number | undefined): number {
  if (fromEnv === undefined || fromEnv === '') return (fromFile ?? SERVER_DEFAULTS.requestTimeoutSeconds) * 1000;
  if (!/^\d{1,4}$/.test(fromEnv) || Number(fromEnv) < 1 || Number(fromEnv) > 3600) {
    throw new ConfigError(`SIGNBRIDGE_REQUEST_TIMEOUT_SECONDS must be whole seconds from 1 to 3600, got "${fromEnv}"`);
  }
  return Number(fromEnv) * 1000;
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

/** The most request workers the default gives (`workers` may say more). */
export const DEFAULT_WORKERS_MAX = 8;

/**
 * The default number of request workers: one per core the process may use (os.availableParallelism()) but one,
 * which the primary (the SQLite writer, the background passes) and the signing threads share, at most
 * DEFAULT_WORKERS_MAX; 1 (the single process) on one or two cores, where the workers' hand-offs cost more CPU than
 * a second event loop gains (docs/benchmarks.md, "Request workers").
 */
export function defaultWorkers(cores = availableParallelism()): number {
  return Math.max(1, Math.min(cores - 1, DEFAULT_WORKERS_MAX));
}

/**
 * --workers over SIGNBRIDGE_WORKERS over the file's workers over defaultWorkers(): how many processes take requests
 * behind the one listening address. 1 is the single process of before (no primary, no workers).
 */
export function workersSetting(flag: string | undefined, env: NodeJS.ProcessEnv, file: ServerConfigFile): number {
  const given = flag ?? env.SIGNBRIDGE_WORKERS;
  if (given === undefined || given === '') return file.workers ?? defaultWorkers();
  if (!/^\d{1,3}$/.test(given) || Number(given) < 1 || Number(given) > MAX_WORKERS) {
    const source = flag !== undefined ? '--workers' : 'SIGNBRIDGE_WORKERS';
    throw new ConfigError(`${source} must be a whole number from 1 to ${MAX_WORKERS}, got "${given}"`);
  }
  return Number(given);
}

/**
 * What each request worker may hold. `semiSpaceMb`: V8's young generation (its semi-spaces) of each worker, given as
 * --max-semi-space-size; V8 sizes it for the machine's memory (64 MB semi-spaces, 128 MB of young generation, on a
 * 23 GB test host), which a worker fills under load and keeps. 8 (16 MB of young generation) because a young
 * generation of 32 MB left each worker ~70 MB more of malloc's memory under load at the same signing rate
 * (docs/benchmarks.md, "Memory under sustained load"). 0 leaves it to V8. `restartAboveMb`: a
 * worker whose resident set stays above this is replaced by a fresh one (src/workers/memory-bounds.ts); SoftHSM
 * keeps a few bytes of every signature (docs/benchmarks.md), so only a new process gives them back. 0: never.
 */
export type WorkerMemorySettings = {
  semiSpaceMb: number;
  restartAboveMb: number;
};

export const WORKER_MEMORY_DEFAULTS: WorkerMemorySettings = { semiSpaceMb: 8, restartAboveMb: 0 };

/** SIGNBRIDGE_WORKER_SEMI_SPACE_MB / SIGNBRIDGE_WORKER_RESTART_ABOVE_MB over the file's workerMemory over the defaults. */
export function workerMemorySetting(env: NodeJS.ProcessEnv, file: ServerConfigFile): WorkerMemorySettings {
  const semiSpaceMb = wholeMb(
    'SIGNBRIDGE_WORKER_SEMI_SPACE_MB',
    env.SIGNBRIDGE_WORKER_SEMI_SPACE_MB,
    file.workerMemory?.semiSpaceMb ?? WORKER_MEMORY_DEFAULTS.semiSpaceMb,
    MAX_SEMI_SPACE_MB,
  );
  const restartAboveMb = wholeMb(
    'SIGNBRIDGE_WORKER_RESTART_ABOVE_MB',
    env.SIGNBRIDGE_WORKER_RESTART_ABOVE_MB,
    file.workerMemory?.restartAboveMb ?? WORKER_MEMORY_DEFAULTS.restartAboveMb,
    MAX_RESTART_ABOVE_MB,
  );
  if (restartAboveMb > 0 && restartAboveMb < MIN_RESTART_ABOVE_MB) {
    throw new ConfigError(
      `workerMemory.restartAboveMb must be 0 (never) or at least ${MIN_RESTART_ABOVE_MB}: a worker starts at about ` +
        `200 MB and would be replaced again and again (got ${restartAboveMb})`,
    );
  }
  return { semiSpaceMb, restartAboveMb };
}

function wholeMb(name: string, fromEnv: string | undefined, fallback: number, max: number): number {
  if (fromEnv === undefined || fromEnv === '') return fallback;
  if (!/^\d{1,6}$/.test(fromEnv) || Number(fromEnv) > max) {
    throw new ConfigError(`${name} must be a whole number of MB from 0 to ${max}, got "${fromEnv}"`);
  }
  return Number(fromEnv);
}
