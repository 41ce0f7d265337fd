// The outbox and its fan-out (docs/events.md).
//
// - Outbox rows are written by the store method that makes the change, in its transaction (insertEvents), so an
//   event is never lost when a process dies and never sent for a change that was rolled back.
// - fanOut() turns new outbox rows into delivery rows for the subscriptions of the event's tenant that want its
//   kind, and marks the event fanned out, in one transaction (on PostgreSQL the rows are taken FOR UPDATE SKIP
//   LOCKED, so two instances never fan out the same event; the primary key would catch it anyway). A failing
//   subscription's new deliveries are held behind its retry (event-holds.ts).
import { randomBytes } from 'node:crypto';
import { type Kysely, type Selectable, sql } from 'kysely';
import type { EventInput, EventRecord } from '../records/event-kinds.js';
import { subscriptionsHolding } from './event-holds.js';
import { type EventTables, HELD_UNTIL_RECOVERY, type OutboxRow, toEvent, toSubscription } from './event-tables.js';

/** Events for a change, or a function that makes them from the change's result (a key's new version). */
export type EventsFor<T> = readonly EventInput[] | ((result: T) => readonly EventInput[]);

export function eventsOf<T>(events: EventsFor<T> | undefined, result: T): readonly EventInput[] | undefined {
  return typeof events === 'function' ? events(result) : events;
}

/** Outbox rows for events of a change made at `at`; ids are unique and have no '.' (Standard Webhooks). */
export function outboxRows(events: readonly EventInput[], at: string): OutboxRow[] {
  return events.map((e) => ({
    id: `evt_${Date.parse(at).toString(36)}${randomBytes(10).toString('hex')}`,
    tenant_id: e.data.tenant_id,
    type: e.type,
    timestamp: at,
    data: JSON.stringify(e.data),
    order_key: e.orderKey ?? null,
    fanned_out: 0,
  }));
}

/** Writes events in the caller's transaction. */
export async function insertEvents(tx: Kysely<EventTables>, events: readonly EventInput[] | undefined, at: string) {
  if (!events || events.length === 0) return;
  await tx.insertInto('event_outbox').values(outboxRows(events, at)).execute();
}

export class EventOutbox {
  constructor(
    private readonly db: Kysely<EventTables>,
    private readonly postgres: boolean,
  ) {}

  /** Events written outside any other change (none today; tests and tools). */
  async appendEvents(events: readonly EventInput[], at: string): Promise<void> {
    await insertEvents(this.db, events, at);
  }

  async readEvents(afterSeq: number, limit: number): Promise<EventRecord[]> {
    const rows = await this.db
      .selectFrom('event_outbox')
      .selectAll()
      .where('seq', '>', afterSeq)
      .orderBy('seq')
      .limit(limit)
      .execute();
    return rows.map(toEvent);
  }

  /**
   * Makes delivery rows for up to `limit` events not fanned out yet, for the subscriptions of their tenant that
   * want their kind, and marks the events fanned out. Returns how many events it took.
   */
  async fanOut(limit: number, at: string): Promise<number> {
    return this.db.transaction().execute(async (tx) => {
      // Marked first, in the statement that picks them: the transaction's first statement is a write, so on SQLite
      // it waits for the write lock (busy_timeout) instead of failing SQLITE_BUSY when another connection wrote
      // after this one read; on PostgreSQL rows another instance is fanning out are skipped.
      const lock = this.postgres ? sql`FOR UPDATE SKIP LOCKED` : sql``;
      const marked = await sql<Selectable<EventTables['event_outbox']>>`
        UPDATE event_outbox SET fanned_out = 1
        WHERE seq IN (SELECT seq FROM event_outbox WHERE fanned_out = 0 ORDER BY seq LIMIT ${limit} ${lock})
        RETURNING *`.execute(tx);
      const events = marked.rows.map(toEvent).sort((x, y) => x.seq - y.seq);
      if (events.length === 0) return 0;
      const tenants = [...new Set(events.map((e) => e.tenantId).filter((t): t is string => t !== null))];
      const subscriptions =
        tenants.length === 0
          ? []
          : (await tx.selectFrom('webhook_subscriptions').selectAll().where('tenant_id', 'in', tenants).execute()).map(
              toSubscription,
            );
      // A failing subscription's new deliveries wait behind its retry (event-holds.ts).
      const holding = await subscriptionsHolding(
        tx,
        subscriptions.filter((s) => s.failingSince).map((s) => s.id),
        this.postgres,
      );
      const deliveries: EventTables['event_deliveries'][] = [];
      for (const event of events) {
        for (const s of subscriptions) {
          if (s.tenantId !== event.tenantId) continue;
          if (s.eventKinds && !s.eventKinds.includes(event.type)) continue;
          deliveries.push({
            event_seq: event.seq,
            subscription_id: s.id,
            order_key: event.orderKey ?? null,
            status: 'pending',
            attempts: 0,
            next_attempt_at: holding.has(s.id) ? HELD_UNTIL_RECOVERY : at,
            lease_until: null,
            lease_owner: null,
            last_status: null,
            last_error: null,
            created_at: event.timestamp,
            delivered_at: null,
          });
        }
      }
      for (let i = 0; i < deliveries.length; i += 200) {
        await tx
          .insertInto('event_deliveries')
          .values(deliveries.slice(i, i + 200))
          .onConflict((oc) => oc.columns(['event_seq', 'subscription_id']).doNothing())
          .execute();
      }
      return events.length;
    });
  }
}
