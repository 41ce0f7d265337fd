// The outbox and its deliveries (src/store/events/event-store.ts) on SQLite and PostgreSQL: an event is written with its
// change and not without it; fan-out follows subscriptions; a lease makes a delivery one sender's; a dead sender's
// lease is taken over and its late outcome changes nothing; a request's events go out in order.
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { EventDispatcher } from '../../src/events/dispatcher.js';
import type { SubscriptionRecord } from '../../src/store/events/event-store.js';
import type { EventInput } from '../../src/store/records/event-kinds.js';
import { ConflictError, type PendingRequestRecord, type Store } from '../../src/store/store.js';
import { type StorePairBackend, storePairs } from '../helpers/event-stand.js';
import { keyRecord } from '../helpers/store-records.js';
import { subscriptionRecord } from '../helpers/subscription-record.js';
import { until, waitFor } from '../helpers/wait.js';

const clients: pg.Client[] = [];
afterAll(async () => {
  for (const c of clients) await c.end();
});

const pairs = storePairs('outbox');
const backends = [
  ['SQLite with a writer thread', pairs.sqliteWriterThreadPair, true] as StorePairBackend,
  ...pairs.backends,
];

const event = (type: EventInput['type'], tenantId: string, orderKey?: string, n = 0): EventInput => ({
  type,
  data: { tenant_id: tenantId, n },
  ...(orderKey !== undefined && { orderKey }),
});

const subscription = (id: string, tenantId: string, kinds: SubscriptionRecord['eventKinds']): SubscriptionRecord =>
  subscriptionRecord({ id, tenantId, eventKinds: kinds });

const pending = (id: string, tenantId: string): PendingRequestRecord => ({
  id,
  tenantId,
  keyId: 'k1',
  algorithm: 'RSASSA_PKCS1_V1_5_SHA_256',
  hash: 'aGFzaA==',
  inputs: '{}',
  requester: 'ak',
  rule: 'r',
  reason: 'why',
  status: 'pending_approval',
  nextStages: [],
  decisions: [],
  signature: null,
  createdAt: new Date().toISOString(),
  expiresAt: new Date(Date.now() + 3600_000).toISOString(),
  updatedAt: new Date().toISOString(),
  continuationKey: `ck-${id}`,
});

const iso = (ms: number) => new Date(ms).toISOString();
/** What a dispatcher asks of subscription s1: up to 10 of its due deliveries. */
const S1 = [{ subscriptionId: 's1', limit: 10 }];

