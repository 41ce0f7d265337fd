// Delivers the outbox (docs/events.md, "Delivery"). Every instance runs one; the store's leases make each delivery
// one sender's at a time, and a dead instance's leases run out for another to take over. A pass: fan new events out
// to their subscriptions, lease what is due for each subscription with room, and start sending it. Attempts are not
// waited for as a batch: each subscription has its own limit of attempts in flight (and the instance one in all),
// and each attempt that ends starts another pass, so a receiver that hangs holds only its own subscription's slots
// while every other subscription's deliveries keep flowing. Between passes it sleeps pollMs, or less when this
// process wrote an event (nudge()); an idle dispatcher backs off (below). While attempts wait for their answers the
// dispatcher renews their leases, so only a dead (or stalled) sender's leases end.
//
// At least once: a sender that dies after the receiver answered 2xx but before recording it leaves the delivery to
// be sent again once its lease ends, with the same webhook-id; receivers dedupe by it.
//
// Events read from the log (docs/events.md, "Events read from the log"): a subscription that wants signature.signed
// is also handed the `signed` entries of signatures made at once, read after its cursor into the audit log
// (src/store/events/event-log-cursors.ts) and turned into their events as they are sent: one per entry, or one per
// item of a batch entry (sign_batch), in item order. What a lease read holds the subscription's slots like leased
// deliveries; once every attempt of it has ended, the cursor moves past the events sent (into a batch, when it
// stopped inside one), and the attempts that failed are kept as delivery rows, retried from there like any other.
// A subscription whose last read was delivered in full gets more attempts in flight for the next
// (perSubscriptionFromLog, issue 46): under signing load an attempt waits mostly for turns of the two event loops,
// not for the CPU, so a backlog drains only with more of them under way; a receiver that hangs or fails never got
// there, or drops back.
//
// Failing and pausing: a subscription whose attempts fail gets one attempt in flight at a time until one succeeds
// (a struggling receiver is not hammered, and holds one slot), and while a retry is scheduled its deliveries not
// tried yet are held behind it by the store (src/store/events/event-holds.ts), so it gets the retry schedule only. Failing for pauseAfterFailingMs (default 1 h) with no
// success pauses it; a paused subscription is probed with one delivery at a time on the back-off schedule (a wait
// as long as it has been failing, up to retryMaxMs), and the first 2xx resumes it with its backlog due at once.
import { randomBytes } from 'node:crypto';
import type {
  DeliveryClaim,
  DeliveryWant,
  LoggedSignature,
  LogLease,
  LogPosition,
  SubscriptionRecord,
} from '../store/events/event-store.js';
import type { EventRecord } from '../store/records/event-kinds.js';
import type { Store } from '../store/store.js';
import { type DeliveryResult, type RetrySchedule, recordOutcome } from './delivery-outcome.js';
import { EventBuilder } from './event-builder.js';

/** Sends one claimed delivery to its destination (webhook, chat, mail). Must not throw. */
export type Deliver = ((claim: DeliveryClaim) => Promise<DeliveryResult>) & {
  /**
   * Closes the kept-alive connections of every subscription not in `active` (removed or paused); every one with
   * none. Called with each pass's list of subscriptions, and with none once the dispatcher stops.
   */
  keepConnections?: (active: ReadonlySet<string>) => void;
};

