import { type Kysely, type Migration, sql } from 'kysely';

// Issue 21: a client's own retry of a signature held for approval continues the request it opened instead of
// opening a second one (src/signing/request-continuation.ts). continuation_key names what a retry must match
// (caller, tenant, key, algorithm, digest, policy inputs); null on requests made before. The partial unique
// index allows one waiting request per key, so two concurrent identical requests make one; the other index
// finds the newest request of a key, waiting or recently decided.
export const migration0014PendingRequestContinuation: Migration = {
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
};
