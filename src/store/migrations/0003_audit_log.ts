import type { Kysely, Migration } from 'kysely';

export const migration0003AuditLog: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('audit_log')
      .addColumn('seq', 'integer', (c) => c.primaryKey())
      .addColumn('at', 'text', (c) => c.notNull())
      .addColumn('tenant_id', 'text')
      .addColumn('actor', 'text', (c) => c.notNull())
      .addColumn('action', 'text', (c) => c.notNull())
      .addColumn('outcome', 'text', (c) => c.notNull())
      .addColumn('details', 'text', (c) => c.notNull())
      // One successor per entry: two writers racing for the same predecessor cannot fork the chain.
      .addColumn('prev_hash', 'text', (c) => c.notNull().unique())
      .addColumn('hash', 'text', (c) => c.notNull())
      .execute();
  },
};
