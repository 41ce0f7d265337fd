// Events' state (docs/events.md): the outbox, the subscriptions, and one delivery row per event and subscription.
// Plain Kysely, so SQLite and PostgreSQL share it like the rest of KyselyStore.
//
// - Outbox rows are written by the store method that makes the change, in its transaction (insertEvents), so an
//   event is never lost when a process dies and never sent for a change that was rolled back.
// - fanOut() turns new outbox rows into delivery rows for the subscriptions of the event's tenant that want its
//   kind, and marks the event fanned out, in one transaction (on PostgreSQL the rows are taken FOR UPDATE SKIP
//   LOCKED, so two instances never fan out the same event; the primary key would catch it anyway).
// - claimDeliveries() takes due deliveries of the subscriptions the dispatcher asks for (each with its own limit)
//   in one UPDATE ... RETURNING that sets a lease, reading each subscription's through an index in order: an
//   instance sends only what it leased and renews the lease while it waits for the answer (renewLeases), a dead
//   instance's leases run out and another takes them over. Every outcome is written with the lease's owner and attempt number in the
//   WHERE clause, so a sender whose lease was taken over changes nothing.
// - A request's events reach a subscription in order: a delivery is not claimed while an earlier one with the same
//   order key is still pending for that subscription, or not even fanned out yet.
// - A subscription failing for too long is paused; a paused one is probed one delivery at a time (takeProbe), and
//   the probe's success resumes it (markDelivered).
import { randomBytes } from 'node:crypto';
import { type ExpressionBuilder, type Generated, type Kysely, type Selectable, sql } from 'kysely';
import type { EventData, EventInput, EventKind, EventRecord } from './records/event-kinds.js';

export const SUBSCRIPTION_FORMATS = ['standard', 'slack', 'teams', 'email'] as const;
export type SubscriptionFormat = (typeof SUBSCRIPTION_FORMATS)[number];

export interface EventTables {
  event_outbox: {
    seq: Generated<number>;
    id: string;
    tenant_id: string | null;
    type: string;
    timestamp: string;
    /** JSON of EventData. */
    data: string;
    order_key: string | null;
    fanned_out: number;
  };
  webhook_subscriptions: {
    id: string;
    tenant_id: string;
    url: string;
    format: string;
    /** JSON array of event kinds; null: all. */
    event_kinds: string | null;
    secret: string | null;
    created_at: string;
    created_by: string;
    paused_at: string | null;
    pause_reason: string | null;
    last_error: string | null;
    last_error_at: string | null;
    last_delivered_at: string | null;
    failures_in_a_row: number;
    /** The first failed attempt since the last delivered one (null: not failing); the pause counts from it. */
    failing_since: string | null;
    /** A paused subscription's next probe (null: not probed; it waits for a person). */
    next_probe_at: string | null;
  };
  event_deliveries: {
    event_seq: number;
    subscription_id: string;
    order_key: string | null;
    status: string;
    attempts: number;
    next_attempt_at: string;
    lease_until: string | null;
    lease_owner: string | null;
    last_status: number | null;
    last_error: string | null;
    created_at: string;
    delivered_at: string | null;
  };
}

/** An outbox row as written; `seq` comes from the database. */
export type OutboxRow = Omit<Selectable<EventTables['event_outbox']>, 'seq'>;

export interface SubscriptionRecord {
  id: string;
  tenantId: string;
  /** https://... for webhooks and chat; mailto:address for e-mail. */
  url: string;
  format: SubscriptionFormat;
  /** null: every kind. */
  eventKinds: EventKind[] | null;
  /** The Standard Webhooks secret; only the dispatcher reads it. */
  secret: string | null;
  createdAt: string;
  createdBy: string;
  pausedAt: string | null;
  pauseReason: string | null;
  lastError: string | null;
  lastErrorAt: string | null;
  lastDeliveredAt: string | null;
  failuresInARow: number;
  /** When its attempts started failing, with no delivery since (null or absent: not failing). */
  failingSince?: string | null;
  /** Paused: when the dispatcher next sends it one delivery to see whether the receiver is back (null: never). */
  nextProbeAt?: string | null;
}

export type DeliveryStatus = 'pending' | 'delivered' | 'failed';

