import { type Kysely, type Migration, PostgresAdapter, sql } from 'kysely';
import { binaryType } from './column-types.js';

// Issue 25: a Merkle tree over the audit log (docs/transparency.md, src/transparency/). log_state is the tree's
// size and the chain hash of its last entry (the integrator checks that what it appends follows it); log_tiles
// the interior hashes as tlog-tiles-style tiles (a full tile, 256 hashes, is never rewritten; the right-edge tile
// of each level is, as it grows); log_checkpoints every signed checkpoint; log_keys the log's signing key (its
// key store and reference, like a tenant key) and the origin it signs for. 0017 is the TSA's.
export const migration0018TransparencyLog: Migration = {
  async up(db: Kysely<unknown>) {
    const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
    const big = postgres ? sql`bigint` : sql`integer`;
    await db.schema
      .createTable('log_state')
      .addColumn('id', 'integer', (c) => c.primaryKey())
      .addColumn('tree_size', big, (c) => c.notNull())
      .addColumn('chain_hash', 'text', (c) => c.notNull())
      .addColumn('updated_at', 'text', (c) => c.notNull())
      .execute();
    await sql`INSERT INTO log_state (id, tree_size, chain_hash, updated_at)
        VALUES (1, 0, ${'0'.repeat(64)}, ${new Date(0).toISOString()})`.execute(db);
    await db.schema
      .createTable('log_tiles')
      .addColumn('level', 'integer', (c) => c.notNull())
      .addColumn('idx', big, (c) => c.notNull())
      .addColumn('hashes', binaryType(db), (c) => c.notNull())
      .addPrimaryKeyConstraint('log_tiles_pk', ['level', 'idx'])
      .execute();
    await db.schema
      .createTable('log_checkpoints')
      .addColumn('tree_size', big, (c) => c.primaryKey())
      .addColumn('root_hash', 'text', (c) => c.notNull())
      .addColumn('note', 'text', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .execute();
    await db.schema
      .createTable('log_keys')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('origin', 'text', (c) => c.notNull())
      .addColumn('key_store', 'text', (c) => c.notNull())
      .addColumn('key_ref', 'text', (c) => c.notNull())
      .addColumn('key_spec', 'text', (c) => c.notNull())
      .addColumn('public_key_pem', 'text', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .execute();
  },
};
