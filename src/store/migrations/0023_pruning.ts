import { type Kysely, type Migration, sql } from 'kysely';

// Issue 31: the pruner (src/retention/, src/store/retention-store.ts) deletes signing requests decided for good
// once their retention has passed, oldest first. This partial index holds only those rows, ordered by the time of
// the decision, so a prune statement reads the rows it deletes and nothing else; waiting requests, the ones the
// signing path reads, never enter it. The status list must stay the text retention-store.ts queries with
// (FINISHED_REQUEST_STATUSES): SQLite uses a partial index only when the query repeats its expression. 0020 to
// 0022 are other work's on the same issue; migrations run in name order, so the order between them is harmless.
export const migration0023Pruning: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createIndex('pending_requests_finished')
      .on('pending_requests')
      .column('updated_at')
      .where(sql<boolean>`status IN ('approved', 'rejected', 'expired', 'denied')`)
      .execute();
  },
};
