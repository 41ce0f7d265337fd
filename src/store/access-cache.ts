// The signing path's reads, cached exactly: the caller's API key, the tenant's current key, and which event kinds
// the tenant's subscriptions want (so a signature writes its signature.signed event only where one can be
// delivered). Every signature makes them, and they change rarely, so the store answers them from memory and goes to
// the database only when a change may have happened.
//
// "Exactly" means not time-based. Every write to tenants, keys, API keys and subscriptions raises the cache epoch in its own
// transaction (migration 0006), from whatever process made it: `signbridge admin api-key revoke`, an in-process
// daemon, another service instance on the same PostgreSQL. The epoch is read once per event-loop turn, and a
// change empties the cache. So a key revoked anywhere is refused from the first request that arrives after the
// revoke committed: the turn's read is made after the turn's requests arrived (on PostgreSQL every request of the
// turn waits for it). Reading the epoch per turn, not per request, is what makes the cache pay: on SQLite a read
// costs as much as the one it saves (a WAL snapshot each), on PostgreSQL a round trip. One edge: when a poll
// returns a full batch (1,024 ready events), libuv polls again within the same turn, and requests from that second
// batch share the turn's read; that takes over a thousand sockets ready at once.
//
// This process's own writes empty the cache too, and a read that began before a write or an epoch change is not
// kept (the generation below), so nothing read from before a change outlives it.
import type { SubscribedKinds } from './events/event-store.js';
import type { ApiKeyRecord } from './records/api-key.js';
import type { KeyRecord } from './records/tenant-key.js';

/** Entries kept per map; past it the oldest goes (a Map keeps insertion order). */
const CACHE_MAX = 10_000;

type Maybe<T> = T | Promise<T>;

export class AccessCache {
  /** Answers from memory and reads from the database, for tests and diagnostics. */
  readonly stats = { hits: 0, misses: 0 };
  private readonly apiKeys = new Map<string, ApiKeyRecord>();
  private readonly currentKeys = new Map<string, KeyRecord>();
  private readonly subscribedKinds = new Map<string, SubscribedKinds>();
  /** Raised by every forget(): a read that started before it is not remembered. */
  private generation = 0;
  private seenEpoch: number | undefined;
  /** This turn's epoch check: done, or under way (PostgreSQL), or not started yet. */
  private turn: 'checked' | Promise<void> | undefined;
  private epochReadsSent = 0;
  private epochReadApplied = 0;
  private readonly nextTurn = (): void => {
    this.turn = undefined;
  };

  /** `readEpoch` answers migration 0006's counter: synchronously where the database allows (SQLite). */
  constructor(private readonly readEpoch: () => Maybe<number>) {}

  apiKey(id: string, read: (id: string) => Maybe<ApiKeyRecord | undefined>): Promise<ApiKeyRecord | undefined> {
    return this.lookUp(this.apiKeys, id, read);
  }

  currentKey(tenantId: string, read: (id: string) => Maybe<KeyRecord | undefined>): Promise<KeyRecord | undefined> {
    return this.lookUp(this.currentKeys, tenantId, read);
  }

  /** The event kinds a tenant's subscriptions want (an empty answer for a tenant without any is kept too). */
  eventKinds(tenantId: string, read: (id: string) => Maybe<SubscribedKinds>): Promise<SubscribedKinds | undefined> {
    return this.lookUp(this.subscribedKinds, tenantId, read);
  }

  forget(): void {
    this.generation++;
    this.apiKeys.clear();
    this.currentKeys.clear();
    this.subscribedKinds.clear();
  }

  /** Runs a write to tenants, keys, API keys or subscriptions: nothing cached before it, or read while it ran, survives it. */
  async changing<T>(write: () => Promise<T>): Promise<T> {
    this.forget();
    try {
      return await write();
    } finally {
      this.forget();
    }
  }

  private async lookUp<V>(
    cache: Map<string, V>,
    key: string,
    read: (key: string) => Maybe<V | undefined>,
  ): Promise<V | undefined> {
    const checking = this.checkEpoch();
    if (checking) await checking;
    const cached = cache.get(key);
    if (cached) {
      this.stats.hits++;
      return cached;
    }
    const generation = this.generation;
    const reading = read(key);
    // A synchronous answer (SQLite) is kept before anything else runs, so the turn's other lookups find it.
    const value = reading instanceof Promise ? await reading : reading;
    this.stats.misses++;
    // Only rows that exist are kept (unknown ids are not, so guessing cannot fill the cache).
    if (value && generation === this.generation) {
      if (cache.size >= CACHE_MAX) cache.delete(cache.keys().next().value as string);
      cache.set(key, Object.freeze(value));
    }
    return value;
  }

  /** Undefined once this turn's epoch is known; else the read every request of this turn waits for. */
  private checkEpoch(): Promise<void> | undefined {
    if (this.turn === 'checked') return undefined;
    if (this.turn) return this.turn;
    setImmediate(this.nextTurn);
    const epoch = this.readEpoch();
    if (typeof epoch === 'number') {
      this.apply(epoch, ++this.epochReadsSent);
      this.turn = 'checked';
      return undefined;
    }
    const sent = ++this.epochReadsSent;
    const pending: Promise<void> = epoch.then(
      (n) => {
        this.apply(n, sent);
        if (this.turn === pending) this.turn = 'checked';
      },
      (err: unknown) => {
        // The next request tries again (a database fault fails this turn's requests, not the ones after it).
        if (this.turn === pending) this.turn = undefined;
        throw err;
      },
    );
    this.turn = pending;
    return pending;
  }

  /** Reads may finish out of order (several connections): only one sent after the last applied counts. */
  private apply(epoch: number, sent: number): void {
    if (sent < this.epochReadApplied) return;
    this.epochReadApplied = sent;
    if (epoch !== this.seenEpoch) {
      this.forget();
      this.seenEpoch = epoch;
    }
  }
}
