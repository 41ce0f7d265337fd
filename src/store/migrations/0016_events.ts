import { type Kysely, type Migration, PostgresAdapter, sql } from 'kysely';

// Issue 24: events and their delivery (docs/events.md). The outbox gets its rows in the transaction of the
// change they tell of; a dispatcher on any instance fans each out to the subscriptions that want it (one
// delivery row per subscription) and sends the deliveries under a lease (src/store/event-store.ts).
export const migration0016Events: Migration = {
  async up(db: Kysely<unknown>) {
    const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
    await db.schema
      .createTable('event_outbox')
      // Insertion order; a request's events are written in separate transactions one after the other, so this
      // is also their causal order.
      .addColumn('seq', postgres ? sql`bigserial` : 'integer', (c) =>
        postgres ? c.primaryKey() : c.primaryKey().autoIncrement(),
      )
      .addColumn('id', 'text', (c) => c.notNull().unique())
      .addColumn('tenant_id', 'text')
      .addColumn('type', 'text', (c) => c.notNull())
      .addColumn('timestamp', 'text', (c) => c.notNull())
      .addColumn('data', 'text', (c) => c.notNull())
      .addColumn('order_key', 'text')
      .addColumn('fanned_out', 'integer', (c) => c.notNull().defaultTo(0))
      .execute();
    await db.schema
      .createIndex('event_outbox_to_fan_out')
      .on('event_outbox')
      .column('seq')
      .where(sql<boolean>`fanned_out = 0`)
      .execute();
    await db.schema
      .createTable('webhook_subscriptions')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('url', 'text', (c) => c.notNull())
      .addColumn('format', 'text', (c) => c.notNull())
      // JSON array of event kinds; null: every kind.
      .addColumn('event_kinds', 'text')
      // The Standard Webhooks secret (whsec_...), needed to sign; shown once, never listed. Null for other formats.
      .addColumn('secret', 'text')
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('created_by', 'text', (c) => c.notNull())
      .addColumn('paused_at', 'text')
      .addColumn('pause_reason', 'text')
      .addColumn('last_error', 'text')
      .addColumn('last_error_at', 'text')
      .addColumn('last_delivered_at', 'text')
      .addColumn('failures_in_a_row', 'integer', (c) => c.notNull().defaultTo(0))
      .execute();
    await db.schema
      .createIndex('webhook_subscriptions_tenant')
      .on('webhook_subscriptions')
      .column('tenant_id')
      .execute();
    await db.schema
      .createTable('event_deliveries')
      .addColumn('event_seq', postgres ? sql`bigint` : 'integer', (c) => c.notNull())
      .addColumn('subscription_id', 'text', (c) => c.notNull())
      // The event's order key, copied: the claim's "nothing earlier of the same request still pending" check.
      .addColumn('order_key', 'text')
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('next_attempt_at', 'text', (c) => c.notNull())
      .addColumn('lease_until', 'text')
      .addColumn('lease_owner', 'text')
      .addColumn('last_status', 'integer')
      .addColumn('last_error', 'text')
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('delivered_at', 'text')
      .addPrimaryKeyConstraint('event_deliveries_pk', ['event_seq', 'subscription_id'])
      .execute();
    await db.schema
      .createIndex('event_deliveries_due')
      .on('event_deliveries')
      .columns(['next_attempt_at', 'event_seq'])
      .where(sql<boolean>`status = 'pending'`)
      .execute();
    await db.schema
      .createIndex('event_deliveries_order')
      .on('event_deliveries')
      .columns(['subscription_id', 'order_key', 'event_seq'])
      .where(sql<boolean>`status = 'pending'`)
      .execute();
    // Reminders and warnings are sent once: the sweep sets these in the transaction that writes the event.
    await db.schema.alterTable('pending_requests').addColumn('reminded_at', 'text').execute();
    await db.schema.alterTable('policy_exceptions').addColumn('expiry_warned_at', 'text').execute();
  },
};