export interface DispatcherSettings extends RetrySchedule {
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
  /** Attempts in flight at once for one subscription, from this instance (default 16). */
  perSubscription?: number;
  /**
   * Attempts in flight at once for the events read from the log of a subscription whose last read was delivered
   * in full (default 4 x perSubscription): a healthy receiver with a backlog. Its connections are bounded by the
   * same number (destinations.ts).
   */
  perSubscriptionFromLog?: number;
  /**
   * Events read from the log after a subscription's cursor at once (an entry each, or a batch's item each), and sent
   * through its slots before the cursor moves (default 256): one lease, one read and one cursor write for that many.
   */
  logBatch?: number;
  /**
   * Attempts in flight at once from this instance, all subscriptions together (default 256): bounds the sockets
   * and memory. Each hanging receiver holds at most perSubscription of them (one once its attempts time out).
   */
  concurrency?: number;
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
  private readonly perSubscription: number;
  private readonly perSubscriptionFromLog: number;
  private readonly logBatch: number;
  private readonly concurrency: number;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = true;
  private again = false;
  /** The sleep after the next idle pass (pollMs, doubling up to idlePollMaxMs). */
  private idleMs: number;
  /** The attempts under way, by subscription id; each entry's promise settles once its outcome is recorded. */
  private readonly inFlight = new Map<string, Map<DeliveryClaim, Promise<void>>>();
  private inFlightCount = 0;
  private renewal: NodeJS.Timeout | undefined;
  private renewing: Promise<void> | undefined;
  /** Where the next pass starts in the list of subscriptions: each pass one further, so none is always last. */
  private turn = 0;
  /** The subscriptions whose cursor into the log this instance holds, with a batch of its entries being sent. */
  private readonly logBatches = new Map<string, Promise<void>>();
  /** The subscriptions whose last read from the log was delivered in full: they get perSubscriptionFromLog. */
  private readonly deliveredInFull = new Set<string>();

