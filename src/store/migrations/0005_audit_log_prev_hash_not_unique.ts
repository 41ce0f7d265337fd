import { type Kysely, type Migration, sql, type Transaction } from 'kysely';

// 0003 made prev_hash unique so that two writers racing for the same predecessor could not fork the chain. They
// already collide on seq, the primary key (each writes its head's seq + 1), so the index guarded nothing more,
// and as an index on a random key it cost a page write per entry in every group commit. SQLite cannot drop a
// column constraint, so the table is rebuilt (in one transaction: the migrator runs SQLite's without one).
export const migration0005AuditLogPrevHashNotUnique: Migration = {
  async up(db: Kysely<unknown>) {
    const rebuild = async (tx: Kysely<unknown> | Transaction<unknown>) => {
      await tx.schema
        .createTable('audit_log_0005')
        .addColumn('seq', 'integer', (c) => c.primaryKey())
        .addColumn('at', 'text', (c) => c.notNull())
        .addColumn('tenant_id', 'text')
        .addColumn('actor', 'text', (c) => c.notNull())
        .addColumn('action', 'text', (c) => c.notNull())
        .addColumn('outcome', 'text', (c) => c.notNull())
        .addColumn('details', 'text', (c) => c.notNull())
        .addColumn('prev_hash', 'text', (c) => c.notNull())
        .addColumn('hash', 'text', (c) => c.notNull())
        .execute();
      const columns = ['seq', 'at', 'tenant_id', 'actor', 'action', 'outcome', 'details', 'prev_hash', 'hash'];
      await sql`INSERT INTO audit_log_0005 (${sql.join(columns.map((c) => sql.ref(c)))})
          SELECT ${sql.join(columns.map((c) => sql.ref(c)))} FROM audit_log`.execute(tx);
      await tx.schema.dropTable('audit_log').execute();
      await tx.schema.alterTable('audit_log_0005').renameTo('audit_log').execute();
    };
    if (db.isTransaction) await rebuild(db);
    else await db.transaction().execute(rebuild);
  },
};
