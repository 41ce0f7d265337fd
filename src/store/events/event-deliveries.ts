// Deliveries (docs/events.md): one row per event and subscription, claimed under a lease, and each attempt's outcome.
//
// - claimDeliveries() takes due deliveries of the subscriptions the dispatcher asks for (each with its own limit)
//   in one UPDATE ... RETURNING that sets a lease, reading each subscription's through an index in order: an
//   instance sends only what it leased and renews the lease while it waits for the answer (renewLeases), a dead
//   instance's leases run out and another takes them over. Every outcome is written with the lease's owner and attempt number in the
//   WHERE clause, so a sender whose lease was taken over changes nothing.
// - A request's events reach a subscription in order: a delivery is not claimed while an earlier one with the same
//   order key is still pending for that subscription, or not even fanned out yet.
// - A failing subscription's deliveries not tried yet wait behind its retry, and are due again once one gets
//   through (event-holds.ts).
// - A subscription failing for too long is paused; a paused one is probed one delivery at a time (takeProbe), and
//   the probe's success resumes it (markDelivered).
import { type ExpressionBuilder, type Kysely, sql } from 'kysely';
import type { EventKind } from '../records/event-kinds.js';
import { holdFirstAttempts, releaseHeld, releaseHeldWithoutRetry } from './event-holds.js';
import {
  type DeliveryClaim,
  type DeliveryRecord,
  type DeliveryStatus,
  type DeliveryWant,
  type EventTables,
  type FailingState,
  toEvent,
  toSubscription,
} from './event-tables.js';

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

export class EventDeliveries {
  constructor(
    private readonly db: Kysely<EventTables>,
    private readonly postgres: boolean,
  ) {}

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

  /** Whether the subscription has a delivery still to make (a retry scheduled, or one held behind it). */
  async hasPendingDeliveries(subscriptionId: string): Promise<boolean> {
    const row = await this.db
      .selectFrom('event_deliveries')
      .select('event_seq')
      .where('subscription_id', '=', subscriptionId)
      .where('status', '=', 'pending')
      .limit(1)
      .executeTakeFirst();
    return row !== undefined;
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
   * subscription is failing no more, and what it held behind its retry is due at once; one paused for failing (a probe's answer) is resumed, and what it kept is
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
        .set({ last_delivered_at: at, failures_in_a_row: 0 })
        .where('id', '=', claim.subscription.id)
        .execute();
      // Asked of the row, not of the claim: another attempt may have failed since this one was claimed.
      const recovered = await tx
        .updateTable('webhook_subscriptions')
        .set({ failing_since: null })
        .where('id', '=', claim.subscription.id)
        .where('failing_since', 'is not', null)
        .executeTakeFirst();
      if (Number(recovered.numUpdatedRows) === 1) await releaseHeld(tx, claim.subscription.id, at);
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
   * A retry holds the subscription's deliveries not tried yet behind it; giving up the last scheduled one releases
   * them (event-holds.ts). Returns the subscription's state after this failure, or undefined when the lease had been taken over (nothing
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
      if (outcome.retryAt !== null) await holdFirstAttempts(tx, claim.subscription.id);
      else if (outcome.pauseReason === undefined) await releaseHeldWithoutRetry(tx, claim.subscription.id, at);
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
}

interface ClaimedRow {
  event_seq: number;
  subscription_id: string;
  attempts: number;
  created_at: string;
}

/** Subscriptions per claim statement: SQLite allows at most 500 terms in one compound SELECT. */
const CLAIM_BRANCHES = 200;