  constructor(
    private readonly store: Store,
    private readonly deliver: Deliver,
    private readonly settings: DispatcherSettings = {},
    private readonly now: () => Date = () => new Date(),
    /** Runs at the start of every pass (expiry, reminders; src/events/event-sweeps.ts). */
    private readonly sweep?: () => Promise<void>,
    /**
     * Turns a `signed` entry (or one item of a batch entry) into its signature.signed event (the app's builder, with
     * the console's links).
     */
    private readonly eventOfEntry: (entry: LoggedSignature) => Promise<EventRecord> = (entry) =>
      new EventBuilder(store, undefined).signedFromLog(entry),
  ) {
    this.pollMs = settings.pollMs ?? 1000;
    this.idleMs = this.pollMs;
    this.leaseMs = settings.leaseMs ?? 60_000;
    this.perSubscription = Math.max(1, settings.perSubscription ?? 16);
    this.perSubscriptionFromLog = Math.max(
      this.perSubscription,
      settings.perSubscriptionFromLog ?? perSubscriptionFromLog(this.perSubscription),
    );
    this.logBatch = Math.max(1, settings.logBatch ?? 256);
    this.concurrency = Math.max(1, settings.concurrency ?? 256);
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

  /**
   * Stops passing, and waits for the attempts under way to be recorded (at most a receiver's time-out); what is
   * leased and not sent goes to others when the leases end.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
    await this.settled();
    await this.renewing;
    this.deliver.keepConnections?.(new Set());
  }

  /** One pass now (tests, `admin webhook test`); resolves when the attempts it started are recorded. */
  async runOnce(): Promise<number> {
    const started = await this.pass();
    await Promise.all(started);
    return started.length;
  }

  /** The attempts under way now, settled (tests). */
  async settled(): Promise<void> {
    while (this.inFlightCount > 0 || this.logBatches.size > 0) {
      await Promise.all([...this.inFlight.values()].flatMap((m) => [...m.values()]));
      await Promise.all(this.logBatches.values());
    }
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

  /** An attempt ended: its slot is free for the next due delivery, now, not after the others of its pass. */
  private refill(): void {
    if (this.stopped) return;
    this.idleMs = this.pollMs;
    if (this.running) this.again = true;
    else this.schedule(0);
  }

  private async loop(): Promise<void> {
    let sent = 0;
    try {
      sent = (await this.pass()).length;
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

  /**
   * Fans out, leases what is due for each subscription with room, and starts sending it; returns the attempts it
   * started (each settles once its outcome is recorded).
   */
  private async pass(): Promise<Promise<void>[]> {
    if (this.sweep) {
      await this.sweep().catch((err: Error) => this.settings.onError?.(`event sweep failed: ${err.message}`));
    }
    const at = this.now();
    while ((await this.store.events.fanOut(200, at.toISOString())) === 200) {
      // A backlog: fan it all out before sending, so order keys see every earlier delivery.
    }
    const room = this.concurrency - this.inFlightCount;
    if (room <= 0) return [];
    const iso = at.toISOString();
    const leaseUntil = new Date(at.getTime() + this.leaseMs).toISOString();
    const subscriptions = await this.store.events.listSubscriptions();
    this.deliver.keepConnections?.(new Set(subscriptions.filter((s) => s.pausedAt === null).map((s) => s.id)));
    if (subscriptions.length === 0) return [];
    const start = this.turn++ % subscriptions.length;
    const wants: DeliveryWant[] = [];
    for (const subscription of [...subscriptions.slice(start), ...subscriptions.slice(0, start)]) {
      const want = await this.want(subscription, iso, leaseUntil);
      if (want) wants.push(want);
    }
    const started: Promise<void>[] = [];
    if (wants.length > 0) {
      // Probes first: a probe won (takeProbe) must not go unsent because the others filled the room.
      wants.sort((a, b) => Number(b.probe ?? false) - Number(a.probe ?? false));
      const claims = await this.store.events.claimDeliveries(this.owner, iso, leaseUntil, wants, room);
      started.push(...claims.map((claim) => this.launch(claim)));
    }
    for (const subscription of [...subscriptions.slice(start), ...subscriptions.slice(0, start)]) {
      const batch = await this.fromLog(subscription, iso, leaseUntil);
      if (batch) started.push(batch);
    }
    return started;
  }

  /**
   * Starts sending the next entries after `subscription`'s cursor into the log, as many as it has free slots, if it
   * reads the log and this instance can lease its cursor. Not while it is paused (its cursor waits: a person's resume
   * or a probe's success lets it go on from there), and, while it is failing, one at a time and only when no
   * delivery of its is pending: a scheduled retry (and what is held behind it) goes first.
   */
  private async fromLog(
    subscription: SubscriptionRecord,
    now: string,
    leaseUntil: string,
  ): Promise<Promise<void> | undefined> {
    if (!readsTheLog(subscription) || subscription.pausedAt !== null || this.logBatches.has(subscription.id)) return;
    const busy = this.inFlight.get(subscription.id)?.size ?? 0;
    const own = this.deliveredInFull.has(subscription.id) ? this.perSubscriptionFromLog : this.perSubscription;
    let slots = Math.min(this.concurrency - this.inFlightCount, own - busy);
    let limit = this.logBatch;
    if (subscription.failingSince) {
      if (busy > 0 || (await this.store.events.hasPendingDeliveries(subscription.id))) return;
      slots = Math.min(slots, 1);
      limit = 1;
    }
    if (slots <= 0) return;
    const lease = await this.store.events.leaseLogEntries(this.owner, subscription, now, leaseUntil, limit);
    if (!lease) return;
    this.startRenewing();
    const batch = this.sendLogBatch(subscription, lease, slots).finally(() => {
      this.logBatches.delete(subscription.id);
      if (this.inFlightCount === 0 && this.logBatches.size === 0) this.stopRenewing();
      this.refill();
    });
    this.logBatches.set(subscription.id, batch);
    return batch;
  }

  /**
   * Sends a lease's events in log order (a batch's in item order) through `slots` of the subscription's slots at a
   * time; stops taking more at the first attempt that fails (a receiver that is down is not sent the whole lease).
   * Once the attempts under way have ended, moves the cursor past the events tried, in one unbroken run from the
   * start (to an item, when that run ends inside a batch), and keeps the failed attempts as delivery rows, whose
   * outcome is then recorded as any other's.
   */
  private async sendLogBatch(subscription: SubscriptionRecord, lease: LogLease, slots: number): Promise<void> {
    const told = lease.entries.flatMap(
      (entry): Array<{ signature: LoggedSignature; after: LogPosition }> =>
        entry.items
          ? entry.items.map((item) => ({
              signature: { ...entry, item },
              after: { seq: entry.seq, item: item.last ? null : item.index },
            }))
          : [{ signature: entry, after: { seq: entry.seq, item: null } }],
    );
    const tried: Array<{ claim: DeliveryClaim; result: DeliveryResult } | undefined> = [];
    let next = 0;
    let stop = false;
    const sendNext = async (): Promise<void> => {
      while (!stop && next < told.length) {
        const i = next++;
        const { signature } = told[i] as (typeof told)[number];
        let event: EventRecord;
        try {
          event = await this.eventOfEntry(signature);
        } catch (err) {
          // Not sent: the cursor stops before it, and it is read again in a later pass.
          this.settings.onError?.(
            `could not read the event of log entry ${signature.seq}${signature.item ? ` item ${signature.item.index}` : ''}: ${(err as Error).message}`,
          );
          stop = true;
          return;
        }
        const claim: DeliveryClaim = {
          event,
          subscription,
          attempts: 1,
          owner: this.owner,
          createdAt: event.timestamp,
          fromLog: true,
        };
        const result = await this.track(claim, this.send(claim));
        tried[i] = { claim, result };
        if (result.outcome !== 'delivered') stop = true;
      }
    };
    await Promise.all(Array.from({ length: Math.max(1, slots) }, sendNext));
    const firstGap = Array.from({ length: told.length }, (_, i) => tried[i]).findIndex((t) => !t);
    const sent = tried.slice(0, firstGap === -1 ? told.length : firstGap) as Array<{
      claim: DeliveryClaim;
      result: DeliveryResult;
    }>;
    const inFull = sent.length === told.length && sent.every((r) => r.result.outcome === 'delivered');
    if (inFull) this.deliveredInFull.add(subscription.id);
    else this.deliveredInFull.delete(subscription.id);
    if (sent.length === 0) return;
    const at = this.now();
    const leaseUntil = new Date(at.getTime() + this.leaseMs).toISOString();
    const failed = sent.filter((r) => r.result.outcome !== 'delivered');
    let moved: Awaited<ReturnType<Store['events']['advanceLogCursor']>>;
    try {
      moved = await this.store.events.advanceLogCursor(this.owner, lease, told[sent.length - 1]?.after ?? lease.after, {
        deliveredAt: failed.length < sent.length ? at.toISOString() : null,
        kept: failed.map((r) => ({ event: r.claim.event, leaseUntil })),
      });
    } catch (err) {
      // Not moved: the lease ends and the entries are sent again (at least once, with the same ids).
      this.settings.onError?.(`could not move the log cursor of ${subscription.id}: ${(err as Error).message}`);
      return;
    }
    for (const { claim, result } of sent) {
      if (result.outcome === 'delivered' && moved.advanced) this.settings.onOutcome?.(claim, result);
    }
    if (!moved.advanced) return;
    // The failed attempts are delivery rows now (attempt 1, leased to this instance): their outcome is recorded
    // on those rows, which schedules the retry, holds what follows, or pauses the subscription.
    for (const [i, { claim, result }] of failed.entries()) {
      const kept: DeliveryClaim = {
        event: { ...claim.event, seq: moved.keptSeqs[i] as number },
        subscription,
        attempts: 1,
        owner: this.owner,
        createdAt: claim.createdAt,
      };
      await this.recordOutcome(kept, result, at);
    }
  }

  /** What to ask for `subscription` in this pass, if anything: its free slots, or its probe when it is paused. */
  private async want(
    subscription: SubscriptionRecord,
    now: string,
    leaseUntil: string,
  ): Promise<DeliveryWant | undefined> {
    const busy = this.inFlight.get(subscription.id)?.size ?? 0;
    if (subscription.pausedAt !== null) {
      // One probe at a time, across instances: takeProbe is a compare-and-set on the subscription's next probe.
      if (busy > 0 || !subscription.nextProbeAt || subscription.nextProbeAt > now) return undefined;
      if (!(await this.store.events.takeProbe(subscription.id, now, leaseUntil))) return undefined;
      return { subscriptionId: subscription.id, limit: 1, probe: true };
    }
    // Failing: one attempt at a time until one succeeds.
    const limit = (subscription.failingSince ? 1 : this.perSubscription) - busy;
    return limit > 0 ? { subscriptionId: subscription.id, limit } : undefined;
  }

  /** Sends one claim in the background; its slot is freed (and refilled) once its outcome is recorded. */
  private launch(claim: DeliveryClaim): Promise<void> {
    return this.track(claim, this.attempt(claim)).then(() => this.refill());
  }

  /** `work` holds one of the claim's subscription's slots (and one of the instance's) until it settles. */
  private track<T>(claim: DeliveryClaim, work: Promise<T>): Promise<T> {
    let mine = this.inFlight.get(claim.subscription.id);
    if (!mine) {
      mine = new Map();
      this.inFlight.set(claim.subscription.id, mine);
    }
    const slots = mine;
    const tracked = work.finally(() => {
      slots.delete(claim);
      if (slots.size === 0) this.inFlight.delete(claim.subscription.id);
      this.inFlightCount--;
      if (this.inFlightCount === 0 && this.logBatches.size === 0) this.stopRenewing();
    });
    slots.set(
      claim,
      tracked.then(
        () => undefined,
        () => undefined,
      ),
    );
    this.inFlightCount++;
    this.startRenewing();
    return tracked;
  }

  // Without renewal a receiver slower than the lease (a 10 s time-out, a 3 s lease) lets another instance lease
  // and send the same delivery while this attempt still waits: two 200s for one event from live senders.
  private startRenewing(): void {
    if (this.renewal) return;
    this.renewal = setInterval(
      () => {
        // One at a time: a tick skips rather than piling up behind a slow database.
        this.renewing ??= this.renew().finally(() => {
          this.renewing = undefined;
        });
      },
      Math.max(1, Math.floor(this.leaseMs / 3)),
    );
    this.renewal.unref();
  }

  private stopRenewing(): void {
    clearInterval(this.renewal);
    this.renewal = undefined;
  }

  /** Extends the leases of the attempts still under way; a failure is logged, and the leases may then end. */
  private async renew(): Promise<void> {
    const sending = [...this.inFlight.values()].flatMap((m) => [...m.keys()]);
    if (sending.length === 0 && this.logBatches.size === 0) return;
    const until = new Date(this.now().getTime() + this.leaseMs).toISOString();
    try {
      await this.store.events.renewLeases(sending, until);
      await this.store.events.renewLogLeases(this.owner, [...this.logBatches.keys()], until);
    } catch (err) {
      this.settings.onError?.(`could not renew the leases of deliveries under way: ${(err as Error).message}`);
    }
  }

  private async attempt(claim: DeliveryClaim): Promise<void> {
    await this.recordOutcome(claim, await this.send(claim), this.now());
  }

  /** One attempt at the receiver; a sender that throws is a failure to retry. */
  private async send(claim: DeliveryClaim): Promise<DeliveryResult> {
    try {
      return await this.deliver(claim);
    } catch (err) {
      return { outcome: 'retry', error: (err as Error).message };
    }
  }

  private async recordOutcome(claim: DeliveryClaim, result: DeliveryResult, at: Date): Promise<void> {
    try {
      await recordOutcome(this.store, this.settings, claim, result, at);
    } catch (err) {
      // Not recorded: the lease ends and the delivery is tried again (at least once).
      this.settings.onError?.(`could not record the delivery of ${claim.event.id}: ${(err as Error).message}`);
    }
    this.settings.onOutcome?.(claim, result);
  }
}

/** perSubscriptionFromLog's default for a given perSubscription (destinations.ts bounds the connections by it). */
export function perSubscriptionFromLog(perSubscription: number): number {
  return 4 * perSubscription;
}

/** Whether a subscription is handed the signature.signed events read from the log (it wants that kind). */
function readsTheLog(subscription: SubscriptionRecord): boolean {
  return subscription.eventKinds === null || subscription.eventKinds.includes('signature.signed');
}
