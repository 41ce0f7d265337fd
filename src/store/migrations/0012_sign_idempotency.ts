import type { Kysely, Migration } from 'kysely';

// Issue 16: a client that retries a sign after a lost connection sends the same Idempotency-Key and gets the
// first answer back instead of a second signature (src/api/idempotency.ts).
export const migration0012SignIdempotency: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('sign_idempotency')
      .addColumn('caller_id', 'text', (c) => c.notNull())
      .addColumn('idem_key', 'text', (c) => c.notNull())
      .addColumn('fingerprint', 'text', (c) => c.notNull())
      .addColumn('reply', 'text')
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('updated_at', 'text', (c) => c.notNull())
      .addPrimaryKeyConstraint('sign_idempotency_pk', ['caller_id', 'idem_key'])
      .execute();
    await db.schema.createIndex('sign_idempotency_created').on('sign_idempotency').column('created_at').execute();
  },
};
