// First attempts held behind a failing subscription's retry (docs/events.md, "Failing"). A receiver answering 500
// got every new event's first attempt as soon as it was written (one at a time, but 28 a second and more): while a
// subscription is failing with a retry scheduled, its deliveries not tried yet wait (next attempt
// HELD_UNTIL_RECOVERY) and only the retry schedule reaches the receiver. They are released, due at once, when a
// delivery gets through (markDelivered), when a person resumes the subscription (due at once as before), or when
// the last scheduled delivery is given up without a retry (a 4xx), so that nothing waits for a retry that will
// never come.
//
// The statements run inside the callers' transactions. A delivery is "scheduled" when it is pending with a real
// next attempt: a retry, one leased now, or one due. On PostgreSQL the fan-out locks (FOR SHARE) a failing
// subscription's row before it decides to hold, so a delivery recorded at the same moment (which updates that row
// first) releases after the fan-out committed, or the fan-out sees it recovered; on SQLite transactions that write
// run one at a time.
import { type Kysely, sql } from 'kysely';
import { type EventTables, HELD_UNTIL_RECOVERY } from './event-tables.js';

/**
 * Of `failing` (ids of subscriptions that were failing when read), those whose new deliveries are to be held:
 * still failing under a lock the recording of an outcome waits for, with a delivery scheduled.
 */
export async function subscriptionsHolding(
  tx: Kysely<EventTables>,
  failing: readonly string[],
  postgres: boolean,
): Promise<Set<string>> {
  if (failing.length === 0) return new Set();
  const lock = postgres ? sql`FOR SHARE` : sql``;
  const stillFailing = await sql<{ id: string }>`
    SELECT id FROM webhook_subscriptions
    WHERE id IN (${sql.join(failing)}) AND failing_since IS NOT NULL
    ${lock}`.execute(tx);
  if (stillFailing.rows.length === 0) return new Set();
  // A separate statement after the lock: on PostgreSQL it sees what the outcome that held the lock committed.
  const scheduled = await tx
    .selectFrom('webhook_subscriptions as s')
    .select('s.id')
    .where(
      's.id',
      'in',
      stillFailing.rows.map((r) => r.id),
    )
    .where(({ exists, selectFrom }) =>
      exists(
        selectFrom('event_deliveries as d')
          .select(sql`1`.as('one'))
          .whereRef('d.subscription_id', '=', 's.id')
          .where('d.status', '=', 'pending')
          .where('d.next_attempt_at', '<', HELD_UNTIL_RECOVERY),
      ),
    )
    .execute();
  return new Set(scheduled.map((r) => r.id));
}

/** A retry was scheduled: the subscription's deliveries not tried yet wait behind it. */
export async function holdFirstAttempts(tx: Kysely<EventTables>, subscriptionId: string): Promise<void> {
  await tx
    .updateTable('event_deliveries')
    .set({ next_attempt_at: HELD_UNTIL_RECOVERY })
    .where('subscription_id', '=', subscriptionId)
    .where('status', '=', 'pending')
    .where('next_attempt_at', '<', HELD_UNTIL_RECOVERY)
    .where('attempts', '=', 0)
    .execute();
}

/** The subscription recovered: what it held is due at `at`. */
export async function releaseHeld(tx: Kysely<EventTables>, subscriptionId: string, at: string): Promise<void> {
  await tx
    .updateTable('event_deliveries')
    .set({ next_attempt_at: at })
    .where('subscription_id', '=', subscriptionId)
    .where('status', '=', 'pending')
    .where('next_attempt_at', '=', HELD_UNTIL_RECOVERY)
    .execute();
}

/** A delivery was given up without a retry: when none of the subscription's is scheduled, what it held is due. */
export async function releaseHeldWithoutRetry(
  tx: Kysely<EventTables>,
  subscriptionId: string,
  at: string,
): Promise<void> {
  const scheduled = await tx
    .selectFrom('event_deliveries')
    .select('event_seq')
    .where('subscription_id', '=', subscriptionId)
    .where('status', '=', 'pending')
    .where('next_attempt_at', '<', HELD_UNTIL_RECOVERY)
    .limit(1)
    .executeTakeFirst();
  if (!scheduled) await releaseHeld(tx, subscriptionId, at);
}
