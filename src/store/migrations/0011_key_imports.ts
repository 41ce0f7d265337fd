import type { Kysely, Migration } from 'kysely';

// Key import (bring your own key): a key awaiting material, from get_import_params until import_key. Its id is
// the kms_key_id the client got, and becomes the key version's id. A row also stands for new parameters asked
// for an imported key that exists (reimport); it goes when the material arrives.
export const migration0011KeyImports: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('key_imports')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('key_spec', 'text', (c) => c.notNull())
      .addColumn('key_store', 'text', (c) => c.notNull())
      // The key the key store made for it (AWS KMS: CreateKey with Origin EXTERNAL); null when import makes it.
      .addColumn('key_ref', 'text')
      // The RSA wrapping key in the token (null for a key store that wraps itself, and once swept after expiry).
      .addColumn('wrapping_key_ref', 'text')
      .addColumn('wrapping_algorithm', 'text', (c) => c.notNull())
      .addColumn('wrapping_key_spec', 'text', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('valid_to', 'text', (c) => c.notNull())
      .execute();
    await db.schema.createIndex('key_imports_valid_to').on('key_imports').column('valid_to').execute();
  },
};
