import type { Kysely, Migration } from 'kysely';

// Issue 22: CI jobs sign with their own OIDC identity (docs/ci.md). Each tenant's trust rules; the tokens
// already exchanged (one exchange per token, across instances); and the verified identity a minted key carries.
export const migration0015WorkloadIdentity: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('workload_trust_rules')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('issuer', 'text', (c) => c.notNull())
      .addColumn('audience', 'text')
      .addColumn('conditions', 'text', (c) => c.notNull())
      .addColumn('role', 'text', (c) => c.notNull())
      .addColumn('key_minutes', 'integer', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('created_by', 'text', (c) => c.notNull())
      .execute();
    await db.schema
      .createIndex('workload_trust_rules_tenant_issuer')
      .on('workload_trust_rules')
      .columns(['tenant_id', 'issuer'])
      .execute();
    await db.schema
      .createTable('workload_token_uses')
      .addColumn('issuer', 'text', (c) => c.notNull())
      .addColumn('token_id', 'text', (c) => c.notNull())
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('used_at', 'text', (c) => c.notNull())
      .addColumn('expires_at', 'text', (c) => c.notNull())
      .addPrimaryKeyConstraint('workload_token_uses_pk', ['issuer', 'token_id'])
      .execute();
    await db.schema.createIndex('workload_token_uses_expires').on('workload_token_uses').column('expires_at').execute();
    // JSON (src/store/records/workload-identity.ts, WorkloadIdentity); null for every other key.
    await db.schema.alterTable('api_keys').addColumn('workload', 'text').execute();
  },
};