export interface DeliveryRecord {
  eventSeq: number;
  eventId: string;
  eventType: EventKind;
  subscriptionId: string;
  status: DeliveryStatus;
  attempts: number;
  nextAttemptAt: string;
  /** Until when a sender holds it (null: nobody is sending it). */
  leaseUntil: string | null;
  lastStatus: number | null;
  lastError: string | null;
  createdAt: string;
  deliveredAt: string | null;
}

/**
 * The event kinds a tenant's subscriptions want, paused ones included (they keep what they are sent): `all` when
 * one of them names none; `none` without any subscription. The signing path asks it, through the store's exact
 * cache (access-cache.ts), before it writes a signature.signed event nobody could receive.
 */
export interface SubscribedKinds {
  all: boolean;
  kinds: ReadonlySet<EventKind>;
}

/** A delivery this instance leased: send it, then record the outcome with the same claim. */
export interface DeliveryClaim {
  event: EventRecord;
  subscription: SubscriptionRecord;
  /** Including this one. */
  attempts: number;
  owner: string;
  /** When the event was written (ISO): retries stop 24 h after it. */
  createdAt: string;
}

/** Events for a change, or a function that makes them from the change's result (a key's new version). */
export type EventsFor<T> = readonly EventInput[] | ((result: T) => readonly EventInput[]);

export function eventsOf<T>(events: EventsFor<T> | undefined, result: T): readonly EventInput[] | undefined {
  return typeof events === 'function' ? events(result) : events;
}

/** Outbox rows for events of a change made at `at`; ids are unique and have no '.' (Standard Webhooks). */
export function outboxRows(events: readonly EventInput[], at: string): OutboxRow[] {
  return events.map((e) => ({
    id: `evt_${Date.parse(at).toString(36)}${randomBytes(10).toString('hex')}`,
    tenant_id: e.data.tenant_id,
    type: e.type,
    timestamp: at,
    data: JSON.stringify(e.data),
    order_key: e.orderKey ?? null,
    fanned_out: 0,
  }));
}

/** Writes events in the caller's transaction. */
export async function insertEvents(tx: Kysely<EventTables>, events: readonly EventInput[] | undefined, at: string) {
  if (!events || events.length === 0) return;
  await tx.insertInto('event_outbox').values(outboxRows(events, at)).execute();
}

/**
 * Who subscribes to what is part of the signing path's cache (access-cache.ts): a subscription made or removed
 * raises the cache epoch in its transaction, so every instance sees it from its first request after the commit.
 */
async function raiseCacheEpoch(tx: Kysely<EventTables>): Promise<void> {
  await sql`UPDATE cache_epoch SET n = n + 1 WHERE id = 1`.execute(tx);
}

function toEvent(row: Selectable<EventTables['event_outbox']>): EventRecord {
  return {
    id: row.id,
    seq: Number(row.seq),
    tenantId: row.tenant_id,
    type: row.type as EventKind,
    timestamp: row.timestamp,
    data: JSON.parse(row.data) as EventData,
    orderKey: row.order_key,
  };
}

function toSubscription(row: EventTables['webhook_subscriptions']): SubscriptionRecord {
  return {
    id: row.id,
    tenantId: row.tenant_id,
    url: row.url,
    format: row.format as SubscriptionFormat,
    eventKinds: row.event_kinds ? (JSON.parse(row.event_kinds) as EventKind[]) : null,
    secret: row.secret,
    createdAt: row.created_at,
    createdBy: row.created_by,
    pausedAt: row.paused_at,
    pauseReason: row.pause_reason,
    lastError: row.last_error,
    lastErrorAt: row.last_error_at,
    lastDeliveredAt: row.last_delivered_at,
    failuresInARow: Number(row.failures_in_a_row),
    failingSince: row.failing_since,
    nextProbeAt: row.next_probe_at,
  };
}

/**
 * The delivery row of `claim`, only while the claim's lease still holds it: the same owner and attempt, still
 * pending. An outcome recorded after another sender took the delivery over matches nothing and changes nothing.
 */
function underLease(eb: ExpressionBuilder<EventTables, 'event_deliveries'>, claim: DeliveryClaim) {
  return eb.and([
    eb('event_seq', '=', claim.event.seq),
    eb('subscription_id', '=', claim.subscription.id),
    eb('lease_owner', '=', claim.owner),
    eb('attempts', '=', claim.attempts),
    eb('status', '=', 'pending'),
  ]);
}

export class EventStore {
  /** Told when this process writes events (the dispatcher's nudge: src/app.ts). */
  onWritten: (() => void) | undefined;

