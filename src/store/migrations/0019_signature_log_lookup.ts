import { type Kysely, type Migration, PostgresAdapter, sql } from 'kysely';
import { binaryType } from './column-types.js';

// Issue 25: a verifier finds a signature's `signed` audit entry (its leaf in the transparency log) by the
// SHA-256 of the raw signature bytes, or by the digest signed. 0017 and 0018 are taken by other work on the
// same issue; migrations run in name order, so the gap is harmless.
// - signature_lookups: one row per signature handed out, keyed by its entry's seq (rows land at the end of the
//   table); written after the key store returned the signature, so a crash can lose the row of a signature
//   whose record was written ahead of it (src/signing/signature-recorder.ts). The lookup by digest does not need
//   it. SHA-256 is not unique per row: RSA PKCS#1 v1.5 signs the same digest to the same bytes.
// - audit_log_signed_digest: the lookup by digest reads the `signed` entries themselves (details.hash), through
//   a partial index on the expression audit.seqOfDigest queries (audit-store.ts).
// - pending_requests.signed_seq: the seq of an approved request's `signed` entry, for whoever collects it.
// - PostgreSQL: signbridge_group_commit_v2, v1 plus the lookup rows, answering the batch's first seq.
export const migration0019SignatureLogLookup: Migration = {
  async up(db: Kysely<unknown>) {
    const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
    await db.schema
      .createTable('signature_lookups')
      .addColumn('audit_seq', 'integer', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('signature_sha256', binaryType(db), (c) => c.notNull())
      .addColumn('signature_id', 'text', (c) => c.notNull())
      .execute();
    await db.schema
      .createIndex('signature_lookups_sha256')
      .on('signature_lookups')
      .column('signature_sha256')
      .execute();
    await db.schema.alterTable('pending_requests').addColumn('signed_seq', 'integer').execute();
    if (!postgres) {
      await sql`CREATE INDEX audit_log_signed_digest ON audit_log (tenant_id, json_extract(details, '$.hash'))
          WHERE outcome = 'signed'`.execute(db);
      return;
    }
    await sql`CREATE INDEX audit_log_signed_digest ON audit_log (tenant_id, ((details)::jsonb ->> 'hash'), seq)
        WHERE outcome = 'signed'`.execute(db);
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
          INSERT INTO signature_lookups (audit_seq, tenant_id, signature_sha256, signature_id)
            SELECT l.audit_seq, l.tenant_id, decode(l.signature_sha256, 'hex'), l.signature_id
            FROM jsonb_to_recordset(new_lookups) AS l(
              audit_seq integer, tenant_id text, signature_sha256 text, signature_id text)
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
              INSERT INTO signature_lookups (audit_seq, tenant_id, signature_sha256, signature_id)
                VALUES (head_seq, entry ->> 'tenant_id', decode(entry ->> 'lookup_sha256', 'hex'),
                        entry ->> 'lookup_signature_id');
            END IF;
            head_hash := entry_hash;
          END LOOP;
          RETURN first_seq;
        END
        $fn$`.execute(db);
  },
};
