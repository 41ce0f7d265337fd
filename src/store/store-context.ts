// What every part of the store shares (kysely-store.ts composes the parts): the Kysely instance of either SQL
// dialect, the signing path's access cache, and writing events in the transaction of the change they tell of.
import type { Kysely, Transaction } from 'kysely';
import type { AccessCache } from './access-cache.js';
import { insertEvents } from './events/event-outbox.js';
import type { EventStore } from './events/event-store.js';
import type { EventTables } from './events/event-tables.js';
import { narrowTables, type PartContext } from './part-context.js';
import type { EventInput } from './records/event-kinds.js';
import type { Database } from './tables.js';

export class StoreContext implements PartContext<Database> {
  constructor(
    readonly db: Kysely<Database>,
    /** True on PostgreSQL, where a query must be written otherwise (JSON expressions). */
    readonly postgres: boolean,
    /** The signing path's reads, answered from memory until a change may have happened (access-cache.ts). */
    readonly access: AccessCache,
    /** The event store, built from this context too (so asked for when needed). */
    private readonly eventStore: () => EventStore,
  ) {}

  /** The outbox: told when events were written, so the dispatcher looks soon. */
  get events(): EventStore {
    return this.eventStore();
  }

  /** Writes `events` in the transaction `tx` (the change they tell of is in it too). */
  async writeEvents(tx: Kysely<Database>, events: readonly EventInput[] | undefined): Promise<void> {
    await insertEvents(narrowTables<EventTables, Database>(tx), events, new Date().toISOString());
    if (events && events.length > 0) this.events.onWritten?.();
  }
}

/** A part of the store (tenant-store.ts, api-key-store.ts, ...): its queries run on the context's Kysely instance. */
export abstract class StorePart {
  protected readonly db: Kysely<Database>;

  constructor(protected readonly ctx: StoreContext) {
    this.db = ctx.db;
  }
}

/** Every write to tenants, keys or API keys raises the cache epoch in its transaction (migration 0006 says why). */
export async function raiseCacheEpoch(tx: Transaction<Database>): Promise<void> {
  await tx
    .updateTable('cache_epoch')
    .set((eb) => ({ n: eb('n', '+', 1) }))
    .where('id', '=', 1)
    .execute();
}

/** True for a unique/primary-key violation in either SQLite or PostgreSQL. */
export function isUniqueViolation(err: unknown): boolean {
  const e = err as { code?: string };
  return e?.code === 'SQLITE_CONSTRAINT_PRIMARYKEY' || e?.code === 'SQLITE_CONSTRAINT_UNIQUE' || e?.code === '23505';
}
