import type { Kysely, Migration } from 'kysely';

// Issue 15: keys live in more than one key store (PKCS#11, AWS KMS, the software store for what the HSM cannot
// hold), so each key version records which one holds it; imported keys record their origin and, when the
// material expires, when.
export const migration0010KeyStores: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .alterTable('keys')
      .addColumn('key_store', 'text', (c) => c.notNull().defaultTo('pkcs11'))
      .execute();
    await db.schema
      .alterTable('keys')
      .addColumn('origin', 'text', (c) => c.notNull().defaultTo('generated'))
      .execute();
    await db.schema.alterTable('keys').addColumn('material_expires_at', 'text').execute();
  },
};