describe.each(backends)('event outbox on %s', (_name, open, enabled) => {
  it.skipIf(!enabled)('writes an event with its change, and none when the change does not happen', async () => {
    const [a] = await open();
    await a.tenants.create('t1', keyRecord('k1', 't1'), [event('tenant.created', 't1')]);
    // A second create of the same tenant fails: its event is rolled back with it.
    await expect(
      a.tenants.create('t1', keyRecord('k2', 't1'), [event('tenant.created', 't1', undefined, 2)]),
    ).rejects.toThrow(ConflictError);
    await a.requests.create(pending('r1', 't1'), [event('signature.pending', 't1', 'request:r1')]);
    // A compare-and-set that loses (the request is no longer pending_approval) writes no event.
    expect(
      await a.requests.update('r1', 'pending_security_review', { status: 'rejected' }, [
        event('signature.rejected', 't1', 'request:r1'),
      ]),
    ).toBe(false);
    expect(
      await a.requests.update('r1', 'pending_approval', { status: 'rejected' }, [
        event('signature.rejected', 't1', 'request:r1', 1),
      ]),
    ).toBe(true);
    // A denial's event rides with its audit entry in the group commit.
    await a.audit.append(
      { at: new Date().toISOString(), tenantId: 't1', actor: 'ak', action: 'sign', outcome: 'denied', details: {} },
      [event('signature.denied', 't1')],
    );
    const events = await a.events.readEvents(0, 100);
    expect(events.map((e) => [e.type, e.data.n])).toEqual([
      ['tenant.created', 0],
      ['signature.pending', 0],
      ['signature.rejected', 1],
      ['signature.denied', 0],
    ]);
    // Ids are unique and have no '.' (Standard Webhooks signs "{id}.{timestamp}.{body}").
    expect(new Set(events.map((e) => e.id)).size).toBe(4);
    for (const e of events) expect(e.id).toMatch(/^evt_[a-z0-9]+$/);
  });

  it.skipIf(!enabled)('fans out to the subscriptions of the tenant that want the kind', async () => {
    const [a, b] = await open();
    await a.events.addSubscription(subscription('s-all', 't1', null));
    await a.events.addSubscription(subscription('s-pending', 't1', ['signature.pending']));
    await a.events.addSubscription(subscription('s-other', 't2', null));
    await a.events.appendEvents([event('signature.pending', 't1'), event('key.rotated', 't1')], iso(Date.now()));
    // Both instances fan out at once: each event once. (Two SQLite connections in one process cannot overlap
    // transactions: better-sqlite3 waits for the lock synchronously, holding the event loop the other one needs.
    // Two processes on one SQLite file do overlap, and wait for each other's write lock; here they take turns.)
    const fan = (s: Store) => s.events.fanOut(10, iso(Date.now()));
    const [x, y] = _name.startsWith('SQLite') ? [await fan(a), await fan(b)] : await Promise.all([fan(a), fan(b)]);
    expect(x + y).toBe(2);
    expect((await a.events.listDeliveries('s-all', 10)).map((d) => d.eventType).sort()).toEqual([
      'key.rotated',
      'signature.pending',
    ]);
    expect((await a.events.listDeliveries('s-pending', 10)).map((d) => d.eventType)).toEqual(['signature.pending']);
    expect(await a.events.listDeliveries('s-other', 10)).toEqual([]);
  });

  it.skipIf(!enabled)(
    "leases a delivery to one sender; a dead sender's lease is taken over, its late outcome ignored",
    async () => {
      const [a, b] = await open();
      await a.events.addSubscription(subscription('s1', 't1', null));
      await a.events.appendEvents([event('key.rotated', 't1')], iso(Date.now()));
      const t0 = Date.now();
      await a.events.fanOut(10, iso(t0));
      const [first, second] = await Promise.all([
        a.events.claimDeliveries('A', iso(t0), iso(t0 + 60_000), S1),
        b.events.claimDeliveries('B', iso(t0), iso(t0 + 60_000), S1),
      ]);
      expect(first.length + second.length).toBe(1);
      const claim = [...first, ...second][0];
      if (!claim) throw new Error('no claim');
      // While the lease holds nobody else gets it; after it ends (A died) B takes it over.
      expect(await b.events.claimDeliveries('B', iso(t0 + 1000), iso(t0 + 61_000), S1)).toEqual([]);
      const takeover = await b.events.claimDeliveries('B2', iso(t0 + 61_000), iso(t0 + 121_000), S1);
      expect(takeover.map((c) => [c.event.id, c.attempts])).toEqual([[claim.event.id, 2]]);
      // The first sender's outcome, recorded late, changes nothing; the new owner's counts.
      expect(await a.events.markDelivered(claim, 200, iso(t0 + 62_000))).toBe(false);
      expect(
        await a.events.markFailedAttempt(claim, { status: 500, error: 'x', retryAt: null }, iso(t0 + 62_000)),
      ).toBe(undefined);
      const taken = takeover[0];
      if (!taken) throw new Error('no takeover');
      expect(await b.events.markDelivered(taken, 200, iso(t0 + 63_000))).toBe(true);
      const [delivery] = await a.events.listDeliveries('s1', 10);
      expect(delivery).toMatchObject({ status: 'delivered', attempts: 2, lastStatus: 200 });
    },
  );

  it.skipIf(!enabled)("keeps a request's events in order, and pauses and resumes a subscription", async () => {
    const [a] = await open();
    await a.events.addSubscription(subscription('s1', 't1', null));
    const t0 = Date.now();
    await a.events.appendEvents(
      [event('signature.pending', 't1', 'request:r1'), event('signature.pending', 't1', 'request:r2')],
      iso(t0),
    );
    await a.events.appendEvents([event('signature.approved', 't1', 'request:r1')], iso(t0));
    await a.events.fanOut(10, iso(t0));
    // r1's approval waits for r1's pending; r2 goes alongside.
    const firstRound = await a.events.claimDeliveries('A', iso(t0), iso(t0 + 60_000), S1);
    expect(firstRound.map((c) => [c.event.type, c.event.orderKey])).toEqual([
      ['signature.pending', 'request:r1'],
      ['signature.pending', 'request:r2'],
    ]);
    const [r1, r2] = firstRound;
    if (!r1 || !r2) throw new Error('claims missing');
    // r1's pending fails and is to be retried later: the approval still waits behind it.
    await a.events.markFailedAttempt(r1, { status: 503, error: 'down', retryAt: iso(t0 + 5000) }, iso(t0 + 10));
    await a.events.markDelivered(r2, 200, iso(t0 + 10));
    expect(await a.events.claimDeliveries('A', iso(t0 + 20), iso(t0 + 60_000), S1)).toEqual([]);
    // Paused: nothing is claimed even when due.
    await a.events.pauseSubscription('s1', 'kept failing', iso(t0 + 30));
    expect(await a.events.claimDeliveries('A', iso(t0 + 6000), iso(t0 + 66_000), S1)).toEqual([]);
    const paused = await a.events.getSubscription('s1');
    // (r2's success since ended the run of failures; the last error stays on show.)
    expect(paused).toMatchObject({ pauseReason: 'kept failing', lastError: 'down', failuresInARow: 0 });
    // Resumed: what it had to send is due at once, in order.
    expect(await a.events.resumeSubscription('s1', iso(t0 + 40))).toBe(true);
    const resumed = await a.events.claimDeliveries('A', iso(t0 + 40), iso(t0 + 60_000), S1);
    expect(resumed.map((c) => c.event.type)).toEqual(['signature.pending']);
    const [again] = resumed;
    if (!again) throw new Error('no claim');
    await a.events.markDelivered(again, 200, iso(t0 + 50));
    const last = await a.events.claimDeliveries('A', iso(t0 + 60), iso(t0 + 60_000), S1);
    expect(last.map((c) => c.event.type)).toEqual(['signature.approved']);
  });

  it.skipIf(!enabled)(
    'keeps the lease of an attempt that outlasts it, so no other instance sends it meanwhile',
    async () => {
      const [a, b] = await open();
      await a.events.addSubscription(subscription('s1', 't1', null));
      await a.events.appendEvents([event('key.rotated', 't1', 'tenant:t1')], iso(Date.now()));
      // Both instances' clocks, moved by the test: "the lease as first taken has long ended" without waiting for it.
      let clock = Date.now();
      const now = () => new Date(clock);
      let answer = () => {};
      const answered = new Promise<void>((resolve) => {
        answer = resolve;
      });
      let sent = 0;
      const slow = new EventDispatcher(
        a,
        async () => {
          sent++;
          await answered; // a receiver slower than the lease (the sender's time-out may be longer than the lease)
          return { outcome: 'delivered', status: 200 };
        },
        { leaseMs: 300 },
        now,
      );
      const other = new EventDispatcher(b, async () => ({ outcome: 'delivered', status: 200 }), { leaseMs: 300 }, now);
      const pass = slow.runOnce();
      await waitFor('the slow attempt under way', () => sent === 1);
      const [claimed] = await a.events.listDeliveries('s1', 1);
      clock += 10_000;
      // The sender renews its lease while it waits for the answer.
      await until('the lease renewed past the moved clock', async () => {
        const [d] = await a.events.listDeliveries('s1', 1);
        return d?.leaseUntil && Date.parse(d.leaseUntil) > clock ? true : undefined;
      });
      expect(claimed?.leaseUntil && Date.parse(claimed.leaseUntil)).toBeLessThan(clock);
      expect(await other.runOnce()).toBe(0);
      answer();
      expect(await pass).toBe(1);
      const [delivery] = await a.events.listDeliveries('s1', 1);
      expect(delivery).toMatchObject({ status: 'delivered', attempts: 1, leaseUntil: null });
      expect(await other.runOnce()).toBe(0);
    },
  );

  it.skipIf(!enabled || _name !== 'PostgreSQL')(
    "keeps an order key's events in order while another instance is still fanning out an earlier one",
    async () => {
      const [a, b] = await open();
      await a.events.addSubscription(subscription('s1', 't1', null));
      const t0 = Date.now();
      await a.events.appendEvents([event('key.rotated', 't1', 'tenant:t1', 1)], iso(t0));
      await a.events.appendEvents([event('key.rotated', 't1', 'tenant:t1', 2)], iso(t0));
      // Instance A's fan-out has taken the first event (its transaction's first statement) and not committed yet.
      const instanceA = new pg.Client({ connectionString: pairs.postgresUrl() });
      clients.push(instanceA);
      await instanceA.connect();
      await instanceA.query('BEGIN');
      await instanceA.query('UPDATE event_outbox SET fanned_out = 1 WHERE seq = (SELECT min(seq) FROM event_outbox)');
      // Instance B fans out the second (skipping the locked first) and must not send it before the first.
      expect(await b.events.fanOut(10, iso(t0))).toBe(1);
      expect(await b.events.claimDeliveries('B', iso(t0), iso(t0 + 60_000), S1)).toEqual([]);
      // A dies before committing: its fan-out is rolled back, B fans the first event out and sends it first.
      await instanceA.query('ROLLBACK');
      expect(await b.events.fanOut(10, iso(t0))).toBe(1);
      const first = await b.events.claimDeliveries('B', iso(t0), iso(t0 + 60_000), S1);
      expect(first.map((c) => c.event.data.n)).toEqual([1]);
      await b.events.markDelivered(first[0] as (typeof first)[number], 200, iso(t0 + 10));
      const second = await b.events.claimDeliveries('B', iso(t0 + 20), iso(t0 + 60_000), S1);
      expect(second.map((c) => c.event.data.n)).toEqual([2]);
    },
  );
});