  constructor(
    private readonly db: Kysely<EventTables>,
    private readonly postgres: boolean,
    /**
     * Runs a change to the subscriptions so that no cached answer of subscribedKinds survives it (the store's
     * access cache); the change raises the cache epoch too, for every other process and instance.
     */
    private readonly changingSubscriptions: <T>(write: () => Promise<T>) => Promise<T> = (write) => write(),
  ) {}

  /** What the tenant's subscriptions want, read from the database (the store caches it: wantsEvent). */
  async subscribedKinds(tenantId: string): Promise<SubscribedKinds> {
    const rows = await this.db
      .selectFrom('webhook_subscriptions')
      .select('event_kinds')
      .where('tenant_id', '=', tenantId)
      .execute();
    const kinds = new Set<EventKind>();
    let all = false;
    for (const row of rows) {
      if (row.event_kinds === null) all = true;
      else for (const kind of JSON.parse(row.event_kinds) as EventKind[]) kinds.add(kind);
    }
    return { all, kinds };
  }

  /** Events written outside any other change (none today; tests and tools). */
  async appendEvents(events: readonly EventInput[], at: string): Promise<void> {
    await insertEvents(this.db, events, at);
  }

  async readEvents(afterSeq: number, limit: number): Promise<EventRecord[]> {
    const rows = await this.db
      .selectFrom('event_outbox')
      .selectAll()
      .where('seq', '>', afterSeq)
      .orderBy('seq')
      .limit(limit)
      .execute();
    return rows.map(toEvent);
  }

  async addSubscription(s: SubscriptionRecord): Promise<void> {
    await this.changingSubscriptions(() => this.db.transaction().execute((tx) => this.insertSubscription(tx, s)));
  }

  private async insertSubscription(tx: Kysely<EventTables>, s: SubscriptionRecord): Promise<void> {
    await raiseCacheEpoch(tx);
    await tx
      .insertInto('webhook_subscriptions')
      .values({
        id: s.id,
        tenant_id: s.tenantId,
        url: s.url,
        format: s.format,
        event_kinds: s.eventKinds ? JSON.stringify(s.eventKinds) : null,
        secret: s.secret,
        created_at: s.createdAt,
        created_by: s.createdBy,
        paused_at: s.pausedAt,
        pause_reason: s.pauseReason,
        last_error: null,
        last_error_at: null,
        last_delivered_at: null,
        failures_in_a_row: 0,
        failing_since: null,
        next_probe_at: null,
      })
      .execute();
  }

  async getSubscription(id: string): Promise<SubscriptionRecord | undefined> {
    const row = await this.db.selectFrom('webhook_subscriptions').selectAll().where('id', '=', id).executeTakeFirst();
    return row && toSubscription(row);
  }

  /** A tenant's subscriptions (every tenant's when undefined), oldest first. */
  async listSubscriptions(tenantId?: string): Promise<SubscriptionRecord[]> {
    let query = this.db.selectFrom('webhook_subscriptions').selectAll();
    if (tenantId !== undefined) query = query.where('tenant_id', '=', tenantId);
    const rows = await query.orderBy('created_at').orderBy('id').execute();
    return rows.map(toSubscription);
  }

  /** Removes the subscription and what it had still to send. False when there was none. */
  async removeSubscription(id: string): Promise<boolean> {
    return this.changingSubscriptions(() => this.removeSubscriptionOnce(id));
  }

  private removeSubscriptionOnce(id: string): Promise<boolean> {
    return this.db.transaction().execute(async (tx) => {
      await raiseCacheEpoch(tx);
      await tx.deleteFrom('event_deliveries').where('subscription_id', '=', id).execute();
      const result = await tx.deleteFrom('webhook_subscriptions').where('id', '=', id).executeTakeFirst();
      return Number(result.numDeletedRows) === 1;
    });
  }

  /** Resumes a paused subscription: what it still had to send is due now. False when there was none. */
  async resumeSubscription(id: string, at: string): Promise<boolean> {
    return this.db.transaction().execute(async (tx) => {
      const result = await tx
        .updateTable('webhook_subscriptions')
        .set({ paused_at: null, pause_reason: null, failures_in_a_row: 0, failing_since: null, next_probe_at: null })
        .where('id', '=', id)
        .executeTakeFirst();
      await tx
        .updateTable('event_deliveries')
        .set({ next_attempt_at: at })
        .where('subscription_id', '=', id)
        .where('status', '=', 'pending')
        .execute();
      return Number(result.numUpdatedRows) === 1;
    });
  }

