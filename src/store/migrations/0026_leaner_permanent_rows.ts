import { type Kysely, type Migration, PostgresAdapter, sql } from 'kysely';

// Issue 34 ("bytes per signature ... cut where they are redundant"), for rows kept for ever:
// - signature_lookups.signature_id repeated what the row's `signed` entry holds (details.signature_id, found by
//   audit_seq) and nothing read it: ~37 B of a lookup row's 129 on SQLite. Dropped. On PostgreSQL the group commit
//   function keeps its name and parameters (an instance still running the previous code calls it unchanged; the
//   signature_id its lookups carry is ignored) and stops writing the column first. SQLite rewrites the table for
//   DROP COLUMN: seconds per million rows.
// - signatures_tenant_time (tenant_id, created_at) served no query of the service (velocity limits count in
//   trial_counters; a record is only ever looked up by its id): dropped.
export const migration0026LeanerPermanentRows: Migration = {
  async up(db: Kysely<unknown>) {
    if (db.getExecutor().adapter instanceof PostgresAdapter) {
      await sql`
        CREATE OR REPLACE FUNCTION signbridge_group_commit_v2(
          lock_key bigint, new_signatures jsonb, withdrawn text[], new_entries jsonb, new_lookups jsonb
        ) RETURNS integer LANGUAGE plpgsql AS $fn$
        DECLARE
          head_seq integer;
          head_hash text;
          first_seq integer;
          entry jsonb;
          entry_hash text;
        BEGIN
          INSERT INTO signatures (id, tenant_id, key_id, algorithm, hash, caller, created_at)
            SELECT s.id, s.tenant_id, s.key_id, s.algorithm, s.hash, s.caller, s.created_at
            FROM jsonb_to_recordset(new_signatures) AS s(
              id text, tenant_id text, key_id text, algorithm text, hash text, caller text, created_at text);
          DELETE FROM signatures WHERE id = ANY(withdrawn);
          -- Lookup rows of signatures whose entries were committed before (their seq is known).
          INSERT INTO signature_lookups (audit_seq, tenant_id, signature_sha256)
            SELECT l.audit_seq, l.tenant_id, decode(l.signature_sha256, 'hex')
            FROM jsonb_to_recordset(new_lookups) AS l(audit_seq integer, tenant_id text, signature_sha256 text)
            ON CONFLICT (audit_seq) DO NOTHING;
          IF jsonb_array_length(new_entries) = 0 THEN
            RETURN NULL;
          END IF;
          -- Held until the commit: one appender at a time, from any instance. Each statement below sees what
          -- committed before the lock was granted (READ COMMITTED), so the head is the chain's real head.
          PERFORM pg_advisory_xact_lock(lock_key);
          SELECT seq, hash INTO head_seq, head_hash FROM audit_log ORDER BY seq DESC LIMIT 1;
          head_seq := coalesce(head_seq, 0);
          head_hash := coalesce(head_hash, repeat('0', 64));
          first_seq := head_seq + 1;
          FOR i IN 0 .. jsonb_array_length(new_entries) - 1 LOOP
            entry := new_entries -> i;
            head_seq := head_seq + 1;
            -- SHA-256 over the predecessor's hash, a newline, and the canonical JSON (before || seq || after).
            entry_hash := encode(sha256(convert_to(
              head_hash || chr(10) || (entry ->> 'before') || head_seq::text || (entry ->> 'after'), 'UTF8')), 'hex');
            INSERT INTO audit_log (seq, at, tenant_id, actor, action, outcome, details, prev_hash, hash)
              VALUES (head_seq, entry ->> 'at', entry ->> 'tenant_id', entry ->> 'actor', entry ->> 'action',
                      entry ->> 'outcome', entry ->> 'details', head_hash, entry_hash);
            -- The entry records a signature made before its record was written: its lookup row, on this seq.
            IF entry ? 'lookup_sha256' THEN
              INSERT INTO signature_lookups (audit_seq, tenant_id, signature_sha256)
                VALUES (head_seq, entry ->> 'tenant_id', decode(entry ->> 'lookup_sha256', 'hex'));
            END IF;
            head_hash := entry_hash;
          END LOOP;
          RETURN first_seq;
        END
        $fn$`.execute(db);
    }
    await db.schema.alterTable('signature_lookups').dropColumn('signature_id').execute();
    await db.schema.dropIndex('signatures_tenant_time').execute();
  },
};
