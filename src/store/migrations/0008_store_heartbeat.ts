import type { Kysely, Migration } from 'kysely';
import { binaryType } from './column-types.js';

// /readyz proves that the store can write (Store.probeWrite): a row the size of a few pages is committed here
// and deleted again, so a disk (or database) too full to grow fails the probe. Numbered after 0007 (trial
// counters).
export const migration0008StoreHeartbeat: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('store_heartbeat')
      .addColumn('id', 'integer', (c) => c.primaryKey())
      .addColumn('at', 'text', (c) => c.notNull())
      .addColumn('pad', binaryType(db), (c) => c.notNull())
      .execute();
  },
};
