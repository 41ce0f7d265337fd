// How long finished rows are kept, and how the pruner deletes them (docs/deployment.md, "Retention";
// docs/configuration.md, `retention.*`). The windows here are lower bounds the operator chooses; the pruner never
// goes below what the contract itself needs (src/retention/pruner.ts, effectiveWindows).
import { type Static, Type } from '@sinclair/typebox';
import { ConfigError } from '../config-error.js';

/** The environment variables the retention settings read. */
export const RETENTION_ENV = [
  'SIGNBRIDGE_RETENTION_ENABLED',
  'SIGNBRIDGE_RETENTION_EVENTS_HOURS',
  'SIGNBRIDGE_RETENTION_REQUESTS_DAYS',
  'SIGNBRIDGE_RETENTION_BATCH_ROWS',
  'SIGNBRIDGE_RETENTION_INTERVAL_SECONDS',
] as const;

/** Pruning what the contract lets go (docs/deployment.md, "Retention"; retentionSetting). */
export const RetentionConfigSchema = Type.Object(
  {
    enabled: Type.Optional(Type.Boolean()),
    eventsHours: Type.Optional(Type.Number({ minimum: 0.001, maximum: 87_600 })),
    requestsDays: Type.Optional(Type.Number({ minimum: 0.001, maximum: 3650 })),
    batchRows: Type.Optional(Type.Integer({ minimum: 10, maximum: 10_000 })),
    batchesPerPass: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000 })),
    intervalSeconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 86_400 })),
  },
  { additionalProperties: false },
);
export type RetentionConfigFile = Static<typeof RetentionConfigSchema>;

export interface RetentionSettings {
  /** Off: nothing is ever deleted (the tables grow for ever). */
  enabled: boolean;
  /**
   * Finished deliveries, and events whose deliveries are all finished, are kept this long after the event
   * (default: the dispatcher's retry window, 24 h). Never less than the retry window.
   */
  eventsMs: number;
  /**
   * Signing requests decided for good (approved, rejected, expired, denied) are kept this long after the decision
   * (default 7 days): a client may still collect the answer with `request_id`. Never less than the retry window of
   * approvals (a retried `sign` gets a decided request's outcome within it), nor the 24 hours an Idempotency-Key is
   * remembered (a replayed 202 names the request to collect).
   */
  requestsMs: number;
  /** Rows one DELETE statement removes at most (default 1000). */
  batchRows: number;
  /** Batches one pass deletes at most per kind of row (default 100), so a pass that catches up ends too. */
  batchesPerPass: number;
  /** Time between two passes of one instance (default 60 s). */
  intervalMs: number;
}

export const RETENTION_DEFAULTS: RetentionSettings = {
  enabled: true,
  eventsMs: 24 * 3600_000,
  requestsMs: 7 * 24 * 3600_000,
  batchRows: 1000,
  batchesPerPass: 100,
  intervalMs: 60_000,
};

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
export function retentionSetting(
  file: RetentionConfigFile | undefined,
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