  async listDeliveries(subscriptionId: string, limit: number): Promise<DeliveryRecord[]> {
    const rows = await this.db
      .selectFrom('event_deliveries as d')
      .innerJoin('event_outbox as e', 'e.seq', 'd.event_seq')
      .select([
        'd.event_seq',
        'e.id as event_id',
        'e.type as event_type',
        'd.subscription_id',
        'd.status',
        'd.attempts',
        'd.next_attempt_at',
        'd.lease_until',
        'd.last_status',
        'd.last_error',
        'd.created_at',
        'd.delivered_at',
      ])
      .where('d.subscription_id', '=', subscriptionId)
      .orderBy('d.event_seq', 'desc')
      .limit(limit)
      .execute();
    return rows.map((r) => ({
      eventSeq: Number(r.event_seq),
      eventId: r.event_id,
      eventType: r.event_type as EventKind,
      subscriptionId: r.subscription_id,
      status: r.status as DeliveryStatus,
      attempts: Number(r.attempts),
      nextAttemptAt: r.next_attempt_at,
      leaseUntil: r.lease_until,
      lastStatus: r.last_status === null ? null : Number(r.last_status),
      lastError: r.last_error,
      createdAt: r.created_at,
      deliveredAt: r.delivered_at,
    }));
  }

  /** Deliveries still to make (metrics, tests). */
  async countPendingDeliveries(): Promise<number> {
    const row = await this.db
      .selectFrom('event_deliveries')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('status', '=', 'pending')
      .executeTakeFirstOrThrow();
    return Number(row.n);
  }

  /**
   * Makes delivery rows for up to `limit` events not fanned out yet, for the subscriptions of their tenant that
   * want their kind, and marks the events fanned out. Returns how many events it took.
   */
  async fanOut(limit: number, at: string): Promise<number> {
    return this.db.transaction().execute(async (tx) => {
      // Marked first, in the statement that picks them: the transaction's first statement is a write, so on SQLite
      // it waits for the write lock (busy_timeout) instead of failing SQLITE_BUSY when another connection wrote
      // after this one read; on PostgreSQL rows another instance is fanning out are skipped.
      const lock = this.postgres ? sql`FOR UPDATE SKIP LOCKED` : sql``;
      const marked = await sql<Selectable<EventTables['event_outbox']>>`
        UPDATE event_outbox SET fanned_out = 1
        WHERE seq IN (SELECT seq FROM event_outbox WHERE fanned_out = 0 ORDER BY seq LIMIT ${limit} ${lock})
        RETURNING *`.execute(tx);
      const events = marked.rows.map(toEvent).sort((x, y) => x.seq - y.seq);
      if (events.length === 0) return 0;
      const tenants = [...new Set(events.map((e) => e.tenantId).filter((t): t is string => t !== null))];
      const subscriptions =
        tenants.length === 0
          ? []
          : (await tx.selectFrom('webhook_subscriptions').selectAll().where('tenant_id', 'in', tenants).execute()).map(
              toSubscription,
            );
      const deliveries: EventTables['event_deliveries'][] = [];
      for (const event of events) {
        for (const s of subscriptions) {
          if (s.tenantId !== event.tenantId) continue;
          if (s.eventKinds && !s.eventKinds.includes(event.type)) continue;
          deliveries.push({
            event_seq: event.seq,
            subscription_id: s.id,
            order_key: event.orderKey ?? null,
            status: 'pending',
            attempts: 0,
            next_attempt_at: at,
            lease_until: null,
            lease_owner: null,
            last_status: null,
            last_error: null,
            created_at: event.timestamp,
            delivered_at: null,
          });
        }
      }
      for (let i = 0; i < deliveries.length; i += 200) {
        await tx
          .insertInto('event_deliveries')
          .values(deliveries.slice(i, i + 200))
          .onConflict((oc) => oc.columns(['event_seq', 'subscription_id']).doNothing())
          .execute();
      }
      return events.length;
    });
  }

