import type { Kysely, Migration } from 'kysely';

// Issue 34: a `sign_batch` the policy holds is one signing request for all its digests (docs/api.md, sign_batch).
// pending_requests.batch is null for a one-digest request; for a batch it holds JSON {hashes: [base64 digest, …]}
// in the client's order, and once approved also {results: [{signature, seq} | {error: {code, message,
// retryable}}, …]}, results[i] answering hashes[i]. The row's `hash` is then the batch's own digest (SHA-256 over
// the digests in order), which the continuation key and the collection check use.
export const migration0025BatchRequests: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema.alterTable('pending_requests').addColumn('batch', 'text').execute();
  },
};
