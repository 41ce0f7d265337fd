import { type Kysely, type Migration, PostgresAdapter, sql } from 'kysely';

// Issue 44: an approved request's signature, its `signed` entry and the request's move from `signing` to
// `approved` are one commit. They were two, and a process killed between them left the request in `signing` with
// its signature in the log: the approver's retry got 409, and the request was later signed again.
// - pending_requests.via: the API and credential a held request came through (SignRequest.via), so that the
//   `signed` entry made at its approval names them like its pending entry did. Null on requests made before.
// - pending_requests.pss_salt_length: an RSA PSS request's salt length when it asked for one other than the hash's
//   (Vault transit's salt_length), so that its approval signs with the salt the client asked for.
// - PostgreSQL: signbridge_group_commit_v4, v3 plus the requests the batch's signatures complete, each moved to
//   `approved` with its signature and the seq of its entry (first_seq + the entry's index in the batch), or, for a
//   held batch, with every digest's result (all of its signatures are in the one write), under the chain's advisory
//   lock. Only a request still in `signing` moves. Instances on the previous code keep calling v2
//   and v3, which stay. Nothing more on SQLite, whose store commits in-process.
export const migration0027ApprovalOneCommit: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema.alterTable('pending_requests').addColumn('via', 'text').execute();
    await db.schema.alterTable('pending_requests').addColumn('pss_salt_length', 'integer').execute();
    if (!(db.getExecutor().adapter instanceof PostgresAdapter)) return;
    await sql`
        CREATE OR REPLACE FUNCTION signbridge_group_commit_v4(
          lock_key bigint, new_signatures jsonb, withdrawn text[], new_entries jsonb, new_lookups jsonb,
          new_events jsonb, completions jsonb
        ) RETURNS integer LANGUAGE plpgsql AS $fn$
        DECLARE
          first_seq integer;
        BEGIN
          first_seq := signbridge_group_commit_v3(
            lock_key, new_signatures, withdrawn, new_entries, new_lookups, new_events);
          -- A one-digest request takes its signature and its entry's seq; a batch its results, each signed digest
          -- on the seq of its own entry (group-commit.ts: completedRequestRow does the same on SQLite).
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
          RETURN first_seq;
        END
        $fn$`.execute(db);
  },
};
