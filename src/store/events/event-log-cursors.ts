// Events read from the audit log (docs/events.md, "Events read from the log"): a signature made at once tells of
// itself through its `signed` entry, not through an outbox row and a delivery row per subscription; so does each
// signature of a batch made at once (`sign_batch`: one entry, its items in batch_items). Each subscription that
// wants signature.signed keeps a cursor into the log (event_log_cursors, migrations 0028 and 0031): the seq of the
// last such entry of its tenant it has been handed and, inside a batch, the index of the last item handed.
//
// - leaseLogEntries() reads the entries after the cursor (through audit_log_signed_at_once) with the items of their
//   batches, and leases the cursor to one instance, with a compare-and-set on its owner, its lease and its position:
//   two instances never send the same entry from live leases; a dead instance's lease runs out and another reads
//   from the cursor again (at least once, the same event ids).
// - advanceLogCursor() moves the cursor past what was sent (to an item, when a batch was sent in part), only under
//   the lease that read it, and in the same transaction keeps each attempt that failed as an outbox row and a
//   delivery row (leased to the sender, which then records the failure as any other): only failed or pending
//   deliveries have a row, and a retry, the failing receiver's wait and the pause and probe work on them as
//   documented.
import { CompiledQuery, type Kysely, sql } from 'kysely';
import { detailsOfRows } from '../audit/audit-rows.js';
import type { EventRecord } from '../records/event-kinds.js';
import { releaseHeld } from './event-holds.js';
import type { EventTables } from './event-tables.js';

/**
 * The actions whose `signed` entries are signatures made at once, told of from the log (migration 0031's index):
 * one signature each, or a batch of them (sign_batch; an approved held batch is approve_sign's, told of in the outbox
 * in its request's order).
 */
export const SIGNED_AT_ONCE_ACTIONS = ['sign', 'pkcs11_sign', 'sign_batch'] as const;
const BATCH_ACTION = 'sign_batch';

/**
 * The partial index's condition, word for word and in literals: a planner uses a partial index only where the query
 * implies its condition, and bound parameters imply nothing (SQLite then took another index and sorted).
 */
const AT_ONCE_SIGNED = sql<boolean>`outcome = 'signed' AND action IN (${sql.raw(
  SIGNED_AT_ONCE_ACTIONS.map((a) => `'${a}'`).join(', '),
)})`;
const AT_ONCE_SIGNED_OF_A = sql<boolean>`a.outcome = 'signed' AND a.action IN (${sql.raw(
  SIGNED_AT_ONCE_ACTIONS.map((a) => `'${a}'`).join(', '),
)})`;

/** A `signed` entry of a signature made at once, or of a batch of them, as the dispatcher turns it into events. */
export interface SignedEntry {
  seq: number;
  at: string;
  tenantId: string;
  actor: string;
  details: Record<string, unknown>;
  /** A batch's items not yet handed to the subscription, in item order: one event each. */
  items?: BatchItemToTell[];
}

/** One signature read from the log: an entry's, or one item's of a batch entry. */
export type LoggedSignature = SignedEntry & { item?: BatchItemToTell };

/** One signature of a batch entry, as its event tells it. */
export interface BatchItemToTell {
  index: number;
  digest: Buffer;
  /** The batch's last item: once it is handed, so is the whole entry. */
  last: boolean;
}

/** Where a cursor stands: after entry `seq`, or, inside a batch, after its item of index `item`. */
export interface LogPosition {
  seq: number;
  item: number | null;
}

/** The entries after a subscription's cursor, which this instance now holds the lease to send. */
export interface LogLease {
  subscriptionId: string;
  /** The cursor when read: advanceLogCursor moves it only from here. */
  after: LogPosition;
  entries: SignedEntry[];
}

/** An event read from the log whose attempt failed: kept as a delivery row, leased to its sender until recorded. */
export interface KeptAttempt {
  event: EventRecord;
  leaseUntil: string;
}

export class EventLogCursors {
  constructor(
    private readonly db: Kysely<EventTables>,
    private readonly postgres: boolean,
  ) {}

