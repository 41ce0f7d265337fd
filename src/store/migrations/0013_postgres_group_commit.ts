import { type Kysely, type Migration, PostgresAdapter, sql } from 'kysely';

// Issue 16: PostgreSQL's group commit as one function call, so a batch of signature records and audit entries
// costs one round trip (statement and commit together) instead of six. It takes the audit chain's advisory lock
// (`lock_key`, computed in postgres-store.ts), reads the head and chains the entries on it: their hashes are
// computed here from the parts the application sends (audit-hash.cjs, entryHashParts), because the seq and the
// predecessor are only known once the lock is held. Nothing on SQLite, whose store commits in-process.
// A later change to the function gets a new name (…_v2) in a new migration, so that an instance still running
// the old release keeps calling the function it was written for.
export const migration0013PostgresGroupCommit: Migration = {
  async up(db: Kysely<unknown>) {
    if (!(db.getExecutor().adapter instanceof PostgresAdapter)) return;
    await sql`
        CREATE OR REPLACE FUNCTION signbridge_group_commit_v1(
          lock_key bigint, new_signatures jsonb, withdrawn text[], new_entries jsonb
        ) RETURNS integer LANGUAGE plpgsql AS $fn$
        DECLARE
          head_seq integer;
          head_hash text;
          entry jsonb;
          entry_hash text;
        BEGIN
          INSERT INTO signatures (id, tenant_id, key_id, algorithm, hash, caller, created_at)
            SELECT s.id, s.tenant_id, s.key_id, s.algorithm, s.hash, s.caller, s.created_at
            FROM jsonb_to_recordset(new_signatures) AS s(
              id text, tenant_id text, key_id text, algorithm text, hash text, caller text, created_at text);
          DELETE FROM signatures WHERE id = ANY(withdrawn);
          IF jsonb_array_length(new_entries) = 0 THEN
            RETURN NULL;
          END IF;
          -- Held until the commit: one appender at a time, from any instance. Each statement below sees what
          -- committed before the lock was granted (READ COMMITTED), so the head is the chain's real head.
          PERFORM pg_advisory_xact_lock(lock_key);
          SELECT seq, hash INTO head_seq, head_hash FROM audit_log ORDER BY seq DESC LIMIT 1;
          head_seq := coalesce(head_seq, 0);
          head_hash := coalesce(head_hash, repeat('0', 64));
          FOR i IN 0 .. jsonb_array_length(new_entries) - 1 LOOP
            entry := new_entries -> i;
            head_seq := head_seq + 1;
            -- SHA-256 over the predecessor's hash, a newline, and the canonical JSON (before || seq || after).
            entry_hash := encode(sha256(convert_to(
              head_hash || chr(10) || (entry ->> 'before') || head_seq::text || (entry ->> 'after'), 'UTF8')), 'hex');
            INSERT INTO audit_log (seq, at, tenant_id, actor, action, outcome, details, prev_hash, hash)
              VALUES (head_seq, entry ->> 'at', entry ->> 'tenant_id', entry ->> 'actor', entry ->> 'action',
                      entry ->> 'outcome', entry ->> 'details', head_hash, entry_hash);
            head_hash := entry_hash;
          END LOOP;
          RETURN head_seq;
        END
        $fn$`.execute(db);
  },
};
