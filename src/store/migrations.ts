// Schema migrations, in order. Written with Kysely's schema builder so SQLite and PostgreSQL share them.
// Never edit a migration that has shipped; add a new one.
import { type Kysely, type Migration, PostgresAdapter, sql, type Transaction } from 'kysely';

/** Bytes: SQLite's blob is PostgreSQL's bytea (the one type the migrations name that differs between the two). */
function binaryType(db: Kysely<unknown>) {
  return db.getExecutor().adapter instanceof PostgresAdapter ? sql`bytea` : sql`blob`;
}

export const MIGRATIONS: Record<string, Migration> = {
  '0001_core': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('tenants')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('current_key_id', 'text', (c) => c.notNull())
        .addColumn('created_at', 'text', (c) => c.notNull())
        .execute();
      await db.schema
        .createTable('keys')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('tenant_id', 'text', (c) => c.notNull().references('tenants.id'))
        .addColumn('version', 'integer', (c) => c.notNull())
        .addColumn('key_spec', 'text', (c) => c.notNull())
        .addColumn('key_ref', 'text', (c) => c.notNull())
        .addColumn('public_key_pem', 'text', (c) => c.notNull())
        .addColumn('created_at', 'text', (c) => c.notNull())
        .addUniqueConstraint('keys_tenant_version', ['tenant_id', 'version'])
        .execute();
      await db.schema
        .createTable('api_keys')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('secret_hash', 'text', (c) => c.notNull())
        .addColumn('tenant_id', 'text')
        .addColumn('role', 'text', (c) => c.notNull())
        .addColumn('label', 'text', (c) => c.notNull())
        .addColumn('created_at', 'text', (c) => c.notNull())
        .addColumn('revoked_at', 'text')
        .execute();
      await db.schema
        .createTable('signatures')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('tenant_id', 'text', (c) => c.notNull())
        .addColumn('key_id', 'text', (c) => c.notNull())
        .addColumn('algorithm', 'text', (c) => c.notNull())
        .addColumn('hash', 'text', (c) => c.notNull())
        .addColumn('caller', 'text', (c) => c.notNull())
        .addColumn('created_at', 'text', (c) => c.notNull())
        .execute();
      await db.schema
        .createIndex('signatures_tenant_time')
        .on('signatures')
        .columns(['tenant_id', 'created_at'])
        .execute();
    },
  },
  '0002_approvals_exceptions': {
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
  },
  '0003_audit_log': {
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
  },
  '0004_vulnerability_db': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('vulnerabilities')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('modified', 'text', (c) => c.notNull())
        .addColumn('record', 'text', (c) => c.notNull())
        .addColumn('imported_at', 'text', (c) => c.notNull())
        .execute();
    },
  },
  '0005_audit_log_prev_hash_not_unique': {
    // 0003 made prev_hash unique so that two writers racing for the same predecessor could not fork the chain. They
    // already collide on seq, the primary key (each writes its head's seq + 1), so the index guarded nothing more,
    // and as an index on a random key it cost a page write per entry in every group commit. SQLite cannot drop a
    // column constraint, so the table is rebuilt (in one transaction: the migrator runs SQLite's without one).
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
  },
  '0006_cache_epoch': {
    // A counter that every write to tenants, keys and API keys raises in the same transaction (KyselyStore does
    // it): a process that caches those rows reads one number to know whether any process changed them. SQLite's
    // PRAGMA data_version did that job, but it changes on every commit of another connection, and the store's
    // writer thread commits every signature on a connection of its own.
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('cache_epoch')
        .addColumn('id', 'integer', (c) => c.primaryKey())
        .addColumn('n', 'integer', (c) => c.notNull())
        .execute();
      await sql`INSERT INTO cache_epoch (id, n) VALUES (1, 0)`.execute(db);
    },
  },
  '0007_trial_counters': {
    // The trial endpoint's per-address limit, kept in the store so that a restart does not hand every client a
    // fresh allowance, and every instance on one database counts together. One row per address: its window's
    // start (ms since the epoch) and the requests counted in it.
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('trial_counters')
        .addColumn('client', 'text', (c) => c.primaryKey())
        .addColumn('window_start', 'bigint', (c) => c.notNull())
        .addColumn('count', 'integer', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('trial_counters_window_start').on('trial_counters').column('window_start').execute();
    },
  },
  '0008_store_heartbeat': {
    // /readyz proves that the store can write (Store.probeWrite): a row the size of a few pages is committed here
    // and deleted again, so a disk (or database) too full to grow fails the probe. Numbered after 0007 (trial
    // counters).
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('store_heartbeat')
        .addColumn('id', 'integer', (c) => c.primaryKey())
        .addColumn('at', 'text', (c) => c.notNull())
        .addColumn('pad', binaryType(db), (c) => c.notNull())
        .execute();
    },
  },
  '0009_people_oauth': {
    // Issue 14: people signed in through the organisation's IdP, their roles in tenants, API keys bound to them,
    // and the short-lived state of the OAuth flows (sign-in attempts, browser sessions, device codes).
    // 0007 is taken by another branch (trial counters); migrations run in name order, so the gap is harmless.
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
  },
  '0010_key_stores': {
    // Issue 15: keys live in more than one key store (PKCS#11, AWS KMS, the software store for what the HSM cannot
    // hold), so each key version records which one holds it; imported keys record their origin and, when the
    // material expires, when.
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
  },
  '0011_key_imports': {
    // Key import (bring your own key): a key awaiting material, from get_import_params until import_key. Its id is
    // the kms_key_id the client got, and becomes the key version's id. A row also stands for new parameters asked
    // for an imported key that exists (reimport); it goes when the material arrives.
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
  },
  '0012_sign_idempotency': {
    // Issue 16: a client that retries a sign after a lost connection sends the same Idempotency-Key and gets the
    // first answer back instead of a second signature (src/api/idempotency.ts).
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
  },
  '0013_postgres_group_commit': {
    // Issue 16: PostgreSQL's group commit as one function call, so a batch of signature records and audit entries
    // costs one round trip (statement and commit together) instead of six. It takes the audit chain's advisory lock
    // (`lock_key`, computed in postgres-store.ts), reads the head and chains the entries on it: their hashes are
    // computed here from the parts the application sends (audit-hash.cjs, entryHashParts), because the seq and the
    // predecessor are only known once the lock is held. Nothing on SQLite, whose store commits in-process.
    // A later change to the function gets a new name (…_v2) in a new migration, so that an instance still running
    // the old release keeps calling the function it was written for.
    async up(db: Kysely<unknown>) {
      if (!(db.getExecutor().adapter instanceof PostgresAdapter)) return;
      await sql`
        CREATE OR REPLACE FUNCTION signbridge_group_commit_v1(
          lock_key bigint, new_signatures jsonb, withdrawn text[], new_entries jsonb
        ) RETURNS integer LANGUAGE plpgsql AS $fn$
        DECLARE
          head_seq integer;
          head_hash text;
          entry jsonb;
          entry_hash text;
        BEGIN
          INSERT INTO signatures (id, tenant_id, key_id, algorithm, hash, caller, created_at)
            SELECT s.id, s.tenant_id, s.key_id, s.algorithm, s.hash, s.caller, s.created_at
            FROM jsonb_to_recordset(new_signatures) AS s(
              id text, tenant_id text, key_id text, algorithm text, hash text, caller text, created_at text);
          DELETE FROM signatures WHERE id = ANY(withdrawn);
          IF jsonb_array_length(new_entries) = 0 THEN
            RETURN NULL;
          END IF;
          -- Held until the commit: one appender at a time, from any instance. Each statement below sees what
          -- committed before the lock was granted (READ COMMITTED), so the head is the chain's real head.
          PERFORM pg_advisory_xact_lock(lock_key);
          SELECT seq, hash INTO head_seq, head_hash FROM audit_log ORDER BY seq DESC LIMIT 1;
          head_seq := coalesce(head_seq, 0);
          head_hash := coalesce(head_hash, repeat('0', 64));
          FOR i IN 0 .. jsonb_array_length(new_entries) - 1 LOOP
            entry := new_entries -> i;
            head_seq := head_seq + 1;
            -- SHA-256 over the predecessor's hash, a newline, and the canonical JSON (before || seq || after).
            entry_hash := encode(sha256(convert_to(
              head_hash || chr(10) || (entry ->> 'before') || head_seq::text || (entry ->> 'after'), 'UTF8')), 'hex');
            INSERT INTO audit_log (seq, at, tenant_id, actor, action, outcome, details, prev_hash, hash)
              VALUES (head_seq, entry ->> 'at', entry ->> 'tenant_id', entry ->> 'actor', entry ->> 'action',
                      entry ->> 'outcome', entry ->> 'details', head_hash, entry_hash);
            head_hash := entry_hash;
          END LOOP;
          RETURN head_seq;
        END
        $fn$`.execute(db);
    },
  },
  '0014_pending_request_continuation': {
    // Issue 21: a client's own retry of a signature held for approval continues the request it opened instead of
    // opening a second one (src/signing/request-continuation.ts). continuation_key names what a retry must match
    // (caller, tenant, key, algorithm, digest, policy inputs); null on requests made before. The partial unique
    // index allows one waiting request per key, so two concurrent identical requests make one; the other index
    // finds the newest request of a key, waiting or recently decided.
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('pending_requests').addColumn('continuation_key', 'text').execute();
      await db.schema
        .createIndex('pending_requests_one_waiting')
        .on('pending_requests')
        .column('continuation_key')
        .unique()
        .where(sql<boolean>`status IN ('pending_approval', 'pending_security_review', 'signing')`)
        .execute();
      await db.schema
        .createIndex('pending_requests_continuation')
        .on('pending_requests')
        .columns(['continuation_key', 'created_at'])
        .execute();
    },
  },
  '0015_workload_identity': {
    // Issue 22: CI jobs sign with their own OIDC identity (docs/ci.md). Each tenant's trust rules; the tokens
    // already exchanged (one exchange per token, across instances); and the verified identity a minted key carries.
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
      await db.schema
        .createIndex('workload_token_uses_expires')
        .on('workload_token_uses')
        .column('expires_at')
        .execute();
      // JSON (src/store/records/workload-identity.ts, WorkloadIdentity); null for every other key.
      await db.schema.alterTable('api_keys').addColumn('workload', 'text').execute();
    },
  },
  '0016_events': {
    // Issue 24: events and their delivery (docs/events.md). The outbox gets its rows in the transaction of the
    // change they tell of; a dispatcher on any instance fans each out to the subscriptions that want it (one
    // delivery row per subscription) and sends the deliveries under a lease (src/store/event-store.ts).
    async up(db: Kysely<unknown>) {
      const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
      await db.schema
        .createTable('event_outbox')
        // Insertion order; a request's events are written in separate transactions one after the other, so this
        // is also their causal order.
        .addColumn('seq', postgres ? sql`bigserial` : 'integer', (c) =>
          postgres ? c.primaryKey() : c.primaryKey().autoIncrement(),
        )
        .addColumn('id', 'text', (c) => c.notNull().unique())
        .addColumn('tenant_id', 'text')
        .addColumn('type', 'text', (c) => c.notNull())
        .addColumn('timestamp', 'text', (c) => c.notNull())
        .addColumn('data', 'text', (c) => c.notNull())
        .addColumn('order_key', 'text')
        .addColumn('fanned_out', 'integer', (c) => c.notNull().defaultTo(0))
        .execute();
      await db.schema
        .createIndex('event_outbox_to_fan_out')
        .on('event_outbox')
        .column('seq')
        .where(sql<boolean>`fanned_out = 0`)
        .execute();
      await db.schema
        .createTable('webhook_subscriptions')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('tenant_id', 'text', (c) => c.notNull())
        .addColumn('url', 'text', (c) => c.notNull())
        .addColumn('format', 'text', (c) => c.notNull())
        // JSON array of event kinds; null: every kind.
        .addColumn('event_kinds', 'text')
        // The Standard Webhooks secret (whsec_...), needed to sign; shown once, never listed. Null for other formats.
        .addColumn('secret', 'text')
        .addColumn('created_at', 'text', (c) => c.notNull())
        .addColumn('created_by', 'text', (c) => c.notNull())
        .addColumn('paused_at', 'text')
        .addColumn('pause_reason', 'text')
        .addColumn('last_error', 'text')
        .addColumn('last_error_at', 'text')
        .addColumn('last_delivered_at', 'text')
        .addColumn('failures_in_a_row', 'integer', (c) => c.notNull().defaultTo(0))
        .execute();
      await db.schema
        .createIndex('webhook_subscriptions_tenant')
        .on('webhook_subscriptions')
        .column('tenant_id')
        .execute();
      await db.schema
        .createTable('event_deliveries')
        .addColumn('event_seq', postgres ? sql`bigint` : 'integer', (c) => c.notNull())
        .addColumn('subscription_id', 'text', (c) => c.notNull())
        // The event's order key, copied: the claim's "nothing earlier of the same request still pending" check.
        .addColumn('order_key', 'text')
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('next_attempt_at', 'text', (c) => c.notNull())
        .addColumn('lease_until', 'text')
        .addColumn('lease_owner', 'text')
        .addColumn('last_status', 'integer')
        .addColumn('last_error', 'text')
        .addColumn('created_at', 'text', (c) => c.notNull())
        .addColumn('delivered_at', 'text')
        .addPrimaryKeyConstraint('event_deliveries_pk', ['event_seq', 'subscription_id'])
        .execute();
      await db.schema
        .createIndex('event_deliveries_due')
        .on('event_deliveries')
        .columns(['next_attempt_at', 'event_seq'])
        .where(sql<boolean>`status = 'pending'`)
        .execute();
      await db.schema
        .createIndex('event_deliveries_order')
        .on('event_deliveries')
        .columns(['subscription_id', 'order_key', 'event_seq'])
        .where(sql<boolean>`status = 'pending'`)
        .execute();
      // Reminders and warnings are sent once: the sweep sets these in the transaction that writes the event.
      await db.schema.alterTable('pending_requests').addColumn('reminded_at', 'text').execute();
      await db.schema.alterTable('policy_exceptions').addColumn('expiry_warned_at', 'text').execute();
    },
  },
  '0017_tsa_identities': {
    // Issue 25: the time-stamping authority (docs/tsa.md). One identity per scope: '' is the service's own TSA,
    // a tenant id that tenant's (/tsa/<tenant>). The key lives in a key store like every other key; the chain is
    // the TSA certificate first, then the CAs above it (PEM), null until `signbridge tsa cert import` installs
    // it for a key made with --csr. serial_block: the last block of serial counters an instance reserved.
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
  },
  '0019_signature_log_lookup': {
    // Issue 25: a verifier finds a signature's `signed` audit entry (its leaf in the transparency log) by the
    // SHA-256 of the raw signature bytes, or by the digest signed. 0017 and 0018 are taken by other work on the
    // same issue; migrations run in name order, so the gap is harmless.
    // - signature_lookups: one row per signature handed out, keyed by its entry's seq (rows land at the end of the
    //   table); written after the key store returned the signature, so a crash can lose the row of a signature
    //   whose record was written ahead of it (src/signing/signing-service.ts). The lookup by digest does not need
    //   it. SHA-256 is not unique per row: RSA PKCS#1 v1.5 signs the same digest to the same bytes.
    // - audit_log_signed_digest: the lookup by digest reads the `signed` entries themselves (details.hash), through
    //   a partial index on the expression auditSeqOfDigest queries (kysely-store.ts).
    // - pending_requests.signed_seq: the seq of an approved request's `signed` entry, for whoever collects it.
    // - PostgreSQL: signbridge_group_commit_v2, v1 plus the lookup rows, answering the batch's first seq.
    async up(db: Kysely<unknown>) {
      const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
      await db.schema
        .createTable('signature_lookups')
        .addColumn('audit_seq', 'integer', (c) => c.primaryKey())
        .addColumn('tenant_id', 'text', (c) => c.notNull())
        .addColumn('signature_sha256', binaryType(db), (c) => c.notNull())
        .addColumn('signature_id', 'text', (c) => c.notNull())
        .execute();
      await db.schema
        .createIndex('signature_lookups_sha256')
        .on('signature_lookups')
        .column('signature_sha256')
        .execute();
      await db.schema.alterTable('pending_requests').addColumn('signed_seq', 'integer').execute();
      if (!postgres) {
        await sql`CREATE INDEX audit_log_signed_digest ON audit_log (tenant_id, json_extract(details, '$.hash'))
          WHERE outcome = 'signed'`.execute(db);
        return;
      }
      await sql`CREATE INDEX audit_log_signed_digest ON audit_log (tenant_id, ((details)::jsonb ->> 'hash'), seq)
        WHERE outcome = 'signed'`.execute(db);
      await sql`
        CREATE OR REPLACE FUNCTION signbridge_group_commit_v2(
          lock_key bigint, new_signatures jsonb, withdrawn text[], new_entries jsonb, new_lookups jsonb
        ) RETURNS integer LANGUAGE plpgsql AS $fn$
        DECLARE
          head_seq integer;
          head_hash text;
          first_seq integer;
          entry jsonb;
          entry_hash text;
        BEGIN
          INSERT INTO signatures (id, tenant_id, key_id, algorithm, hash, caller, created_at)
            SELECT s.id, s.tenant_id, s.key_id, s.algorithm, s.hash, s.caller, s.created_at
            FROM jsonb_to_recordset(new_signatures) AS s(
              id text, tenant_id text, key_id text, algorithm text, hash text, caller text, created_at text);
          DELETE FROM signatures WHERE id = ANY(withdrawn);
          -- Lookup rows of signatures whose entries were committed before (their seq is known).
          INSERT INTO signature_lookups (audit_seq, tenant_id, signature_sha256, signature_id)
            SELECT l.audit_seq, l.tenant_id, decode(l.signature_sha256, 'hex'), l.signature_id
            FROM jsonb_to_recordset(new_lookups) AS l(
              audit_seq integer, tenant_id text, signature_sha256 text, signature_id text)
            ON CONFLICT (audit_seq) DO NOTHING;
          IF jsonb_array_length(new_entries) = 0 THEN
            RETURN NULL;
          END IF;
          -- Held until the commit: one appender at a time, from any instance. Each statement below sees what
          -- committed before the lock was granted (READ COMMITTED), so the head is the chain's real head.
          PERFORM pg_advisory_xact_lock(lock_key);
          SELECT seq, hash INTO head_seq, head_hash FROM audit_log ORDER BY seq DESC LIMIT 1;
          head_seq := coalesce(head_seq, 0);
          head_hash := coalesce(head_hash, repeat('0', 64));
          first_seq := head_seq + 1;
          FOR i IN 0 .. jsonb_array_length(new_entries) - 1 LOOP
            entry := new_entries -> i;
            head_seq := head_seq + 1;
            -- SHA-256 over the predecessor's hash, a newline, and the canonical JSON (before || seq || after).
            entry_hash := encode(sha256(convert_to(
              head_hash || chr(10) || (entry ->> 'before') || head_seq::text || (entry ->> 'after'), 'UTF8')), 'hex');
            INSERT INTO audit_log (seq, at, tenant_id, actor, action, outcome, details, prev_hash, hash)
              VALUES (head_seq, entry ->> 'at', entry ->> 'tenant_id', entry ->> 'actor', entry ->> 'action',
                      entry ->> 'outcome', entry ->> 'details', head_hash, entry_hash);
            -- The entry records a signature made before its record was written: its lookup row, on this seq.
            IF entry ? 'lookup_sha256' THEN
              INSERT INTO signature_lookups (audit_seq, tenant_id, signature_sha256, signature_id)
                VALUES (head_seq, entry ->> 'tenant_id', decode(entry ->> 'lookup_sha256', 'hex'),
                        entry ->> 'lookup_signature_id');
            END IF;
            head_hash := entry_hash;
          END LOOP;
          RETURN first_seq;
        END
        $fn$`.execute(db);
    },
  },
  '0018_transparency_log': {
    // Issue 25: a Merkle tree over the audit log (docs/transparency.md, src/transparency/). log_state is the tree's
    // size and the chain hash of its last entry (the integrator checks that what it appends follows it); log_tiles
    // the interior hashes as tlog-tiles-style tiles (a full tile, 256 hashes, is never rewritten; the right-edge tile
    // of each level is, as it grows); log_checkpoints every signed checkpoint; log_keys the log's signing key (its
    // key store and reference, like a tenant key) and the origin it signs for. 0017 is the TSA's.
    async up(db: Kysely<unknown>) {
      const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
      const big = postgres ? sql`bigint` : sql`integer`;
      await db.schema
        .createTable('log_state')
        .addColumn('id', 'integer', (c) => c.primaryKey())
        .addColumn('tree_size', big, (c) => c.notNull())
        .addColumn('chain_hash', 'text', (c) => c.notNull())
        .addColumn('updated_at', 'text', (c) => c.notNull())
        .execute();
      await sql`INSERT INTO log_state (id, tree_size, chain_hash, updated_at)
        VALUES (1, 0, ${'0'.repeat(64)}, ${new Date(0).toISOString()})`.execute(db);
      await db.schema
        .createTable('log_tiles')
        .addColumn('level', 'integer', (c) => c.notNull())
        .addColumn('idx', big, (c) => c.notNull())
        .addColumn('hashes', binaryType(db), (c) => c.notNull())
        .addPrimaryKeyConstraint('log_tiles_pk', ['level', 'idx'])
        .execute();
      await db.schema
        .createTable('log_checkpoints')
        .addColumn('tree_size', big, (c) => c.primaryKey())
        .addColumn('root_hash', 'text', (c) => c.notNull())
        .addColumn('note', 'text', (c) => c.notNull())
        .addColumn('created_at', 'text', (c) => c.notNull())
        .execute();
      await db.schema
        .createTable('log_keys')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('origin', 'text', (c) => c.notNull())
        .addColumn('key_store', 'text', (c) => c.notNull())
        .addColumn('key_ref', 'text', (c) => c.notNull())
        .addColumn('key_spec', 'text', (c) => c.notNull())
        .addColumn('public_key_pem', 'text', (c) => c.notNull())
        .addColumn('created_at', 'text', (c) => c.notNull())
        .execute();
    },
  },
  '0020_workload_token_rules': {
    // Issue 31: two more parts of a CI trust rule (docs/ci.md, "Trust rules"). max_token_lifetime_s: the longest
    // exp - iat of a token the rule admits (rules saved before get the default, a day). identity_claims: the claims
    // whose values make the workload's stable identity that velocity.perIdentity counts (JSON array); null, as for
    // every earlier rule, is the issuer kind's default (repository and workflow, not the ref).
    async up(db: Kysely<unknown>) {
      await db.schema
        .alterTable('workload_trust_rules')
        .addColumn('max_token_lifetime_s', 'integer', (c) => c.notNull().defaultTo(86_400))
        .execute();
      await db.schema.alterTable('workload_trust_rules').addColumn('identity_claims', 'text').execute();
    },
  },
  '0021_delivery_dispatch': {
    // Issue 31 (docs/events.md, "Delivery"): deliveries are leased per subscription, through an index in the order
    // they are taken (subscription, next attempt, event), so a claim reads about as many rows as it leases instead of
    // sorting the whole due backlog; the index by next attempt alone served that sort and goes. A subscription pauses
    // after failing for a time (failing_since: its first failure since its last success), and a paused one is
    // probed on the back-off schedule (next_probe_at; null: not probed, it waits for a person, as after 410 Gone).
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('webhook_subscriptions').addColumn('failing_since', 'text').execute();
      await db.schema.alterTable('webhook_subscriptions').addColumn('next_probe_at', 'text').execute();
      // Paused before this by the count of failures in a row: probed from now on, like a pause for failing too long.
      await sql`UPDATE webhook_subscriptions SET next_probe_at = paused_at, failing_since = last_error_at
        WHERE paused_at IS NOT NULL AND pause_reason LIKE '%attempts in a row failed%'`.execute(db);
      await db.schema
        .createIndex('event_deliveries_claim')
        .on('event_deliveries')
        .columns(['subscription_id', 'next_attempt_at', 'event_seq'])
        .where(sql<boolean>`status = 'pending'`)
        .execute();
      await db.schema.dropIndex('event_deliveries_due').execute();
    },
  },
  '0022_signing_events': {
    // Issue 31: every signature tells of itself (signature.signed), in the transaction of its record and `signed`
    // audit entry, for tenants with a subscription that wants it. On PostgreSQL the group commit is one function
    // call: signbridge_group_commit_v3 is v2 plus the outbox rows, so a batch that tells of events still costs one
    // round trip (v2's callers wrote them with BEGIN, the call, an INSERT and COMMIT: four). The rows are inserted
    // under the chain's advisory lock, after the entries. Nothing on SQLite, whose store commits in-process.
    async up(db: Kysely<unknown>) {
      if (!(db.getExecutor().adapter instanceof PostgresAdapter)) return;
      await sql`
        CREATE OR REPLACE FUNCTION signbridge_group_commit_v3(
          lock_key bigint, new_signatures jsonb, withdrawn text[], new_entries jsonb, new_lookups jsonb,
          new_events jsonb
        ) RETURNS integer LANGUAGE plpgsql AS $fn$
        DECLARE
          first_seq integer;
        BEGIN
          first_seq := signbridge_group_commit_v2(lock_key, new_signatures, withdrawn, new_entries, new_lookups);
          INSERT INTO event_outbox (id, tenant_id, type, timestamp, data, order_key, fanned_out)
            SELECT e.id, e.tenant_id, e.type, e.timestamp, e.data, e.order_key, e.fanned_out
            FROM jsonb_to_recordset(new_events) AS e(
              id text, tenant_id text, type text, timestamp text, data text, order_key text, fanned_out integer);
          RETURN first_seq;
        END
        $fn$`.execute(db);
    },
  },
  '0023_pruning': {
    // Issue 31: the pruner (src/retention/, src/store/retention-store.ts) deletes signing requests decided for good
    // once their retention has passed, oldest first. This partial index holds only those rows, ordered by the time of
    // the decision, so a prune statement reads the rows it deletes and nothing else; waiting requests, the ones the
    // signing path reads, never enter it. The status list must stay the text retention-store.ts queries with
    // (FINISHED_REQUEST_STATUSES): SQLite uses a partial index only when the query repeats its expression. 0020 to
    // 0022 are other work's on the same issue; migrations run in name order, so the order between them is harmless.
    async up(db: Kysely<unknown>) {
      await db.schema
        .createIndex('pending_requests_finished')
        .on('pending_requests')
        .column('updated_at')
        .where(sql<boolean>`status IN ('approved', 'rejected', 'expired', 'denied')`)
        .execute();
    },
  },
};