  /**
   * Up to `limit` events' entries after the subscription's cursor (a batch's items count one each, and a batch may be
   * cut short: the cursor can stop inside it), with the cursor leased to `owner` until `leaseUntil`; undefined when
   * there are none (nothing is written then) or another instance holds the cursor. A subscription without a cursor
   * (made before this version by hand) gets one at the log's head.
   */
  async leaseLogEntries(
    owner: string,
    subscription: { id: string; tenantId: string },
    now: string,
    leaseUntil: string,
    limit: number,
  ): Promise<LogLease | undefined> {
    let cursor = await this.cursor(subscription.id);
    if (!cursor) {
      await startCursorAtHead(this.db, subscription.id);
      cursor = await this.cursor(subscription.id);
      if (!cursor) return undefined; // removed meanwhile
    }
    if (cursor.lease_owner !== null && cursor.lease_owner !== owner && (cursor.lease_until ?? '') >= now) {
      return undefined;
    }
    const after: LogPosition = {
      seq: Number(cursor.after_seq),
      item: cursor.after_item === null ? null : Number(cursor.after_item),
    };
    // Inside a batch, the read starts at that batch's entry: its items after the cursor's come first.
    const fromSeq = after.item === null ? after.seq : after.seq - 1;
    const rows = await this.signedAfter(
      subscription.tenantId,
      fromSeq,
      Number(cursor.batches_after_seq),
      limit,
    ).execute();
    // Packed entries (migration 0032) rebuilt into their details' canonical JSON.
    const details = await detailsOfRows(this.db, rows);
    const entries: SignedEntry[] = [];
    let room = limit;
    for (const [n, r] of rows.entries()) {
      if (room <= 0) break;
      const entry: SignedEntry = {
        seq: Number(r.seq),
        at: r.at,
        tenantId: r.tenant_id as string,
        actor: r.actor,
        details: JSON.parse(details[n] as string) as Record<string, unknown>,
      };
      if (r.action === BATCH_ACTION) {
        const afterItem = entry.seq === after.seq ? (after.item ?? -1) : -1;
        entry.items = await this.itemsAfter(entry.seq, afterItem, room);
        // No items left (none written: not a batch of this version's): nothing to tell, and none to stop at.
        if (entry.items.length === 0) continue;
        room -= entry.items.length;
      } else {
        room -= 1;
      }
      entries.push(entry);
    }
    if (entries.length === 0) return undefined;
    const taken = await this.db
      .updateTable('event_log_cursors')
      .set({ lease_owner: owner, lease_until: leaseUntil })
      .where('subscription_id', '=', subscription.id)
      .where('after_seq', '=', after.seq)
      .where((eb) => (after.item === null ? eb('after_item', 'is', null) : eb('after_item', '=', after.item)))
      .where((eb) => eb.or([eb('lease_owner', 'is', null), eb('lease_owner', '=', owner), eb('lease_until', '<', now)]))
      .executeTakeFirst();
    if (Number(taken.numUpdatedRows) !== 1) return undefined;
    return { subscriptionId: subscription.id, after, entries };
  }

  /** Up to `limit` items of the batch entry `seq` after the item `afterItem`, in item order, each marked last or not. */
  private async itemsAfter(seq: number, afterItem: number, limit: number): Promise<BatchItemToTell[]> {
    // One more than asked for: whether the last one read is the batch's last.
    const rows = await this.db
      .selectFrom('batch_items')
      .select(['item_index', 'digest'])
      .where('batch_seq', '=', seq)
      .where('item_index', '>', afterItem)
      .orderBy('item_index')
      .limit(limit + 1)
      .execute();
    return rows.slice(0, limit).map((r, i) => ({
      index: Number(r.item_index),
      digest: Buffer.from(r.digest),
      last: i === rows.length - 1,
    }));
  }

  /** Extends this instance's leases on the cursors of `subscriptionIds` while their entries are being sent. */
  async renewLogLeases(owner: string, subscriptionIds: readonly string[], leaseUntil: string): Promise<void> {
    if (subscriptionIds.length === 0) return;
    await this.db
      .updateTable('event_log_cursors')
      .set({ lease_until: leaseUntil })
      .where('subscription_id', 'in', subscriptionIds)
      .where('lease_owner', '=', owner)
      .execute();
  }

  /**
   * The entries of `lease` up to `to` (an entry, or an item of a batch) were sent: the cursor moves there, the attempts that failed are kept as
   * delivery rows (leased to `owner`, attempt 1; their outbox seqs are returned in the same order, for the sender
   * to record their outcome), and, when any was `delivered` at that time, the subscription is failing no more.
   * False (nothing changed) when the lease was lost meanwhile: the instance that took it over sends them again.
   */
  async advanceLogCursor(
    owner: string,
    lease: LogLease,
    to: LogPosition,
    outcome: { deliveredAt: string | null; kept: readonly KeptAttempt[] },
  ): Promise<{ advanced: boolean; keptSeqs: number[] }> {
    return this.db.transaction().execute(async (tx) => {
      const moved = await tx
        .updateTable('event_log_cursors')
        .set({ after_seq: to.seq, after_item: to.item })
        .where('subscription_id', '=', lease.subscriptionId)
        .where('after_seq', '=', lease.after.seq)
        .where((eb) =>
          lease.after.item === null ? eb('after_item', 'is', null) : eb('after_item', '=', lease.after.item),
        )
        .where('lease_owner', '=', owner)
        .executeTakeFirst();
      if (Number(moved.numUpdatedRows) !== 1) return { advanced: false, keptSeqs: [] };
      const keptSeqs: number[] = [];
      for (const { event, leaseUntil } of outcome.kept) {
        const row = await tx
          .insertInto('event_outbox')
          .values({
            id: event.id,
            tenant_id: event.tenantId,
            type: event.type,
            timestamp: event.timestamp,
            data: JSON.stringify(event.data),
            order_key: null,
            fanned_out: 1,
          })
          .returning('seq')
          .executeTakeFirstOrThrow();
        const seq = Number(row.seq);
        await tx
          .insertInto('event_deliveries')
          .values({
            event_seq: seq,
            subscription_id: lease.subscriptionId,
            order_key: null,
            status: 'pending',
            attempts: 1,
            next_attempt_at: leaseUntil,
            lease_until: leaseUntil,
            lease_owner: owner,
            last_status: null,
            last_error: null,
            created_at: event.timestamp,
            delivered_at: null,
          })
          .execute();
        keptSeqs.push(seq);
      }
      if (outcome.deliveredAt !== null) {
        const at = outcome.deliveredAt;
        await tx
          .updateTable('webhook_subscriptions')
          .set({ last_delivered_at: at, failures_in_a_row: 0 })
          .where('id', '=', lease.subscriptionId)
          .execute();
        const recovered = await tx
          .updateTable('webhook_subscriptions')
          .set({ failing_since: null })
          .where('id', '=', lease.subscriptionId)
          .where('failing_since', 'is not', null)
          .executeTakeFirst();
        if (Number(recovered.numUpdatedRows) === 1) await releaseHeld(tx, lease.subscriptionId, at);
      }
      return { advanced: true, keptSeqs };
    });
  }

