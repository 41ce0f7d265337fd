import type { Kysely, Migration } from 'kysely';

// The trial endpoint's per-address limit, kept in the store so that a restart does not hand every client a
// fresh allowance, and every instance on one database counts together. One row per address: its window's
// start (ms since the epoch) and the requests counted in it.
export const migration0007TrialCounters: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('trial_counters')
      .addColumn('client', 'text', (c) => c.primaryKey())
      .addColumn('window_start', 'bigint', (c) => c.notNull())
      .addColumn('count', 'integer', (c) => c.notNull())
      .execute();
    await db.schema.createIndex('trial_counters_window_start').on('trial_counters').column('window_start').execute();
  },
};