  /**
   * Leases due deliveries of the subscriptions in `wants`, up to each one's limit and `limit` in all, taking the
   * subscriptions in the order given (the dispatcher rotates it, so none is always last). Within a subscription the
   * due deliveries are read through event_deliveries_claim in the order they are taken (next attempt, then event),
   * so a claim reads about as many rows as it leases, whatever the backlog. A delivery whose request has an earlier
   * delivery to the same subscription still pending (or an earlier event not fanned out yet) is skipped. A paused
   * subscription's deliveries are taken only for its probe (takeProbe). One statement per 200 subscriptions: atomic
   * on both stores, and on PostgreSQL rows another instance is leasing at that moment are skipped, not waited for.
   * A leased row's next attempt is its lease's end: it is not due again unless the lease runs out (or is renewed).
   */
  async claimDeliveries(
    owner: string,
    now: string,
    leaseUntil: string,
    wants: readonly DeliveryWant[],
    limit = Number.POSITIVE_INFINITY,
  ): Promise<DeliveryClaim[]> {
    const claimed: ClaimedRow[] = [];
    for (let i = 0; i < wants.length && claimed.length < limit; i += CLAIM_BRANCHES) {
      const some = wants.slice(i, i + CLAIM_BRANCHES).filter((w) => w.limit > 0);
      if (some.length === 0) continue;
      const room = Math.min(
        limit - claimed.length,
        some.reduce((n, w) => n + w.limit, 0),
      );
      const result = await this.claimStatement(owner, now, leaseUntil, some, room).execute(this.db);
      claimed.push(...result.rows);
    }
    if (claimed.length === 0) return [];
    const seqs = [...new Set(claimed.map((r) => Number(r.event_seq)))];
    const subIds = [...new Set(claimed.map((r) => r.subscription_id))];
    const events = new Map(
      (await this.db.selectFrom('event_outbox').selectAll().where('seq', 'in', seqs).execute()).map((r) => [
        Number(r.seq),
        toEvent(r),
      ]),
    );
    const subs = new Map(
      (await this.db.selectFrom('webhook_subscriptions').selectAll().where('id', 'in', subIds).execute()).map((r) => [
        r.id,
        toSubscription(r),
      ]),
    );
    const claims: DeliveryClaim[] = [];
    for (const r of claimed) {
      const event = events.get(Number(r.event_seq));
      const subscription = subs.get(r.subscription_id);
      // A subscription removed in between: its deliveries went with it.
      if (!event || !subscription) continue;
      claims.push({ event, subscription, attempts: Number(r.attempts), owner, createdAt: r.created_at });
    }
    return claims.sort((a, b) => a.event.seq - b.event.seq);
  }

  /** The plan of a claim for `wants` (EXPLAIN QUERY PLAN on SQLite, EXPLAIN on PostgreSQL), one line per step. */
  async explainClaim(wants: readonly DeliveryWant[], now: string): Promise<string[]> {
    const statement = this.claimStatement('explain', now, now, wants, 16);
    if (this.postgres) {
      const plan = await sql<{ 'QUERY PLAN': string }>`EXPLAIN ${statement}`.execute(this.db);
      return plan.rows.map((r) => r['QUERY PLAN']);
    }
    const plan = await sql<{ detail: string }>`EXPLAIN QUERY PLAN ${statement}`.execute(this.db);
    return plan.rows.map((r) => r.detail);
  }

