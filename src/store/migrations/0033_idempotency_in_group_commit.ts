import { type Kysely, type Migration, PostgresAdapter, sql } from 'kysely';

// Issue 46, "less per request": a request with an Idempotency-Key that signs at once writes its idempotency record
// in the group commit of its `signed` entry, instead of a claim (an INSERT of its own before signing) and an answer
// (an UPDATE of its own after): one write transaction per signature, not three (src/api/idempotency.ts).
// - sign_idempotency.log_seq: the seq of the entry whose commit wrote the record. Its answer's Signbridge-Log-Index
//   (seq - 1) is only known in that commit, so the reply is kept without it and a replay adds it back. Null for a
//   record written on its own (a 202, an answer not made at once) and for the rows of older releases, whose reply
//   holds its index itself.
// - PostgreSQL: signbridge_group_commit_v8 = v6 (migration 0030) and then the records, each on the seq of its
//   entry, in the same transaction. It calls v6 rather than copying it, so that the function that writes the
//   entries stays one (a later version of the entries' appender is called here instead). v6 stays for instances on
//   older code during a rolling upgrade; they still claim and answer on their own, which this code reads as before.
export const migration0033IdempotencyInGroupCommit: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema.alterTable('sign_idempotency').addColumn('log_seq', 'integer').execute();
    if (!(db.getExecutor().adapter instanceof PostgresAdapter)) return;
    await sql`
        CREATE OR REPLACE FUNCTION signbridge_group_commit_v8(
          lock_key bigint, new_signatures jsonb, new_entries jsonb, later_hashes jsonb, new_events jsonb,
          completions jsonb, new_items jsonb, new_idempotency jsonb
        ) RETURNS integer LANGUAGE plpgsql AS $fn$
        DECLARE
          first_seq integer;
          r record;
        BEGIN
          first_seq := signbridge_group_commit_v6(lock_key, new_signatures, new_entries, later_hashes, new_events,
                                                  completions, new_items);
          IF first_seq IS NULL THEN
            RETURN NULL;
          END IF;
          -- Each record on its entry's seq; a live record of the key (another instance answered it meanwhile) is
          -- kept, an expired one or a claim left by a dead process replaced (group-commit.ts: UPSERT_IDEMPOTENCY_SQL).
          FOR r IN SELECT * FROM jsonb_to_recordset(new_idempotency) AS x(
                     caller_id text, idem_key text, fingerprint text, reply text, created_at text,
                     expired_before text, stale_before text, audit integer) LOOP
            INSERT INTO sign_idempotency AS s (caller_id, idem_key, fingerprint, reply, created_at, updated_at, log_seq)
              VALUES (r.caller_id, r.idem_key, r.fingerprint, r.reply, r.created_at, r.created_at, first_seq + r.audit)
            ON CONFLICT (caller_id, idem_key) DO UPDATE
              SET fingerprint = excluded.fingerprint, reply = excluded.reply, created_at = excluded.created_at,
                  updated_at = excluded.updated_at, log_seq = excluded.log_seq
              WHERE s.created_at < r.expired_before OR (s.reply IS NULL AND s.updated_at < r.stale_before);
          END LOOP;
          RETURN first_seq;
        END
        $fn$`.execute(db);
  },
};
