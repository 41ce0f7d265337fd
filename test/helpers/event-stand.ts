// The stand of the event tests that run the real store and dispatcher (test/unit/event-outbox.test.ts,
// test/events/log-events.test.ts, test/events/batch-log-events.test.ts): per backend, two handles on one database
// (two instances' stores), closed after the file; a receiver standing in for the sender (a function that answers as
// a webhook's answer is classified); and the real dispatcher, polling fast, counting each event id it delivered.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';
import type { DeliveryResult } from '../../src/events/delivery-outcome.js';
import { type Deliver, type DispatcherSettings, EventDispatcher } from '../../src/events/dispatcher.js';
import type { DeliveryClaim } from '../../src/store/events/event-store.js';
import { openPostgresStore } from '../../src/store/postgres/postgres-store.js';
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { Store } from '../../src/store/store.js';
import { createTestDatabase, testPostgresUrl } from './postgres.js';

/** [name, open two handles on a fresh database, whether the backend is there to test]. */
export type StorePairBackend = [string, () => Promise<[Store, Store]>, boolean];

/**
 * SQLite and PostgreSQL (where the suite has one) as `describe.each`'s table, each pair on a fresh database named
 * after `name`, every store closed after the file; the pairs also one by one, SQLite with its writer thread (the
 * in-process daemon's store: one store, its group commits in sqlite-writer.cjs) among them, and the URL of the last
 * PostgreSQL pair's database, for a test that plays another instance's connection.
 */
export function storePairs(name: string) {
  const dirs: string[] = [];
  const stores: Store[] = [];
  let lastPostgresUrl = '';
  afterAll(async () => {
    for (const s of stores) await s.close();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });
  const freshDir = (kind: string) => {
    const dir = mkdtempSync(join(tmpdir(), `sb-${name.replaceAll('_', '-')}-${kind}`));
    dirs.push(dir);
    return dir;
  };
  const sqlitePair = async (): Promise<[Store, Store]> => {
    const path = join(freshDir(''), 'state.db');
    const a = openSqliteStore(path);
    await a.migrate();
    const b = openSqliteStore(path);
    stores.push(a, b);
    return [a, b];
  };
  const sqliteWriterThreadPair = async (): Promise<[Store, Store]> => {
    const a = openSqliteStore(join(freshDir('writer-'), 'state.db'), { writerThread: { spinMs: 0 } });
    await a.migrate();
    stores.push(a);
    return [a, a];
  };
  const postgresPair = async (): Promise<[Store, Store]> => {
    lastPostgresUrl = createTestDatabase(name);
    const a = openPostgresStore(lastPostgresUrl);
    await a.migrate();
    const b = openPostgresStore(lastPostgresUrl);
    stores.push(a, b);
    return [a, b];
  };
  const backends: StorePairBackend[] = [
    ['SQLite', sqlitePair, true],
    ['PostgreSQL', postgresPair, testPostgresUrl() !== undefined],
  ];
  return { backends, sqlitePair, sqliteWriterThreadPair, postgresPair, postgresUrl: () => lastPostgresUrl };
}

/** One attempt the receiver got. */
export interface ReceivedAttempt {
  id: string;
  seq: number;
  to: string;
  type: string;
  data: Record<string, unknown>;
  delivered: boolean;
}

/** A receiver: every attempt it got, in order, answering each with `answer` (delivered by default). */
export function receiver(
  answer: (claim: DeliveryClaim) => DeliveryResult = () => ({ outcome: 'delivered', status: 200 }),
) {
  const attempts: ReceivedAttempt[] = [];
  return {
    attempts,
    deliver: async (claim: DeliveryClaim): Promise<DeliveryResult> => {
      const result = answer(claim);
      attempts.push({
        id: claim.event.id,
        seq: claim.event.seq,
        to: claim.subscription.id,
        type: claim.event.type,
        data: claim.event.data as Record<string, unknown>,
        delivered: result.outcome === 'delivered',
      });
      return result;
    },
  };
}

/** Polls and retries within tens of milliseconds, so that a test waits for its conditions, not for the dispatcher. */
const FAST: DispatcherSettings = {
  pollMs: 10,
  idlePollMaxMs: 50,
  retryBaseMs: 20,
  retryMaxMs: 100,
  leaseMs: 2000,
};

/** A dispatcher (not started), fast but for `settings`, that counts each event id delivered (its onOutcome). */
export function dispatcher(store: Store, deliver: Deliver, settings: Partial<DispatcherSettings> = {}) {
  const delivered = new Map<string, number>();
  const d = new EventDispatcher(store, deliver, {
    ...FAST,
    ...settings,
    onOutcome: (claim, result) => {
      if (result.outcome === 'delivered') delivered.set(claim.event.id, (delivered.get(claim.event.id) ?? 0) + 1);
    },
  });
  return { d, delivered };
}

/**
 * `store` as an instance sees it that dies after the receiver's answers and before its cursor moves: every other
 * call goes through, advancing the log cursor is refused.
 */
export function dyingBeforeCursorMoves(store: Store): Store {
  const dying = Object.create(store) as Store;
  Object.defineProperty(dying, 'events', {
    value: new Proxy(store.events, {
      get(target, prop, recv) {
        if (prop === 'advanceLogCursor') return () => Promise.reject(new Error('killed'));
        const value = Reflect.get(target, prop, recv);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    }),
  });
  return dying;
}

/** How many attempts the receiver got for each event id, in the order of their first attempts. */
export function attemptsPerId(attempts: readonly ReceivedAttempt[]): Array<[string, number]> {
  const times = new Map<string, number>();
  for (const a of attempts) times.set(a.id, (times.get(a.id) ?? 0) + 1);
  return [...times.entries()];
}
