// Event delivery (the config file's `events`, SIGNBRIDGE_EVENTS_POLL_MS; docs/events.md, "Delivery").
import { type Static, Type } from '@sinclair/typebox';
import { ConfigError } from '../config-error.js';

/** The environment variables the event settings read. */
export const EVENTS_ENV = ['SIGNBRIDGE_EVENTS_POLL_MS'] as const;

export const EventsConfigSchema = Type.Object(
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
);
export type EventsConfigFile = Static<typeof EventsConfigSchema>;

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

/** The file's keys as it spells them, with what applies when one is not set. */
export const EVENTS_DEFAULTS = {
  pollMs: 1000,
  idlePollMaxMs: 15_000,
  leaseSeconds: 60,
  retryHours: 24,
  pauseAfterFailingMinutes: 60,
  concurrency: 256,
  concurrencyPerSubscription: 16,
  remindBeforeMinutes: 60,
};

/** How long deliveries are retried (events.retryHours), which retention also needs. */
export function retryForMs(file: EventsConfigFile | undefined): number {
  return (file?.retryHours ?? EVENTS_DEFAULTS.retryHours) * 3600_000;
}

/** events.* (SIGNBRIDGE_EVENTS_POLL_MS over the file, for tests and tuning); defaults in docs/events.md. */
export function eventSetting(file: EventsConfigFile | undefined, env: NodeJS.ProcessEnv): EventSettings {
  const pollEnv = env.SIGNBRIDGE_EVENTS_POLL_MS;
  if (pollEnv !== undefined && !/^\d{2,5}$/.test(pollEnv)) {
    throw new ConfigError(`SIGNBRIDGE_EVENTS_POLL_MS must be a number of milliseconds (10-60000), got ${pollEnv}`);
  }
  return {
    pollMs: pollEnv !== undefined ? Number(pollEnv) : (file?.pollMs ?? EVENTS_DEFAULTS.pollMs),
    idlePollMaxMs: file?.idlePollMaxMs ?? EVENTS_DEFAULTS.idlePollMaxMs,
    leaseMs: (file?.leaseSeconds ?? EVENTS_DEFAULTS.leaseSeconds) * 1000,
    retryForMs: retryForMs(file),
    pauseAfterFailingMs: (file?.pauseAfterFailingMinutes ?? EVENTS_DEFAULTS.pauseAfterFailingMinutes) * 60_000,
    concurrency: file?.concurrency ?? EVENTS_DEFAULTS.concurrency,
    concurrencyPerSubscription: file?.concurrencyPerSubscription ?? EVENTS_DEFAULTS.concurrencyPerSubscription,
    remindBeforeMs: (file?.remindBeforeMinutes ?? EVENTS_DEFAULTS.remindBeforeMinutes) * 60_000,
  };
}
