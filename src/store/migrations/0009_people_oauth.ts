import type { Kysely, Migration } from 'kysely';

// Issue 14: people signed in through the organisation's IdP, their roles in tenants, API keys bound to them,
// and the short-lived state of the OAuth flows (sign-in attempts, browser sessions, device codes).
// 0007 is taken by another branch (trial counters); migrations run in name order, so the gap is harmless.
export const migration0009PeopleOauth: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('people')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('issuer', 'text', (c) => c.notNull())
      .addColumn('subject', 'text', (c) => c.notNull())
      .addColumn('email', 'text')
      .addColumn('email_verified', 'integer', (c) => c.notNull())
      .addColumn('name', 'text')
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('last_sign_in_at', 'text')
      .addColumn('disabled_at', 'text')
      .addUniqueConstraint('people_identity', ['issuer', 'subject'])
      .execute();
    await db.schema.createIndex('people_email').on('people').columns(['email']).execute();
    // A membership names a person, or (until they first sign in) a verified email address.
    await db.schema
      .createTable('memberships')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('role', 'text', (c) => c.notNull())
      .addColumn('person_id', 'text')
      .addColumn('email', 'text')
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('created_by', 'text', (c) => c.notNull())
      .execute();
    await db.schema.createIndex('memberships_person').on('memberships').columns(['person_id']).execute();
    await db.schema.createIndex('memberships_email').on('memberships').columns(['email']).execute();
    await db.schema.alterTable('api_keys').addColumn('person_id', 'text').execute();
    await db.schema.alterTable('api_keys').addColumn('roles', 'text').execute();
    await db.schema.alterTable('api_keys').addColumn('expires_at', 'text').execute();
    await db.schema.alterTable('api_keys').addColumn('created_via', 'text').execute();
    await db.schema.createIndex('api_keys_person').on('api_keys').columns(['person_id']).execute();
    await db.schema
      .createTable('oauth_attempts')
      .addColumn('state_hash', 'text', (c) => c.primaryKey())
      .addColumn('nonce', 'text', (c) => c.notNull())
      .addColumn('code_verifier', 'text', (c) => c.notNull())
      .addColumn('return_to', 'text', (c) => c.notNull())
      .addColumn('expires_at', 'text', (c) => c.notNull())
      .execute();
    await db.schema
      .createTable('browser_sessions')
      .addColumn('id_hash', 'text', (c) => c.primaryKey())
      .addColumn('person_id', 'text', (c) => c.notNull())
      .addColumn('csrf_token', 'text', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('last_seen_at', 'text', (c) => c.notNull())
      .addColumn('expires_at', 'text', (c) => c.notNull())
      .execute();
    await db.schema
      .createTable('device_codes')
      .addColumn('code_hash', 'text', (c) => c.primaryKey())
      .addColumn('user_code', 'text', (c) => c.notNull().unique())
      .addColumn('tenant_id', 'text')
      .addColumn('client_name', 'text')
      .addColumn('user_agent', 'text')
      .addColumn('address', 'text', (c) => c.notNull())
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('person_id', 'text')
      .addColumn('granted_tenant_id', 'text')
      .addColumn('granted_roles', 'text')
      .addColumn('interval_s', 'integer', (c) => c.notNull())
      .addColumn('last_poll_at', 'text')
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('expires_at', 'text', (c) => c.notNull())
      .execute();
  },
};
