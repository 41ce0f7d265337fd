// Delivers the outbox (docs/events.md, "Delivery"). Every instance runs one; the store's leases make each delivery
// one sender's at a time, and a dead instance's leases run out for another to take over. A pass: fan new events out
// to their subscriptions, lease what is due, send it, record each outcome under the lease. Between passes it sleeps
// pollMs, or less when this process wrote an event (nudge()); an idle dispatcher backs off (below). While a pass's attempts wait for their answers, the
// pass renews their leases, so only a dead (or stalled) sender's leases end.
//
// At least once: a sender that dies after the receiver answered 2xx but before recording it leaves the delivery to
// be sent again once its lease ends, with the same webhook-id; receivers dedupe by it.
import { randomBytes } from 'node:crypto';
import type { DeliveryClaim } from '../store/event-store.js';
import type { Store } from '../store/store.js';

/** What happened to one attempt (src/events/webhook-sender.ts and the mailer classify their answers so). */
export type DeliveryResult =
  | { outcome: 'delivered'; status?: number }
  | { outcome: 'retry'; status?: number; retryAfterMs?: number; error: string }
  | { outcome: 'gone'; status?: number; error: string }
  | { outcome: 'failed'; status?: number; error: string };

/** Sends one claimed delivery to its destination (webhook, chat, mail). Must not throw. */
export type Deliver = (claim: DeliveryClaim) => Promise<DeliveryResult>;

export interface DispatcherSettings {
  /** Sleep between passes when idle (default 1000 ms). */
  pollMs?: number;
  /**
   * Longest sleep of an idle dispatcher (default 15 s): each idle pass doubles the sleep from pollMs up to this,
   * and an event written by this process (nudge) brings it back to pollMs. A dispatcher polling every second kept
   * a database connection busy for good: behind PgBouncer in session mode each instance then held a server
   * connection for ever (pg's pool closes a connection only after 10 s unused), and an admin command found none.
   */
  idlePollMaxMs?: number;
  /**
   * How long a lease holds a delivery for its sender (default 60 s): how soon another instance takes over the
   * deliveries of one that died. Renewed every third of it while an attempt waits for its answer, so it may be
   * shorter than an attempt's time-out.
   */
  leaseMs?: number;
  /** Deliveries leased and sent at once by this instance (default 16). */
  batch?: number;
  /** First retry delay; doubled each attempt (default 5 s). */
  retryBaseMs?: number;
  /** Longest retry delay (default 1 h). */
  retryMaxMs?: number;
  /** Retries stop this long after the event (default 24 h); the delivery is then failed. */
  retryForMs?: number;
  /** A subscription whose attempts failed this many times in a row is paused (default 50). */
  pauseAfterFailures?: number;
  /** Longest Retry-After honoured (default 1 h). */
  maxRetryAfterMs?: number;
  /** Called with each problem worth a log line (never with secrets). */
  onError?: (message: string) => void;
  /** Called after each recorded outcome (metrics, tests). */
  onOutcome?: (claim: DeliveryClaim, result: DeliveryResult) => void;
}

export class EventDispatcher {
  /** Names this instance's leases; a restarted process is another owner. */
  readonly owner = `${process.pid}-${randomBytes(6).toString('hex')}`;
  private readonly pollMs: number;
  private readonly leaseMs: number;
  private readonly batch: number;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = true;
  private again = false;
  /** The sleep after the next idle pass (pollMs, doubling up to idlePollMaxMs). */
  private idleMs: number;

  constructor(
    private readonly store: Store,
    private readonly deliver: Deliver,
    private readonly settings: DispatcherSettings = {},
    private readonly now: () => Date = () => new Date(),
    /** Runs at the start of every pass (expiry, reminders; src/events/event-sweeps.ts). */
    private readonly sweep?: () => Promise<void>,
  ) {
    this.pollMs = settings.pollMs ?? 1000;
    this.idleMs = this.pollMs;
    this.leaseMs = settings.leaseMs ?? 60_000;
    this.batch = settings.batch ?? 16;
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.schedule(0);
  }

  /**
   * This process wrote an event (the store calls it inside the writing transaction): pass within pollMs, not after
   * an idle dispatcher's longer sleep. Not at once: the transaction has not committed yet.
   */
  nudge(): void {
    if (this.stopped) return;
    if (this.idleMs === this.pollMs && !this.running) return; // already polling at pollMs
    this.idleMs = this.pollMs;
    if (this.running) this.again = true;
    else this.schedule(this.pollMs);
  }

  /** Stops after the pass under way; what it leased and did not finish goes to others when the leases end. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
  }

  /** One pass now (tests, `admin webhook test`); resolves when it is done. */
  async runOnce(): Promise<number> {
    return this.pass();
  }

