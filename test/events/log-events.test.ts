// Issue 46: signature.signed of a signature made at once is read from its `signed` audit entry under the
// subscription's cursor (src/store/events/event-log-cursors.ts), not copied into the outbox. The real dispatcher and
// store on SQLite and PostgreSQL, with a receiver standing in for the sender (a function that answers as a webhook's
// answer is classified): each entry is delivered once, in seq order, under an id made from its seq that a retry
// carries again; a receiver that fails and recovers gets every event; a paused subscription goes on from its cursor;
// two instances on PostgreSQL deliver each entry once; an instance that dies between the receiver's answer and the
// cursor's move (its store's write refused, then the instance replaced by another) has the entries sent again, with
// the same ids, and none lost.
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { Deliver } from '../../src/events/dispatcher.js';
import { eventDataProblem } from '../../src/events/event-schemas.js';
import type { Store } from '../../src/store/store.js';
import { attemptsPerId, dispatcher, dyingBeforeCursorMoves, receiver, storePairs } from '../helpers/event-stand.js';
import { testPostgresUrl } from '../helpers/postgres.js';
import { subscriptionRecord } from '../helpers/subscription-record.js';
import { until } from '../helpers/wait.js';

const { backends, postgresPair, sqlitePair } = storePairs('log_events');

/** `n` signatures made at once for `tenantId`, as the recorder writes their `signed` entries; their seqs. */
async function signAtOnce(store: Store, tenantId: string, n: number, from = 0): Promise<number[]> {
  const before = (await store.audit.read(0, 1_000_000)).length;
  for (let i = from; i < from + n; i++) {
    await store.audit.append({
      at: new Date().toISOString(),
      tenantId,
      actor: 'a1b2c3d4e5f60718',
      action: i % 2 === 0 ? 'sign' : 'pkcs11_sign',
      outcome: 'signed',
      details: {
        key_id: 'e2c1b0a9-8f7e-4d6c-b5a4-938271605f4e',
        algorithm: 'ECDSA_SHA_256',
        hash: createHash('sha256').update(`${tenantId} ${i}`).digest('base64'),
        rule: 'default-allow',
        reason: 'no rule objected',
        key_store: 'pkcs11',
        signature_id: `sig-${tenantId}-${i}`,
        signature_sha256: '00'.repeat(32),
      },
    });
  }
  const all = await store.audit.read(0, 1_000_000);
  return all.slice(before).map((e) => e.seq);
}

const idOf = (seq: number) => `evt_log${seq}`;

