// When a subscription pauses, and how it comes back by itself (issue 31): a subscription pauses after failing for
// pauseAfterFailingMs (1 h here) with no delivery, not after a count of failures (50 in a row took 3-6 s at 450
// events/s, so a receiver's deploy stopped delivery until a person resumed it); a paused one is probed with one
// delivery at a time on the back-off schedule, and the first 2xx resumes it and sends what it kept.
//
// The real dispatcher and sender against a real HTTP receiver on 127.0.0.1 (down: its port refuses connections),
// on SQLite and on PostgreSQL. Time is the dispatcher's injected clock, moved by the test (an hour passes in a few
// passes); each pass is runOnce(), which returns once its attempts are recorded, so nothing waits on the real clock.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { destinations } from '../../src/events/destinations.js';
import { EventDispatcher } from '../../src/events/dispatcher.js';
import { openPostgresStore } from '../../src/store/postgres/postgres-store.js';
import type { EventInput } from '../../src/store/records/event-kinds.js';
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { Store } from '../../src/store/store.js';
import { createTestDatabase, testPostgresUrl } from '../helpers/postgres.js';
import { subscriptionRecord } from '../helpers/subscription-record.js';
import { WebhookReceiver } from '../helpers/webhook-receiver.js';

const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const HOUR = 3600_000;
const MINUTE = 60_000;
const dirs: string[] = [];
const stores: Store[] = [];
const receivers: WebhookReceiver[] = [];
afterAll(async () => {
  for (const s of stores) await s.close();
  for (const r of receivers) await r.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

async function openSqlite(): Promise<Store> {
  const dir = mkdtempSync(join(tmpdir(), 'sb-pause-'));
  dirs.push(dir);
  return openSqliteStore(join(dir, 'state.db'));
}
const openPostgres = async (): Promise<Store> => openPostgresStore(createTestDatabase('pause'));

const backends: Array<[string, () => Promise<Store>, boolean]> = [
  ['SQLite', openSqlite, true],
  ['PostgreSQL', openPostgres, testPostgresUrl() !== undefined],
];

/** A store with one subscription to a running receiver, and a dispatcher on a clock the test moves. */
async function setUp(open: () => Promise<Store>) {
  const store = await open();
  stores.push(store);
  await store.migrate();
  const receiver = new WebhookReceiver();
  receivers.push(receiver);
  await receiver.start();
  receiver.secret = SECRET;
  await store.events.addSubscription(
    subscriptionRecord({ id: 'wh_pause', tenantId: 't1', url: receiver.url, secret: SECRET }),
  );
  let clock = Date.parse('2026-11-01T00:00:00Z');
  const dispatcher = new EventDispatcher(
    store,
    destinations(store, { webhooks: { allow: ['127.0.0.1'], timeoutMs: 10_000 } }),
    { retryBaseMs: 1000, retryMaxMs: 10 * MINUTE, pauseAfterFailingMs: HOUR, leaseMs: MINUTE },
    () => new Date(clock),
  );
  const ids: string[] = [];
  return {
    store,
    receiver,
    ids,
    now: () => clock,
    /** Moves the clock on by `ms`, then makes one pass and waits for its attempts; returns how many it made. */
    pass: async (ms: number) => {
      clock += ms;
      return dispatcher.runOnce();
    },
    subscription: async () => {
      const s = await store.events.getSubscription('wh_pause');
      if (!s) throw new Error('no subscription');
      return s;
    },
    /** `unordered` events without an order key, and `requests` requests' pending then approved (ordered). */
    write: async (unordered: number, requests: number, tag: string) => {
      const events: EventInput[] = [];
      for (let i = 0; i < unordered; i++) events.push({ type: 'signature.denied', data: { tenant_id: 't1', tag, i } });
      for (let i = 0; i < requests; i++) {
        events.push({ type: 'signature.pending', data: { tenant_id: 't1', tag, i }, orderKey: `request:${tag}-${i}` });
      }
      await store.events.appendEvents(events, new Date(clock).toISOString());
      // The approvals in later transactions, as the service writes them.
      for (let i = 0; i < requests; i++) {
        await store.events.appendEvents(
          [{ type: 'signature.approved', data: { tenant_id: 't1', tag, i }, orderKey: `request:${tag}-${i}` }],
          new Date(clock).toISOString(),
        );
      }
      ids.push(...(await store.events.readEvents(0, 10_000)).map((e) => e.id).filter((id) => !ids.includes(id)));
    },
  };
}

/** Every event answered 200 exactly once; each request's pending before its approval. */
function expectAllDeliveredInOrder(receiver: WebhookReceiver, ids: string[]): void {
  const delivered = receiver.delivered();
  for (const id of ids) expect(delivered.get(id), id).toBe(1);
  expect(receiver.attempts.every((a) => a.signatureValid)).toBe(true);
  const arrived = receiver.attempts.filter((a) => a.status === 200);
  const position = (type: string, tag: unknown, i: unknown) =>
    arrived.findIndex(
      (a) =>
        a.type === type &&
        a.body.data &&
        (a.body.data as Record<string, unknown>).tag === tag &&
        (a.body.data as Record<string, unknown>).i === i,
    );
  for (const a of arrived.filter((x) => x.type === 'signature.approved')) {
    const data = a.body.data as Record<string, unknown>;
    expect(position('signature.pending', data.tag, data.i)).toBeGreaterThanOrEqual(0);
    expect(position('signature.pending', data.tag, data.i)).toBeLessThan(
      position('signature.approved', data.tag, data.i),
    );
  }
}

/** Passes `ms` apart until every event is delivered (at most `max` passes). */
async function drain(t: Awaited<ReturnType<typeof setUp>>, ms: number, max = 400): Promise<void> {
  for (let i = 0; i < max && t.receiver.delivered().size < t.ids.length; i++) await t.pass(ms);
  expect(t.receiver.delivered().size).toBe(t.ids.length);
}

describe.each(backends)('pausing a failing subscription on %s', (_name, open, enabled) => {
  it.skipIf(!enabled)(
    'never pauses for a burst of failures shorter than the window, however many',
    async () => {
      const t = await setUp(open);
      await t.write(60, 5, 'burst');
      await t.receiver.stop(); // a deploy: connections refused
      let failed = 0;
      // 10 minutes of failing, a pass every 5 s: more than the 50 failed attempts in a row that used to pause it.
      for (let elapsed = 0; elapsed < 10 * MINUTE; elapsed += 5000) {
        failed += await t.pass(5000);
        const s = await t.subscription();
        expect(s.pausedAt, `paused after ${failed} failed attempts in ${elapsed / 1000} s`).toBeNull();
      }
      expect(failed).toBeGreaterThanOrEqual(100);
      expect((await t.subscription()).failuresInARow).toBe(failed);
      await t.receiver.start();
      await drain(t, 10 * MINUTE);
      const s = await t.subscription();
      expect(s).toMatchObject({ pausedAt: null, failingSince: null, failuresInARow: 0 });
      expectAllDeliveredInOrder(t.receiver, t.ids);
    },
    120_000,
  );

  it.skipIf(!enabled)(
    'pauses after failing for the window, probes one delivery at a time on the back-off, resumes on the first 2xx',
    async () => {
      const t = await setUp(open);
      await t.write(10, 3, 'before');
      await t.receiver.stop();
      const firstFailure = t.now() + 5 * MINUTE;
      // A pass every 5 minutes: still active up to the window, paused by the failure that ends it.
      // The first pass sends every due delivery (10 without an order key, 3 requests' first); once failing, one
      // attempt at a time.
      for (let first = true; ; first = false) {
        expect(await t.pass(5 * MINUTE)).toBe(first ? 13 : 1);
        const s = await t.subscription();
        if (s.pausedAt !== null) {
          expect(t.now() - firstFailure).toBeGreaterThanOrEqual(HOUR);
          expect(s.pauseReason).toMatch(/failed for 1 h without a delivery/);
          expect(s.nextProbeAt).not.toBeNull();
          break;
        }
        expect(t.now() - firstFailure).toBeLessThan(HOUR);
      }
      // Written while paused: kept, and sent once it is back.
      await t.write(5, 2, 'paused');
      for (let probe = 0; probe < 2; probe++) {
        const { nextProbeAt } = await t.subscription();
        const wait = Date.parse(nextProbeAt as string) - t.now();
        // The back-off after an hour of failing: between half of and the whole 10-minute cap.
        expect(wait).toBeGreaterThanOrEqual(5 * MINUTE);
        expect(wait).toBeLessThanOrEqual(10 * MINUTE);
        // Before the probe is due nothing is sent, though deliveries are due.
        expect(await t.pass(wait - 1000)).toBe(0);
        // At the probe's time: one delivery, which fails again; still paused, the next probe later.
        expect(await t.pass(1000)).toBe(1);
        expect(await t.pass(0)).toBe(0);
        const s = await t.subscription();
        expect(s.pausedAt).not.toBeNull();
        expect(Date.parse(s.nextProbeAt as string)).toBeGreaterThan(t.now());
      }
      await t.receiver.start();
      const { nextProbeAt } = await t.subscription();
      expect(await t.pass(Date.parse(nextProbeAt as string) - t.now())).toBe(1);
      // The probe's 200 resumed it; what it kept is sent at once, in order.
      const resumed = await t.subscription();
      expect(resumed).toMatchObject({ pausedAt: null, pauseReason: null, nextProbeAt: null, failingSince: null });
      await drain(t, 0, 50);
      expectAllDeliveredInOrder(t.receiver, t.ids);
      expect(await t.store.events.countPendingDeliveries()).toBe(0);
    },
    120_000,
  );
});
