// Deletes what the contract lets go (docs/deployment.md, "Retention"): finished event deliveries and the events
// whose deliveries are all finished, finished signing requests, and idempotency records past their lifetime. Never
// the audit log (since migration 0030 a signature's `signed` entry is its record, its hash on the entry's row), the
// transparency log's tables, batch items, or the signatures and signature_lookups rows from before 0030 (no longer
// written; a lookup row is how an older entry is found by its signature): proofs and the chain need them for ever.
//
// Every statement deletes at most `limit` rows (src/retention/pruner.ts runs them in small batches), so SQLite's one
// writer is never held for long and PostgreSQL locks few rows. On PostgreSQL the rows a statement picks are taken
// FOR UPDATE SKIP LOCKED: rows another instance is pruning, or another transaction is changing, are left for a
// later pass instead of waited for, so instances pruning at the same time neither wait on each other nor deadlock.
// Deleting is idempotent: a row two instances both picked is gone once, and the other's statement skips it.
//
// What the delivery path still needs is never touched: a pending delivery (it may still be retried, or waits for a
// paused subscription), an event not fanned out yet, an event with any delivery left. The order-key checks of
// claimDeliveries look only at pending deliveries and events not fanned out, so they see the same rows after a
// prune as before.
import { type Kysely, type RawBuilder, sql } from 'kysely';
import type { PartContext } from '../part-context.js';

/** Deliveries that nothing will send again (a 410 Gone is recorded as failed). */
export const FINISHED_DELIVERY_STATUSES = ['delivered', 'failed'] as const;
/**
 * Signing requests that are decided for good. Migration 0023's partial index names the same list in the same order
 * (SQLite matches the expression's text): a new final status needs a migration that rebuilds the index.
 */
export const FINISHED_REQUEST_STATUSES = ['approved', 'rejected', 'expired', 'denied'] as const;

/**
 * The statuses as SQL literals, not parameters: SQLite uses a partial index only when the query's WHERE repeats the
 * index's own expression, which a bound parameter does not.
 */
function statusList(statuses: readonly string[]): RawBuilder<unknown> {
  return sql.raw(`(${statuses.map((s) => `'${s}'`).join(', ')})`);
}

export interface EventPruneStep {
  deliveries: number;
  events: number;
  /** The last event seq this step looked at: the next step starts after it. */
  lastSeq: number;
  /** The step reached a page wholly inside the window, or the end of the outbox: the next cycle starts over at 0. */
  done: boolean;
}

export class RetentionStore {
  private readonly db: Kysely<unknown>;
  private readonly postgres: boolean;

  /** Its statements are raw SQL over tables of several parts: it declares none. */
  constructor(ctx: PartContext<unknown>) {
    this.db = ctx.db;
    this.postgres = ctx.postgres;
  }

  private get skipLocked(): RawBuilder<unknown> {
    return this.postgres ? sql`FOR UPDATE SKIP LOCKED` : sql``;
  }

  /**
   * One step through the outbox in seq order: the next `limit` events after `afterSeq`. Of those written before
   * `before`, deletes the finished deliveries (statements of at most `limit` rows), then the events that are fanned
   * out and have no delivery left. An event whose delivery is still pending stays, and the next step goes on past it
   * (the outbox is read by its primary key, so rows that stay are passed over, not read again and again).
   */
  async pruneEventsStep(afterSeq: number, before: string, limit: number): Promise<EventPruneStep> {
    const page = await sql<{ seq: number | string; timestamp: string }>`
      SELECT seq, timestamp FROM event_outbox WHERE seq > ${afterSeq} ORDER BY seq LIMIT ${limit}`.execute(this.db);
    const last = page.rows.at(-1);
    if (!last) return { deliveries: 0, events: 0, lastSeq: afterSeq, done: true };
    const lastSeq = Number(last.seq);
    // Seq order is write order, and timestamps follow it but for the jitter of concurrent writers (and a clock set
    // back): every statement below checks the time itself, and the walk ends at a page that lies wholly inside the
    // window. Going on would read the whole window's events every pass to find nothing.
    const done = page.rows.length < limit || page.rows.every((r) => r.timestamp >= before);
    let deliveries = 0;
    for (;;) {
      const deleted = await sql`
        DELETE FROM event_deliveries WHERE (event_seq, subscription_id) IN (
          SELECT event_seq, subscription_id FROM event_deliveries
          WHERE event_seq > ${afterSeq} AND event_seq <= ${lastSeq}
            AND status IN ${statusList(FINISHED_DELIVERY_STATUSES)}
            AND created_at < ${before}
          LIMIT ${limit} ${this.skipLocked})`.execute(this.db);
      const n = Number(deleted.numAffectedRows ?? 0n);
      deliveries += n;
      if (n < limit) break;
    }
    const lock = this.postgres ? sql`FOR UPDATE OF o SKIP LOCKED` : sql``;
    const deletedEvents = await sql`
      DELETE FROM event_outbox WHERE seq IN (
        SELECT o.seq FROM event_outbox o
        WHERE o.seq > ${afterSeq} AND o.seq <= ${lastSeq}
          AND o.fanned_out = 1
          AND o.timestamp < ${before}
          AND NOT EXISTS (SELECT 1 FROM event_deliveries d WHERE d.event_seq = o.seq)
        ${lock})`.execute(this.db);
    return { deliveries, events: Number(deletedEvents.numAffectedRows ?? 0n), lastSeq, done };
  }

  /** Deletes up to `limit` signing requests decided for good before `before` (oldest first); returns how many. */
  async pruneFinishedRequests(before: string, limit: number): Promise<number> {
    const deleted = await sql`
      DELETE FROM pending_requests WHERE id IN (
        SELECT id FROM pending_requests
        WHERE status IN ${statusList(FINISHED_REQUEST_STATUSES)} AND updated_at < ${before}
        ORDER BY updated_at
        LIMIT ${limit} ${this.skipLocked})`.execute(this.db);
    return Number(deleted.numAffectedRows ?? 0n);
  }

  /**
   * Deletes up to `limit` idempotency records created before `before` (oldest first); returns how many. A record
   * that old already counts as absent (idempotency.look's expiredBefore), so deleting it changes no answer.
   */
  async pruneIdempotencyKeys(before: string, limit: number): Promise<number> {
    const deleted = await sql`
      DELETE FROM sign_idempotency WHERE (caller_id, idem_key) IN (
        SELECT caller_id, idem_key FROM sign_idempotency
        WHERE created_at < ${before}
        ORDER BY created_at
        LIMIT ${limit} ${this.skipLocked})`.execute(this.db);
    return Number(deleted.numAffectedRows ?? 0n);
  }
}