describe.each(backends)('events read from the log on %s', (_name, open, enabled) => {
  it.skipIf(!enabled)("reads a tenant's entries after a cursor through audit_log_signed_at_once", async () => {
    const [store] = await open();
    // Some of the log first, so that PostgreSQL's planner has a table worth an index (it is analysed below).
    await signAtOnce(store, 'ix', 50);
    await signAtOnce(store, 'other', 50);
    const plan = (await store.events.explainLogRead('ix')).join('\n');
    expect(plan).toContain('audit_log_signed_at_once');
  });

  it.skipIf(!enabled)('delivers each entry once, in seq order, with the same id on a retry', async () => {
    const [store] = await open();
    await signAtOnce(store, 'lg', 2); // before the subscription: not its events
    await store.events.addSubscription(subscriptionRecord({ id: 'wh_log0000000000001', tenantId: 'lg' }));
    await store.events.addSubscription(
      subscriptionRecord({ id: 'wh_log0000000000002', tenantId: 'lg', eventKinds: ['key.rotated'] }),
    );
    const seqs = await signAtOnce(store, 'lg', 40, 2);
    await signAtOnce(store, 'other', 3); // another tenant's
    let failedOnce = false;
    const r = receiver((claim) => {
      if (claim.event.seq === seqs[5] && !failedOnce) {
        failedOnce = true;
        return { outcome: 'retry', status: 503, error: 'busy' };
      }
      return { outcome: 'delivered', status: 200 };
    });
    const { d, delivered } = dispatcher(store, r.deliver);
    d.start();
    await until('every entry delivered', () => (seqs.every((s) => delivered.has(idOf(s))) ? true : undefined));
    await d.stop();
    // Once each; the retried one under the same id, to the subscription that wants signature.signed only.
    expect([...delivered.values()].every((n) => n === 1)).toBe(true);
    expect([...delivered.keys()].sort()).toEqual(seqs.map(idOf).sort());
    const retried = r.attempts.filter((a) => a.id === idOf(seqs[5] as number));
    expect(retried.map((a) => a.id)).toEqual([idOf(seqs[5] as number), idOf(seqs[5] as number)]);
    // First attempts in seq order (the retry came after its own first attempt).
    const firsts = r.attempts.filter((a, i) => r.attempts.findIndex((b) => b.id === a.id) === i);
    expect(firsts.map((a) => a.id)).toEqual(seqs.map(idOf));
    for (const a of r.attempts) {
      expect(a.type).toBe('signature.signed');
      expect(eventDataProblem('signature.signed', a.data), JSON.stringify(a.data)).toBeUndefined();
      expect(a.data).toMatchObject({ tenant_id: 'lg', requester: { api_key_id: 'a1b2c3d4e5f60718' }, inputs: {} });
    }
    // Only the failed attempt kept a row (the outbox row and its delivery, now delivered).
    expect((await store.events.readEvents(0, 1000)).map((e) => e.id)).toEqual([idOf(seqs[5] as number)]);
    expect(await store.events.countPendingDeliveries()).toBe(0);
  });

  it.skipIf(!enabled)('gives a receiver that failed and recovered every event', async () => {
    const [store] = await open();
    await store.events.addSubscription(subscriptionRecord({ id: 'wh_log0000000000003', tenantId: 'rc' }));
    let up = false;
    const r = receiver(() =>
      up ? { outcome: 'delivered', status: 200 } : { outcome: 'retry', status: 500, error: 'down' },
    );
    const { d, delivered } = dispatcher(store, r.deliver);
    d.start();
    const first = await signAtOnce(store, 'rc', 5);
    await until('the receiver failing', () => (r.attempts.length >= 3 ? true : undefined));
    const later = await signAtOnce(store, 'rc', 20, 5);
    // While it fails, one attempt at a time: the later entries wait behind the retry, untried.
    expect(r.attempts.some((a) => later.includes(a.seq))).toBe(false);
    up = true;
    const all = [...first, ...later];
    await until('every event delivered', () => (all.every((s) => delivered.has(idOf(s))) ? true : undefined));
    await d.stop();
    expect([...delivered.keys()].sort()).toEqual(all.map(idOf).sort());
    expect([...delivered.values()].every((n) => n === 1)).toBe(true);
    expect((await store.events.getSubscription('wh_log0000000000003'))?.failingSince).toBeNull();
    expect(await store.events.countPendingDeliveries()).toBe(0);
  });

  it.skipIf(!enabled)('keeps a paused subscription at its cursor, and goes on from there when resumed', async () => {
    const [store] = await open();
    await store.events.addSubscription(subscriptionRecord({ id: 'wh_log0000000000004', tenantId: 'ps' }));
    const r = receiver();
    const { d, delivered } = dispatcher(store, r.deliver);
    const sent = await signAtOnce(store, 'ps', 3);
    await d.runOnce();
    expect([...delivered.keys()]).toEqual(sent.map(idOf));
    await store.events.pauseSubscription('wh_log0000000000004', 'paused by the test', new Date().toISOString());
    const kept = await signAtOnce(store, 'ps', 4, 3);
    expect(await d.runOnce()).toBe(0);
    expect(r.attempts).toHaveLength(3);
    expect(await store.events.countPendingDeliveries()).toBe(4);
    await store.events.resumeSubscription('wh_log0000000000004', new Date().toISOString());
    await d.runOnce();
    expect([...delivered.keys()]).toEqual([...sent, ...kept].map(idOf));
    expect(r.attempts).toHaveLength(7);
  });

  it.skipIf(!enabled)(
    'sends again, with the same ids, what an instance that died had sent but not recorded',
    async () => {
      const [store, other] = await open();
      await store.events.addSubscription(subscriptionRecord({ id: 'wh_log0000000000005', tenantId: 'kd' }));
      const seqs = await signAtOnce(store, 'kd', 6);
      // The first instance "dies" after the receiver's answers and before the cursor's move: its write is refused.
      const dying = dyingBeforeCursorMoves(store);
      const r = receiver();
      const first = dispatcher(dying, r.deliver, { leaseMs: 300 });
      await first.d.runOnce();
      await first.d.stop();
      expect(r.attempts.map((a) => a.id)).toEqual(seqs.map(idOf));
      // Its replacement (another owner) takes the cursor over once the dead one's lease ran out.
      const second = dispatcher(other, r.deliver, { leaseMs: 300 });
      second.d.start();
      await until('every entry delivered by the replacement', () =>
        seqs.every((s) => second.delivered.has(idOf(s))) ? true : undefined,
      );
      await second.d.stop();
      // At least once: each twice, under the same id; none lost, none a third time.
      expect(attemptsPerId(r.attempts)).toEqual(seqs.map((s) => [idOf(s), 2]));
    },
  );
});