  private claimStatement(
    owner: string,
    now: string,
    leaseUntil: string,
    wants: readonly DeliveryWant[],
    limit: number,
  ) {
    const lock = this.postgres ? sql`FOR UPDATE OF d SKIP LOCKED` : sql``;
    const branches = wants.map(
      (w, i) => sql`SELECT event_seq, subscription_id FROM (
        SELECT d.event_seq, d.subscription_id
        FROM event_deliveries d
        WHERE d.subscription_id = ${w.subscriptionId}
          AND d.status = 'pending'
          AND (d.lease_until IS NULL OR d.lease_until < ${now})
          ${
            // A probe takes the subscription's next delivery even if that one's own retry is not due yet: the
            // probe's time is the subscription's back-off (the dispatcher's), not the delivery's.
            w.probe
              ? sql``
              : sql`AND d.next_attempt_at <= ${now}
                  AND NOT EXISTS (SELECT 1 FROM webhook_subscriptions s
                    WHERE s.id = ${w.subscriptionId} AND s.paused_at IS NOT NULL)`
          }
          AND (d.order_key IS NULL OR (
            NOT EXISTS (
              SELECT 1 FROM event_deliveries earlier
              WHERE earlier.subscription_id = d.subscription_id
                AND earlier.status = 'pending'
                AND earlier.order_key = d.order_key
                AND earlier.event_seq < d.event_seq)
            -- Nor while an earlier event of its order key is not fanned out yet: on PostgreSQL another instance's
            -- fanOut may hold it (SKIP LOCKED let this one fan out the later event), and its delivery row appears
            -- only when that transaction commits; until then this sees the event as not fanned out.
            AND NOT EXISTS (
              SELECT 1 FROM event_outbox unfanned
              WHERE unfanned.fanned_out = 0
                AND unfanned.order_key = d.order_key
                AND unfanned.seq < d.event_seq)))
        ORDER BY d.next_attempt_at, d.event_seq
        LIMIT ${w.limit}
        ${lock}) ${sql.raw(`want${i}`)}`,
    );
    return sql<ClaimedRow>`
      UPDATE event_deliveries
      SET lease_owner = ${owner}, lease_until = ${leaseUntil}, next_attempt_at = ${leaseUntil},
        attempts = attempts + 1
      WHERE (event_seq, subscription_id) IN (
        SELECT event_seq, subscription_id FROM (${sql.join(branches, sql` UNION ALL `)}) wanted LIMIT ${limit})
      RETURNING event_seq, subscription_id, attempts, created_at`;
  }

  /**
   * Wins a paused subscription's probe that is due: its next probe moves to `until` (the probe's lease), so of
   * several instances one sends it. False when it is not paused, not probed, not due, or another instance won.
   */
  async takeProbe(subscriptionId: string, now: string, until: string): Promise<boolean> {
    const result = await this.db
      .updateTable('webhook_subscriptions')
      .set({ next_probe_at: until })
      .where('id', '=', subscriptionId)
      .where('paused_at', 'is not', null)
      .where('next_probe_at', 'is not', null)
      .where('next_probe_at', '<=', now)
      .executeTakeFirst();
    return Number(result.numUpdatedRows) === 1;
  }

  /**
   * Extends the leases of deliveries whose attempts are still under way (the dispatcher renews them while it waits
   * for an answer), so a lease need only outlast the time between renewals, not the slowest receiver. Only rows
   * still leased under the claim (same owner and attempt, not recorded yet) change. Returns how many did.
   */
  async renewLeases(claims: readonly DeliveryClaim[], leaseUntil: string): Promise<number> {
    let renewed = 0;
    for (let i = 0; i < claims.length; i += 100) {
      const result = await this.db
        .updateTable('event_deliveries')
        .set({ lease_until: leaseUntil, next_attempt_at: leaseUntil })
        .where('status', '=', 'pending')
        // Recording an outcome clears the lease: a renewal that arrives after it must not set it again.
        .where('lease_until', 'is not', null)
        .where((eb) =>
          eb.or(
            claims
              .slice(i, i + 100)
              .map((c) =>
                eb.and([
                  eb('event_seq', '=', c.event.seq),
                  eb('subscription_id', '=', c.subscription.id),
                  eb('lease_owner', '=', c.owner),
                  eb('attempts', '=', c.attempts),
                ]),
              ),
          ),
        )
        .executeTakeFirst();
      renewed += Number(result.numUpdatedRows);
    }
    return renewed;
  }

  /**
   * The receiver took it. False when the lease had been taken over meanwhile (nothing changed then). The
   * subscription is failing no more; one paused for failing (a probe's answer) is resumed, and what it kept is
   * due at once.
   */
  async markDelivered(claim: DeliveryClaim, status: number | null, at: string): Promise<boolean> {
    return this.db.transaction().execute(async (tx) => {
      const result = await tx
        .updateTable('event_deliveries')
        .set({ status: 'delivered', delivered_at: at, lease_until: null, last_status: status, last_error: null })
        .where((eb) => underLease(eb, claim))
        .executeTakeFirst();
      if (Number(result.numUpdatedRows) !== 1) return false;
      await tx
        .updateTable('webhook_subscriptions')
        .set({ last_delivered_at: at, failures_in_a_row: 0, failing_since: null })
        .where('id', '=', claim.subscription.id)
        .execute();
      const resumed = await tx
        .updateTable('webhook_subscriptions')
        .set({ paused_at: null, pause_reason: null, next_probe_at: null })
        .where('id', '=', claim.subscription.id)
        .where('paused_at', 'is not', null)
        // Paused for failing (probed); not after 410 Gone, which waits for a person.
        .where('next_probe_at', 'is not', null)
        .executeTakeFirst();
      if (Number(resumed.numUpdatedRows) === 1) {
        await tx
          .updateTable('event_deliveries')
          .set({ next_attempt_at: at })
          .where('subscription_id', '=', claim.subscription.id)
          .where('status', '=', 'pending')
          .where((eb) => eb.or([eb('lease_until', 'is', null), eb('lease_until', '<', at)]))
          .execute();
      }
      return true;
    });
  }

