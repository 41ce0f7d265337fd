import type { Kysely, Migration } from 'kysely';

// Issue 25: the time-stamping authority (docs/tsa.md). One identity per scope: '' is the service's own TSA,
// a tenant id that tenant's (/tsa/<tenant>). The key lives in a key store like every other key; the chain is
// the TSA certificate first, then the CAs above it (PEM), null until `signbridge tsa cert import` installs
// it for a key made with --csr. serial_block: the last block of serial counters an instance reserved.
export const migration0017TsaIdentities: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('tsa_identities')
      .addColumn('scope', 'text', (c) => c.primaryKey())
      .addColumn('key_store', 'text', (c) => c.notNull())
      .addColumn('key_ref', 'text', (c) => c.notNull())
      .addColumn('key_spec', 'text', (c) => c.notNull())
      .addColumn('algorithm', 'text', (c) => c.notNull())
      .addColumn('public_key_pem', 'text', (c) => c.notNull())
      .addColumn('chain_pem', 'text')
      .addColumn('csr_pem', 'text')
      .addColumn('serial_block', 'bigint', (c) => c.notNull().defaultTo(0))
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('created_by', 'text', (c) => c.notNull())
      .addColumn('updated_at', 'text', (c) => c.notNull())
      .execute();
  },
};
