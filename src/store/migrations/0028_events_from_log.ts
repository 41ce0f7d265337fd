import { type Kysely, type Migration, sql } from 'kysely';

// Issue 46: signature.signed for a signature made at once is read from the audit log, not copied into the outbox
// (docs/events.md, "Events read from the log"). Each subscription keeps a cursor into the log: the seq of the last
// `signed` entry it has been handed, leased by one instance at a time as deliveries are.
// - event_log_cursors: one row per subscription. An existing subscription starts at the log's head now: every entry
//   up to it was written by the version before, which wrote its event into the outbox (delivered from there as
//   before), and every entry after it is written by this version, which writes none, so across the upgrade each
//   signature is told of once. (All processes on one database run the same version: docs/deployment.md.)
// - audit_log_signed_at_once: the `signed` entries of signatures made at once (sign, pkcs11_sign), by tenant, in
//   seq order: what a cursor reads, through a partial index whatever else the log holds.
export const migration0028EventsFromLog: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('event_log_cursors')
      .addColumn('subscription_id', 'text', (c) => c.primaryKey())
      .addColumn('after_seq', 'integer', (c) => c.notNull())
      .addColumn('lease_owner', 'text')
      .addColumn('lease_until', 'text')
      .execute();
    await sql`INSERT INTO event_log_cursors (subscription_id, after_seq)
        SELECT id, (SELECT coalesce(max(seq), 0) FROM audit_log) FROM webhook_subscriptions`.execute(db);
    await sql`CREATE INDEX audit_log_signed_at_once ON audit_log (tenant_id, seq)
        WHERE outcome = 'signed' AND action IN ('sign', 'pkcs11_sign')`.execute(db);
  },
};
