import { type Kysely, type Migration, sql } from 'kysely';

// Issue 31 (docs/events.md, "Delivery"): deliveries are leased per subscription, through an index in the order
// they are taken (subscription, next attempt, event), so a claim reads about as many rows as it leases instead of
// sorting the whole due backlog; the index by next attempt alone served that sort and goes. A subscription pauses
// after failing for a time (failing_since: its first failure since its last success), and a paused one is
// probed on the back-off schedule (next_probe_at; null: not probed, it waits for a person, as after 410 Gone).
export const migration0021DeliveryDispatch: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema.alterTable('webhook_subscriptions').addColumn('failing_since', 'text').execute();
    await db.schema.alterTable('webhook_subscriptions').addColumn('next_probe_at', 'text').execute();
    // Paused before this by the count of failures in a row: probed from now on, like a pause for failing too long.
    await sql`UPDATE webhook_subscriptions SET next_probe_at = paused_at, failing_since = last_error_at
        WHERE paused_at IS NOT NULL AND pause_reason LIKE '%attempts in a row failed%'`.execute(db);
    await db.schema
      .createIndex('event_deliveries_claim')
      .on('event_deliveries')
      .columns(['subscription_id', 'next_attempt_at', 'event_seq'])
      .where(sql<boolean>`status = 'pending'`)
      .execute();
    await db.schema.dropIndex('event_deliveries_due').execute();
  },
};
