import { type Kysely, type Migration, PostgresAdapter, sql } from 'kysely';
import { binaryType } from './column-types.js';

// Issue 46, "one row per signature": a signature made at once is its `signed` audit entry and nothing more.
// - audit_log.signature_sha256: the SHA-256 of the signature's raw bytes on the entry's own row, set in the entry's
//   INSERT when the signature is known, or by a later UPDATE of the row riding along a later group commit when the
//   entry was written ahead of the signature (the SQLite writer thread). Not hashed: the chain hash and the log leaf
//   cover the entry's canonical JSON (audit-hash.cjs: hashedFields), never this column.
// - audit_log_signature: a partial index on it where it is not null. The whole 32 bytes: a prefix would save about
//   24 B a signature but make every lookup name the prefix expression twice (index and check) in both dialects;
//   the column and its index are measured in docs/benchmarks.md ("Bytes on disk per signature").
// - audit_log_withdrawn: which `signed` entry a key store failure withdrew (a sign_failed entry naming its
//   details.signature_id, as every withdrawal has since writing ahead began), for the lookup by digest; it read the
//   absence of a signatures row before. Partial: sign_failed entries only, a few bytes each.
// - signatures and signature_lookups are no longer written (since this release) and keep their rows: a
//   signature_lookups row is how an entry from before 0030 is found by its signature (AuditStore.seqOfSignature
//   reads the column, then the table). Copying them into the column would rewrite one audit_log row per signature
//   ever made (on SQLite, every page of the log; on PostgreSQL, a new row version and a vacuum of the log) while the
//   service waits for `admin migrate`: minutes to hours for a log of millions, for a lookup that costs one more
//   indexed read on a miss. The signatures rows nothing reads any more; they stay, as the pruner never deletes
//   what the log's entries were written with (docs/deployment.md, "Retention").
// - PostgreSQL: signbridge_group_commit_v6, the chain's appender writing each entry with its signature's hash and
//   setting the hashes of entries written ahead, with v3's events, v4's completions and v5's batch items; no
//   signatures or signature_lookups rows. Whole rather than a call of v5, so that no row is written twice. Instances
//   on the previous code keep calling v2 to v5, which stay: during a rolling upgrade they still write signatures
//   and signature_lookups rows, which the lookups read.
export const migration0030OneRowPerSignature: Migration = {
  async up(db: Kysely<unknown>) {
    const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
    await db.schema.alterTable('audit_log').addColumn('signature_sha256', binaryType(db)).execute();
    await sql`CREATE INDEX audit_log_signature ON audit_log (signature_sha256) WHERE signature_sha256 IS NOT NULL`.execute(
      db,
    );
    const signatureId = postgres
      ? sql`((details)::jsonb ->> 'signature_id')`
      : sql`json_extract(details, '$.signature_id')`;
    await sql`CREATE INDEX audit_log_withdrawn ON audit_log (${signatureId}) WHERE outcome = 'sign_failed'`.execute(db);
    if (!postgres) return;
    await sql`
        CREATE OR REPLACE FUNCTION signbridge_group_commit_v6(
          lock_key bigint, new_signatures jsonb, new_entries jsonb, later_hashes jsonb, new_events jsonb,
          completions jsonb, new_items jsonb
        ) RETURNS integer LANGUAGE plpgsql AS $fn$
        DECLARE
          head_seq integer;
          head_hash text;
          first_seq integer;
          entry jsonb;
          entry_hash text;
        BEGIN
          -- Only the store's contract tests hand signatures rows (SignatureStore.record); the service none.
          INSERT INTO signatures (id, tenant_id, key_id, algorithm, hash, caller, created_at)
            SELECT s.id, s.tenant_id, s.key_id, s.algorithm, s.hash, s.caller, s.created_at
            FROM jsonb_to_recordset(new_signatures) AS s(
              id text, tenant_id text, key_id text, algorithm text, hash text, caller text, created_at text);
          -- Entries committed before their signature was known (written ahead): their hash, on their own row.
          UPDATE audit_log AS a SET signature_sha256 = decode(h.signature_sha256, 'hex')
            FROM jsonb_to_recordset(later_hashes) AS h(audit_seq integer, signature_sha256 text)
           WHERE a.seq = h.audit_seq AND a.signature_sha256 IS NULL;
          IF jsonb_array_length(new_entries) > 0 THEN
            -- Held until the commit: one appender at a time, from any instance (v2 says why).
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
              INSERT INTO audit_log (seq, at, tenant_id, actor, action, outcome, details, prev_hash, hash,
                                     signature_sha256)
                VALUES (head_seq, entry ->> 'at', entry ->> 'tenant_id', entry ->> 'actor', entry ->> 'action',
                        entry ->> 'outcome', entry ->> 'details', head_hash, entry_hash,
                        decode(entry ->> 'signature_sha256', 'hex'));
              head_hash := entry_hash;
            END LOOP;
          END IF;
          INSERT INTO event_outbox (id, tenant_id, type, timestamp, data, order_key, fanned_out)
            SELECT e.id, e.tenant_id, e.type, e.timestamp, e.data, e.order_key, e.fanned_out
            FROM jsonb_to_recordset(new_events) AS e(
              id text, tenant_id text, type text, timestamp text, data text, order_key text, fanned_out integer);
          IF first_seq IS NULL THEN
            RETURN NULL;
          END IF;
          -- As v4: a one-digest request takes its signature and its entry's seq; a batch its results.
          UPDATE pending_requests AS p
             SET status = 'approved', signature = c.signature, updated_at = c.updated_at,
                 signed_seq = CASE WHEN c.signature IS NULL THEN NULL ELSE first_seq + c.audit END,
                 batch = CASE WHEN c.batch IS NULL THEN p.batch ELSE jsonb_build_object(
                   'hashes', c.batch -> 'hashes',
                   'results', (
                     SELECT jsonb_agg(CASE WHEN r ? 'entry' THEN jsonb_build_object(
                              'signature', r -> 'signature',
                              'seq', first_seq + c.audit + (r ->> 'entry')::integer,
                              'signature_id', r -> 'signature_id')
                            ELSE r END ORDER BY n)
                       FROM jsonb_array_elements(c.batch -> 'results') WITH ORDINALITY AS x(r, n)))::text END
            FROM jsonb_to_recordset(completions) AS c(
              id text, updated_at text, signature text, batch jsonb, audit integer)
           WHERE p.id = c.id AND p.status = 'signing';
          -- As v5: a batch entry's items, each on the seq of its entry.
          INSERT INTO batch_items (batch_seq, item_index, digest, signature_sha256)
            SELECT first_seq + i.audit, i.item_index, decode(i.digest, 'hex'), decode(i.signature_sha256, 'hex')
            FROM jsonb_to_recordset(new_items) AS i(audit integer, item_index integer, digest text,
                                                   signature_sha256 text);
          RETURN first_seq;
        END
        $fn$`.execute(db);
  },
};
