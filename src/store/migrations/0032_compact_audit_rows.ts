import { type Kysely, type Migration, PostgresAdapter, sql } from 'kysely';
import { binaryType } from './column-types.js';

// Issue 46, bytes kept for ever per signature: how an audit entry is stored is separated from what is hashed and
// exported (src/store/audit/entry-packing.cjs; docs/transparency.md, "How entries are stored"). The canonical
// entry, its chain hash, its leaf, `audit export` and every proof stay byte for byte what they were.
// - audit_log.packed: the details of a signature made at once (its `signed` entry of `sign` or `pkcs11_sign`)
//   packed (details is then '0'); null on every other row.
// - audit_log.digest: a packed entry's digest (details.hash) as bytes, read back into the details and the key of the
//   lookup by digest through audit_log_packed_digest, an index on its first 8 bytes (each lookup then checks the
//   whole digest and the tenant on the row).
// - audit_words: the dictionary of packed details (their shapes and words), never deleted: a packed row names its
//   words by id.
// - On rows written since (SQLite's writers), `hash` holds 32 bytes instead of 64 hex characters and `prev_hash` is
//   empty: it is the previous row's hash by seq, which the readers take from there (audit-rows.ts). The fork check
//   is what it was since migration 0005: two appenders racing on one head collide on seq, the primary key.
// - Old rows stay as they were and are read as before (a row is packed when `packed` is not null; its hash is hex
//   when it is text). Rewriting them would rewrite every row of the log (100M rows: every page of the table, and
//   of each index, while the service waits for `admin migrate`) to save bytes that are already paid for; the
//   columns added here are null on them, and adding a column rewrites nothing on either store.
// - PostgreSQL gets the columns and the table, and keeps writing rows as before (signbridge_group_commit_v6).
export const migration0032CompactAuditRows: Migration = {
  async up(db: Kysely<unknown>) {
    const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
    await db.schema.alterTable('audit_log').addColumn('packed', binaryType(db)).execute();
    await db.schema.alterTable('audit_log').addColumn('digest', binaryType(db)).execute();
    await sql`CREATE INDEX audit_log_packed_digest ON audit_log (substr(digest, 1, 8)) WHERE digest IS NOT NULL`.execute(
      db,
    );
    await db.schema
      .createTable('audit_words')
      .addColumn('id', postgres ? 'serial' : 'integer', (c) => c.primaryKey())
      .addColumn('text', 'text', (c) => c.notNull().unique())
      .execute();
  },
};
