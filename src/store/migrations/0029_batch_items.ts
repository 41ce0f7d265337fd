import { type Kysely, type Migration, PostgresAdapter, sql } from 'kysely';
import { binaryType } from './column-types.js';

// Issue 46, "a batch pays once": a batch of signatures made at once (or approved as one held request) is one
// `signed` audit entry, one log leaf, whose details.batch.root is the Merkle root over its items
// (docs/transparency.md, "A batch's items"). What a proof of one item needs is kept here, nothing more:
// - batch_items: per signed digest its batch entry's seq, its index in the request, the digest and the SHA-256 of
//   the signature; keyed by (batch_seq, item_index), so a batch's rows sit together and are read in leaf order
//   (an item's position in the batch's tree is its rank by index). No rowid on SQLite: the key is the row's place.
// - batch_items_signature: finds an item by its signature's SHA-256 (`audit prove --signature`).
// - PostgreSQL: signbridge_group_commit_v5, v4 plus the items of the batch entries of the call, each on the seq
//   of its entry (first_seq + the entry's index in the call), under the chain's advisory lock. Instances on the
//   previous code keep calling v2 to v4, which stay. Nothing more on SQLite, whose store commits in-process.
export const migration0029BatchItems: Migration = {
  async up(db: Kysely<unknown>) {
    const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
    let table = db.schema
      .createTable('batch_items')
      .addColumn('batch_seq', 'integer', (c) => c.notNull())
      .addColumn('item_index', 'integer', (c) => c.notNull())
      .addColumn('digest', binaryType(db), (c) => c.notNull())
      .addColumn('signature_sha256', binaryType(db), (c) => c.notNull())
      .addPrimaryKeyConstraint('batch_items_pk', ['batch_seq', 'item_index']);
    if (!postgres) table = table.modifyEnd(sql`WITHOUT ROWID`);
    await table.execute();
    await db.schema.createIndex('batch_items_signature').on('batch_items').column('signature_sha256').execute();
    if (!postgres) return;
    await sql`
        CREATE OR REPLACE FUNCTION signbridge_group_commit_v5(
          lock_key bigint, new_signatures jsonb, withdrawn text[], new_entries jsonb, new_lookups jsonb,
          new_events jsonb, completions jsonb, new_items jsonb
        ) RETURNS integer LANGUAGE plpgsql AS $fn$
        DECLARE
          first_seq integer;
        BEGIN
          first_seq := signbridge_group_commit_v4(
            lock_key, new_signatures, withdrawn, new_entries, new_lookups, new_events, completions);
          INSERT INTO batch_items (batch_seq, item_index, digest, signature_sha256)
            SELECT first_seq + i.audit, i.item_index, decode(i.digest, 'hex'), decode(i.signature_sha256, 'hex')
            FROM jsonb_to_recordset(new_items) AS i(audit integer, item_index integer, digest text,
                                                   signature_sha256 text);
          RETURN first_seq;
        END
        $fn$`.execute(db);
  },
};