  /**
   * Entries not yet handed to the subscriptions in `subscriptionIds` (a backlog, for metrics and tests): a batch
   * counts once, and a batch handed in part counts as one more.
   */
  async countLogBacklog(subscriptionIds: readonly string[]): Promise<number> {
    if (subscriptionIds.length === 0) return 0;
    const row = await this.db
      .selectFrom('event_log_cursors as c')
      .innerJoin('webhook_subscriptions as s', 's.id', 'c.subscription_id')
      .innerJoin('audit_log as a', (join) =>
        join.onRef('a.tenant_id', '=', 's.tenant_id').onRef('a.seq', '>', 'c.after_seq').on(AT_ONCE_SIGNED_OF_A),
      )
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('c.subscription_id', 'in', subscriptionIds)
      .where((eb) => eb.or([eb('a.action', '<>', BATCH_ACTION), eb('a.seq', '>', eb.ref('c.batches_after_seq'))]))
      .executeTakeFirstOrThrow();
    const inBatches = await this.db
      .selectFrom('event_log_cursors')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('subscription_id', 'in', subscriptionIds)
      .where('after_item', 'is not', null)
      .executeTakeFirstOrThrow();
    return Number(row.n) + Number(inBatches.n);
  }

  /** The plan of the read after a cursor (EXPLAIN QUERY PLAN on SQLite, EXPLAIN on PostgreSQL), one line per step. */
  async explainLogRead(tenantId: string): Promise<string[]> {
    // The statement as compiled, not as a subquery (SQLite takes no parentheses after EXPLAIN).
    const query = this.signedAfter(tenantId, 0, 0, 256).compile();
    const explain = this.postgres ? 'EXPLAIN ' : 'EXPLAIN QUERY PLAN ';
    const plan = await this.db.executeQuery<{ 'QUERY PLAN'?: string; detail?: string }>(
      CompiledQuery.raw(explain + query.sql, [...query.parameters]),
    );
    return plan.rows.map((r) => r['QUERY PLAN'] ?? r.detail ?? '');
  }

  /**
   * A tenant's `signed` entries of signatures made at once after `afterSeq`, in seq order (audit_log_signed_at_once);
   * its batches only after `batchesAfterSeq` (migration 0031: the earlier ones told of themselves in the outbox).
   */
  private signedAfter(tenantId: string, afterSeq: number, batchesAfterSeq: number, limit: number) {
    return this.db
      .selectFrom('audit_log')
      .select(['seq', 'at', 'tenant_id', 'actor', 'action', 'details', 'packed', 'digest', 'signature_sha256'])
      .where('tenant_id', '=', tenantId)
      .where(AT_ONCE_SIGNED)
      .where('seq', '>', afterSeq)
      .where((eb) => eb.or([eb('action', '<>', BATCH_ACTION), eb('seq', '>', batchesAfterSeq)]))
      .orderBy('seq')
      .limit(limit);
  }

  private cursor(subscriptionId: string) {
    return this.db
      .selectFrom('event_log_cursors')
      .selectAll()
      .where('subscription_id', '=', subscriptionId)
      .executeTakeFirst();
  }
}

/**
 * A cursor for a new subscription at the log's head, in the caller's transaction: a subscription made later does
 * not get earlier events.
 */
export async function startCursorAtHead(tx: Kysely<EventTables>, subscriptionId: string): Promise<void> {
  await sql`INSERT INTO event_log_cursors (subscription_id, after_seq)
      SELECT ${subscriptionId}, (SELECT coalesce(max(seq), 0) FROM audit_log)
      WHERE true -- SQLite reads an ON CONFLICT after a bare SELECT as a join's ON
      ON CONFLICT (subscription_id) DO NOTHING`.execute(tx);
}
