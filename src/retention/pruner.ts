// The pruner (docs/deployment.md, "Retention"): every instance runs one on the background store, on a timer of its
// own. A pass deletes, in statements of at most batchRows rows, what the contract lets go: finished event deliveries
// and events whose deliveries are all finished, once the retry window has passed; signing requests decided for good,
// once a retry can no longer continue them; idempotency records past their 24 hours. Never the audit log, the
// transparency log, signature records or their lookups (src/store/retention/retention-store.ts).
//
// Several instances prune at once without harm: deleting is idempotent, and on PostgreSQL each statement skips rows
// another holds. A pass that fails is logged and the next one carries on; nothing is left half done that matters
// (a delivery deleted before its event leaves an event with none, which the next pass deletes).
import type { Store } from '../store/store.js';
import type { RetentionSettings } from './retention-settings.js';

/** What the contract needs kept, whatever the settings say. */
export interface RetentionFloors {
  /** The dispatcher's retry window (events.retryHours): a delivery may be retried until then. */
  retryForMs: number;
  /** How long a retried `sign` gets a decided request's outcome (approvals.retryWindowMinutes). */
  approvalRetryWindowMs: number;
  /** How long an Idempotency-Key is remembered (src/api/idempotency.ts). */
  idempotencyLifetimeMs: number;
}

export interface PruneCounts {
  deliveries: number;
  events: number;
  requests: number;
  idempotencyKeys: number;
}

export interface PrunerOptions {
  settings: RetentionSettings;
  floors: RetentionFloors;
  now?: () => Date;
  /** After each pass that deleted something: the counts and how long the pass took (a log line, metrics). */
  onPruned?: (counts: PruneCounts, ms: number) => void;
  /** A pass failed (the store is down): the next pass tries again. */
  onError?: (message: string) => void;
}

/** The windows a pass prunes with: the settings, raised to what the contract needs. */
export function effectiveWindows(
  settings: RetentionSettings,
  floors: RetentionFloors,
): { eventsMs: number; requestsMs: number; idempotencyMs: number } {
  return {
    eventsMs: Math.max(settings.eventsMs, floors.retryForMs),
    // A retried `sign` with its Idempotency-Key gets the first answer, a 202 with the request_id, for 24 hours; the
    // client then collects that request: it must still be there.
    requestsMs: Math.max(settings.requestsMs, floors.approvalRetryWindowMs, floors.idempotencyLifetimeMs),
    idempotencyMs: floors.idempotencyLifetimeMs,
  };
}

export class Pruner {
  private readonly windows: ReturnType<typeof effectiveWindows>;
  private readonly now: () => Date;
  /** Where the walk through the outbox goes on: past events that stay (a paused subscription's backlog). */
  private eventCursor = 0;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<unknown> = Promise.resolve();
  private stopped = true;

  constructor(
    private readonly store: Store,
    private readonly opts: PrunerOptions,
  ) {
    this.windows = effectiveWindows(opts.settings, opts.floors);
    this.now = opts.now ?? (() => new Date());
  }

  /** The windows in force (for the start's log line and the docs' table). */
  get retention(): { eventsMs: number; requestsMs: number; idempotencyMs: number } {
    return { ...this.windows };
  }

  /** False when retention.enabled is off: start() then does nothing (runOnce still prunes, for tools). */
  get enabled(): boolean {
    return this.opts.settings.enabled;
  }

  start(): void {
    if (!this.enabled || !this.stopped) return;
    this.stopped = false;
    this.schedule();
  }

  /** Stops after the pass under way. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
  }

  /** One pass now (tests, tools); runs after a pass under way, never beside it. */
  async runOnce(): Promise<PruneCounts> {
    const pass = this.running.then(() => this.pass());
    this.running = pass.catch(() => undefined);
    return pass;
  }

  private schedule(): void {
    this.timer = setTimeout(() => {
      this.runOnce()
        .catch((err: Error) => this.opts.onError?.(`pruning failed, trying again in the next pass: ${err.message}`))
        .finally(() => {
          if (!this.stopped) this.schedule();
        });
    }, this.opts.settings.intervalMs);
    this.timer.unref();
  }

  private async pass(): Promise<PruneCounts> {
    const started = performance.now();
    const at = this.now().getTime();
    const before = (ms: number) => new Date(at - ms).toISOString();
    const { batchRows, batchesPerPass } = this.opts.settings;
    const retention = this.store.retention;
    const counts: PruneCounts = { deliveries: 0, events: 0, requests: 0, idempotencyKeys: 0 };

    const eventsBefore = before(this.windows.eventsMs);
    for (let i = 0; i < batchesPerPass; i++) {
      const step = await retention.pruneEventsStep(this.eventCursor, eventsBefore, batchRows);
      counts.deliveries += step.deliveries;
      counts.events += step.events;
      this.eventCursor = step.done ? 0 : step.lastSeq;
      if (step.done) break;
    }
    const requestsBefore = before(this.windows.requestsMs);
    for (let i = 0; i < batchesPerPass; i++) {
      const n = await retention.pruneFinishedRequests(requestsBefore, batchRows);
      counts.requests += n;
      if (n < batchRows) break;
    }
    const keysBefore = before(this.windows.idempotencyMs);
    for (let i = 0; i < batchesPerPass; i++) {
      const n = await retention.pruneIdempotencyKeys(keysBefore, batchRows);
      counts.idempotencyKeys += n;
      if (n < batchRows) break;
    }
    if (counts.deliveries + counts.events + counts.requests + counts.idempotencyKeys > 0) {
      this.opts.onPruned?.(counts, performance.now() - started);
    }
    return counts;
  }
}
