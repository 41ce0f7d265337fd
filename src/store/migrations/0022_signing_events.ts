import { type Kysely, type Migration, PostgresAdapter, sql } from 'kysely';

// Issue 31: every signature tells of itself (signature.signed), in the transaction of its record and `signed`
// audit entry, for tenants with a subscription that wants it. On PostgreSQL the group commit is one function
// call: signbridge_group_commit_v3 is v2 plus the outbox rows, so a batch that tells of events still costs one
// round trip (v2's callers wrote them with BEGIN, the call, an INSERT and COMMIT: four). The rows are inserted
// under the chain's advisory lock, after the entries. Nothing on SQLite, whose store commits in-process.
export const migration0022SigningEvents: Migration = {
  async up(db: Kysely<unknown>) {
    if (!(db.getExecutor().adapter instanceof PostgresAdapter)) return;
    await sql`
        CREATE OR REPLACE FUNCTION signbridge_group_commit_v3(
          lock_key bigint, new_signatures jsonb, withdrawn text[], new_entries jsonb, new_lookups jsonb,
          new_events jsonb
        ) RETURNS integer LANGUAGE plpgsql AS $fn$
        DECLARE
          first_seq integer;
        BEGIN
          first_seq := signbridge_group_commit_v2(lock_key, new_signatures, withdrawn, new_entries, new_lookups);
          INSERT INTO event_outbox (id, tenant_id, type, timestamp, data, order_key, fanned_out)
            SELECT e.id, e.tenant_id, e.type, e.timestamp, e.data, e.order_key, e.fanned_out
            FROM jsonb_to_recordset(new_events) AS e(
              id text, tenant_id text, type text, timestamp text, data text, order_key text, fanned_out integer);
          RETURN first_seq;
        END
        $fn$`.execute(db);
  },
};
