import { type Kysely, type Migration, sql } from 'kysely';

// A counter that every write to tenants, keys and API keys raises in the same transaction (KyselyStore does
// it): a process that caches those rows reads one number to know whether any process changed them. SQLite's
// PRAGMA data_version did that job, but it changes on every commit of another connection, and the store's
// writer thread commits every signature on a connection of its own.
export const migration0006CacheEpoch: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('cache_epoch')
      .addColumn('id', 'integer', (c) => c.primaryKey())
      .addColumn('n', 'integer', (c) => c.notNull())
      .execute();
    await sql`INSERT INTO cache_epoch (id, n) VALUES (1, 0)`.execute(db);
  },
};