  /**
   * The attempt failed. `retryAt`: try again then; null: give up on this delivery. `pauseReason`: pause the
   * subscription too (410 Gone, or failing for too long), with this reason; `probeAt`: with a pause, its first
   * probe (absent or null: never probed); on a subscription already paused (its probe failed), the next probe.
   * Returns the subscription's state after this failure, or undefined when the lease had been taken over (nothing
   * changed then).
   */
  async markFailedAttempt(
    claim: DeliveryClaim,
    outcome: {
      status: number | null;
      error: string;
      retryAt: string | null;
      pauseReason?: string;
      probeAt?: string | null;
    },
    at: string,
  ): Promise<FailingState | undefined> {
    return this.db.transaction().execute(async (tx) => {
      const result = await tx
        .updateTable('event_deliveries')
        .set({
          status: outcome.retryAt === null ? 'failed' : 'pending',
          next_attempt_at: outcome.retryAt ?? at,
          lease_until: null,
          last_status: outcome.status,
          last_error: outcome.error,
        })
        .where((eb) => underLease(eb, claim))
        .executeTakeFirst();
      if (Number(result.numUpdatedRows) !== 1) return undefined;
      await tx
        .updateTable('webhook_subscriptions')
        .set((eb) => ({
          last_error: outcome.error,
          last_error_at: at,
          failures_in_a_row: eb('failures_in_a_row', '+', 1),
          failing_since: eb.fn.coalesce('failing_since', eb.val(at)),
          ...(outcome.pauseReason !== undefined && {
            paused_at: at,
            pause_reason: outcome.pauseReason,
            next_probe_at: outcome.probeAt ?? null,
          }),
        }))
        .where('id', '=', claim.subscription.id)
        .execute();
      if (outcome.pauseReason === undefined && outcome.probeAt) {
        await tx
          .updateTable('webhook_subscriptions')
          .set({ next_probe_at: outcome.probeAt })
          .where('id', '=', claim.subscription.id)
          .where('paused_at', 'is not', null)
          .where('next_probe_at', 'is not', null)
          .execute();
      }
      const row = await tx
        .selectFrom('webhook_subscriptions')
        .select(['failures_in_a_row', 'failing_since', 'paused_at'])
        .where('id', '=', claim.subscription.id)
        .executeTakeFirst();
      return {
        failuresInARow: Number(row?.failures_in_a_row ?? 0),
        failingSince: row?.failing_since ?? at,
        pausedAt: row?.paused_at ?? null,
      };
    });
  }

  /**
   * Pauses a subscription (it keeps failing); its deliveries wait until a probe gets through (from `probeAt` on,
   * when given) or a person resumes it.
   */
  async pauseSubscription(id: string, reason: string, at: string, probeAt: string | null = null): Promise<void> {
    await this.db
      .updateTable('webhook_subscriptions')
      .set({ paused_at: at, pause_reason: reason, next_probe_at: probeAt })
      .where('id', '=', id)
      .where('paused_at', 'is', null)
      .execute();
  }
}

/** What the dispatcher asks a claim for, per subscription: up to `limit` of its due deliveries. */
export interface DeliveryWant {
  subscriptionId: string;
  limit: number;
  /** A paused subscription's probe (the dispatcher won it with takeProbe): claimed although it is paused. */
  probe?: boolean;
}

/** A subscription's failing after a failed attempt (markFailedAttempt). */
export interface FailingState {
  failuresInARow: number;
  /** Its first failure since its last delivery. */
  failingSince: string;
  /** Paused (now or before); null: not paused. */
  pausedAt: string | null;
}

interface ClaimedRow {
  event_seq: number;
  subscription_id: string;
  attempts: number;
  created_at: string;
}

/** Subscriptions per claim statement: SQLite allows at most 500 terms in one compound SELECT. */
const CLAIM_BRANCHES = 200;
