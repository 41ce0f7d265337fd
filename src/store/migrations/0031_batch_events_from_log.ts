import { type Kysely, type Migration, sql } from 'kysely';

// Issue 46, "a batch pays once" for its events too: signature.signed of each signature of a batch made at once
// (`sign_batch`, one `signed` entry with its items in batch_items, migration 0029) is read from the audit log as a
// signature made at once is (migration 0028), not copied into the outbox once per signature (docs/events.md,
// "Events read from the log").
// - event_log_cursors.after_item: the cursor may stop inside a batch (a receiver failing at item 37 of 100): the
//   item_index of the last item of entry after_seq handed to the subscription; null when the whole entry was.
// - event_log_cursors.batches_after_seq: the cursor reads `sign_batch` entries only after this seq. An existing
//   subscription gets the log's head now: the batches up to it were written by the version before, which wrote their
//   events into the outbox (sent from there as before); later ones by this version, which writes none. A new
//   subscription's cursor starts at the head anyway (0 here).
// - audit_log_signed_at_once again, its condition now naming sign_batch too.
export const migration0031BatchEventsFromLog: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema.alterTable('event_log_cursors').addColumn('after_item', 'integer').execute();
    await db.schema
      .alterTable('event_log_cursors')
      .addColumn('batches_after_seq', 'integer', (c) => c.notNull().defaultTo(0))
      .execute();
    await sql`UPDATE event_log_cursors SET batches_after_seq = (SELECT coalesce(max(seq), 0) FROM audit_log)`.execute(
      db,
    );
    await sql`DROP INDEX audit_log_signed_at_once`.execute(db);
    await sql`CREATE INDEX audit_log_signed_at_once ON audit_log (tenant_id, seq)
        WHERE outcome = 'signed' AND action IN ('sign', 'pkcs11_sign', 'sign_batch')`.execute(db);
  },
};