  private schedule(ms: number): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.running = this.loop().finally(() => {
        this.running = undefined;
      });
    }, ms);
    this.timer.unref();
  }

  private async loop(): Promise<void> {
    let sent = 0;
    try {
      sent = await this.pass();
    } catch (err) {
      // The store is down, or a query failed: the next pass tries again (store faults clear by themselves).
      this.settings.onError?.(`event delivery pass failed, retrying in ${this.pollMs} ms: ${(err as Error).message}`);
    }
    if (this.stopped) return;
    const busy = sent > 0 || this.again;
    this.again = false;
    if (busy) {
      this.idleMs = this.pollMs;
      this.schedule(0);
      return;
    }
    this.schedule(this.idleMs);
    this.idleMs = Math.min(this.idleMs * 2, Math.max(this.pollMs, this.settings.idlePollMaxMs ?? 15_000));
  }

  /** Fans out, leases and sends one batch; returns how many deliveries it attempted. */
  private async pass(): Promise<number> {
    if (this.sweep) {
      await this.sweep().catch((err: Error) => this.settings.onError?.(`event sweep failed: ${err.message}`));
    }
    const at = this.now();
    while ((await this.store.events.fanOut(200, at.toISOString())) === 200) {
      // A backlog: fan it all out before sending, so order keys see every earlier delivery.
    }
    const claims = await this.store.events.claimDeliveries(
      this.owner,
      at.toISOString(),
      new Date(at.getTime() + this.leaseMs).toISOString(),
      this.batch,
    );
    if (claims.length === 0) return 0;
    // Without renewal a receiver slower than the lease (a 10 s time-out, a 3 s lease) lets another instance lease
    // and send the same delivery while this attempt still waits: two 200s for one event from live senders.
    const sending = new Set(claims);
    let renewing: Promise<void> | undefined; // one at a time: a tick skips rather than piling up behind a slow database
    const renewal = setInterval(
      () => {
        renewing ??= this.renew(sending).finally(() => {
          renewing = undefined;
        });
      },
      Math.max(1, Math.floor(this.leaseMs / 3)),
    );
    renewal.unref();
    try {
      await Promise.all(
        claims.map((claim) =>
          this.attempt(claim).finally(() => {
            sending.delete(claim);
          }),
        ),
      );
    } finally {
      clearInterval(renewal);
      await renewing;
    }
    return claims.length;
  }

  /** Extends the leases of the attempts still under way; a failure is logged, and the leases may then end. */
  private async renew(sending: ReadonlySet<DeliveryClaim>): Promise<void> {
    if (sending.size === 0) return;
    try {
      await this.store.events.renewLeases([...sending], new Date(this.now().getTime() + this.leaseMs).toISOString());
    } catch (err) {
      this.settings.onError?.(`could not renew the leases of deliveries under way: ${(err as Error).message}`);
    }
  }

  private async attempt(claim: DeliveryClaim): Promise<void> {
    let result: DeliveryResult;
    try {
      result = await this.deliver(claim);
    } catch (err) {
      result = { outcome: 'retry', error: (err as Error).message };
    }
    const at = this.now();
    try {
      await this.record(claim, result, at);
    } catch (err) {
      // Not recorded: the lease ends and the delivery is tried again (at least once).
      this.settings.onError?.(`could not record the delivery of ${claim.event.id}: ${(err as Error).message}`);
    }
    this.settings.onOutcome?.(claim, result);
  }

  private async record(claim: DeliveryClaim, result: DeliveryResult, at: Date): Promise<void> {
    const events = this.store.events;
    const iso = at.toISOString();
    if (result.outcome === 'delivered') {
      await events.markDelivered(claim, result.status ?? null, iso);
      return;
    }
    const status = result.status ?? null;
    const error = result.error.slice(0, 1000);
    if (result.outcome === 'gone') {
      await events.markFailedAttempt(
        claim,
        { status, error, retryAt: null, pauseReason: `the receiver answered ${status ?? 410} Gone: ${error}` },
        iso,
      );
      return;
    }
    const retryAt = result.outcome === 'retry' ? this.retryTime(claim, result.retryAfterMs, at) : null;
    const retryForMs = this.settings.retryForMs ?? 24 * 3600_000;
    const failures = await events.markFailedAttempt(
      claim,
      {
        status,
        error,
        retryAt,
        ...(retryAt === null &&
          result.outcome === 'retry' && {
            pauseReason: `deliveries kept failing for ${Math.round(retryForMs / 3600_000)} h: ${error}`,
          }),
      },
      iso,
    );
    const pauseAfter = this.settings.pauseAfterFailures ?? 50;
    if (failures !== undefined && failures >= pauseAfter) {
      await events.pauseSubscription(claim.subscription.id, `${failures} attempts in a row failed: ${error}`, iso);
    }
  }

  /** Exponential backoff with jitter, or the receiver's Retry-After; null once retries would go past retryForMs. */
  private retryTime(claim: DeliveryClaim, retryAfterMs: number | undefined, at: Date): string | null {
    const base = this.settings.retryBaseMs ?? 5000;
    const max = this.settings.retryMaxMs ?? 3600_000;
    const exponential = Math.min(max, base * 2 ** Math.min(30, claim.attempts - 1));
    // "Equal jitter": at least half the delay, so retries of many deliveries spread out but never come early.
    const jittered = exponential / 2 + Math.random() * (exponential / 2);
    const honoured = retryAfterMs === undefined ? 0 : Math.min(retryAfterMs, this.settings.maxRetryAfterMs ?? 3600_000);
    const delay = Math.max(jittered, honoured);
    const next = at.getTime() + delay;
    if (next - Date.parse(claim.createdAt) > (this.settings.retryForMs ?? 24 * 3600_000)) return null;
    return new Date(next).toISOString();
  }
}
