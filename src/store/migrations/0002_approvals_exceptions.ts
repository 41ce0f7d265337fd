import type { Kysely, Migration } from 'kysely';

export const migration0002ApprovalsExceptions: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('pending_requests')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('key_id', 'text', (c) => c.notNull())
      .addColumn('algorithm', 'text', (c) => c.notNull())
      .addColumn('hash', 'text', (c) => c.notNull())
      .addColumn('inputs', 'text', (c) => c.notNull())
      .addColumn('requester', 'text', (c) => c.notNull())
      .addColumn('rule', 'text', (c) => c.notNull())
      .addColumn('reason', 'text', (c) => c.notNull())
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('next_stages', 'text', (c) => c.notNull())
      .addColumn('decisions', 'text', (c) => c.notNull())
      .addColumn('signature', 'text')
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('expires_at', 'text', (c) => c.notNull())
      .addColumn('updated_at', 'text', (c) => c.notNull())
      .execute();
    await db.schema
      .createIndex('pending_requests_tenant')
      .on('pending_requests')
      .columns(['tenant_id', 'status'])
      .execute();
    await db.schema
      .createTable('policy_exceptions')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('vuln_id', 'text', (c) => c.notNull())
      .addColumn('project', 'text')
      .addColumn('artifact_type', 'text')
      .addColumn('reason', 'text', (c) => c.notNull())
      .addColumn('created_by', 'text', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('expires_at', 'text', (c) => c.notNull())
      .addColumn('revoked_at', 'text')
      .addColumn('revoked_by', 'text')
      .execute();
    await db.schema.createIndex('policy_exceptions_tenant').on('policy_exceptions').columns(['tenant_id']).execute();
  },
};