describe('attempts in flight for a backlog read from the log', () => {
  it('a subscription whose last read was delivered in full gets 4 x perSubscription in flight for the next', async () => {
    const [store] = await sqlitePair();
    await store.events.addSubscription(subscriptionRecord({ id: 'wh_log0000000000010', tenantId: 'fl' }));
    // A receiver that holds every attempt until the test lets it go: how many are in flight at once is then the
    // dispatcher's limit, not a race with the answers.
    let inFlight = 0;
    let most = 0;
    let started = 0;
    const waiting: Array<() => void> = [];
    const deliver: Deliver = async () => {
      inFlight++;
      started++;
      most = Math.max(most, inFlight);
      await new Promise<void>((resolve) => waiting.push(resolve));
      inFlight--;
      return { outcome: 'delivered', status: 200 };
    };
    const releaseAll = () => {
      for (const release of waiting.splice(0)) release();
    };
    const turn = () => new Promise((resolve) => setImmediate(resolve));
    const { d, delivered } = dispatcher(store, deliver, { perSubscription: 2, logBatch: 8 });
    const first = await signAtOnce(store, 'fl', 8);
    d.start();
    try {
      // The first read: 2 at a time, released one by one (each slot refilled from the same read), up to its 8th
      // attempt, which is held while the next entries are written: the next read then finds all of them.
      await until('2 attempts in flight', () => (inFlight === 2 ? true : undefined));
      while (started < 8) {
        if (waiting.length === 2) waiting.shift()?.();
        await turn();
      }
      // Every attempt of the first read has started: the most it had in flight at once.
      const mostInFirstRead = most;
      const second = await signAtOnce(store, 'fl', 16, 8);
      releaseAll();
      await until('the first read delivered', () =>
        first.every((seq) => delivered.has(idOf(seq))) ? true : undefined,
      );
      expect(mostInFirstRead).toBe(2);
      // Delivered in full: the next read has 8 (4 x 2) in flight at once.
      await until('8 attempts in flight', () => (inFlight === 8 ? true : undefined));
      while (!second.every((seq) => delivered.has(idOf(seq)))) {
        releaseAll();
        await turn();
      }
      expect(most).toBe(8);
    } finally {
      releaseAll();
      await d.stop();
    }
  });
});

describe.skipIf(testPostgresUrl() === undefined)('events read from the log, two instances on PostgreSQL', () => {
  it('delivers each entry once between them', async () => {
    const [a, b] = await postgresPair();
    await a.events.addSubscription(subscriptionRecord({ id: 'wh_log0000000000006', tenantId: 'two' }));
    await a.events.addSubscription(subscriptionRecord({ id: 'wh_log0000000000007', tenantId: 'two' }));
    const r = receiver();
    const one = dispatcher(a, r.deliver);
    const two = dispatcher(b, r.deliver);
    one.d.start();
    two.d.start();
    const seqs = [...(await signAtOnce(a, 'two', 60)), ...(await signAtOnce(b, 'two', 60, 60))];
    await until('every entry delivered to both subscriptions', async () =>
      (await a.events.countPendingDeliveries()) === 0 ? true : undefined,
    );
    await one.d.stop();
    await two.d.stop();
    // Each subscription got each entry's event exactly once, from one instance or the other.
    const times = new Map<string, number>();
    for (const x of r.attempts) times.set(`${x.to} ${x.id}`, (times.get(`${x.to} ${x.id}`) ?? 0) + 1);
    const expected = ['wh_log0000000000006', 'wh_log0000000000007'].flatMap((to) =>
      seqs.map((s) => `${to} ${idOf(s)}`),
    );
    expect([...times.keys()].sort()).toEqual(expected.sort());
    expect([...times.values()].every((n) => n === 1)).toBe(true);
  });
});
