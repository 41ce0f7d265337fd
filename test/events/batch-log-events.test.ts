// Issue 46: signature.signed of each signature of a batch made at once (`sign_batch`: one `signed` entry, its items
// in batch_items) is read from the audit log under the subscription's cursor, as a signature made at once is
// (test/events/log-events.test.ts), not copied into the outbox once per signature. The real dispatcher and store on
// SQLite and PostgreSQL, the batches recorded as the signing service records them (store.signatures.recordBatch),
// with a receiver standing in for the sender: each item is delivered once, in item order, under an id made from
// (seq, item) and with the data the outbox row held (signature_id `<entry's signature_id>.<index>`, the item's
// digest); the cursor stops inside a batch and goes on from there; a receiver failing at item 37 of 100 and then
// recovering gets every item, in order, the failed one again under the same id; an instance that dies before the
// cursor's move has the items sent again with the same ids; two instances on PostgreSQL deliver each item once.
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { eventDataProblem } from '../../src/events/event-schemas.js';
import type { Store } from '../../src/store/store.js';
import { attemptsPerId, dispatcher, dyingBeforeCursorMoves, receiver, storePairs } from '../helpers/event-stand.js';
import { testPostgresUrl } from '../helpers/postgres.js';
import { subscriptionRecord } from '../helpers/subscription-record.js';
import { until } from '../helpers/wait.js';

const { backends, postgresPair } = storePairs('batch_log_events');

/** One event the test expects: its id, its signature_id and its digest. */
interface Told {
  id: string;
  signatureId: string;
  digest: string;
}

const digestOf = (text: string) => createHash('sha256').update(text).digest();

/**
 * A batch of `n` signatures made at once, recorded as recordBatch records it (one entry, its items; failed digests
 * absent: `skip`); the events it should give, in item order.
 */
async function signBatch(
  store: Store,
  tenantId: string,
  name: string,
  n: number,
  skip: number[] = [],
): Promise<Told[]> {
  const items = Array.from({ length: n }, (_, index) => index)
    .filter((index) => !skip.includes(index))
    .map((index) => ({
      index,
      digest: digestOf(`${name} ${index}`),
      signatureSha256: digestOf(`sig ${name} ${index}`),
    }));
  const seq = await store.signatures.recordBatch(
    {
      at: new Date().toISOString(),
      tenantId,
      actor: 'a1b2c3d4e5f60718',
      action: 'sign_batch',
      outcome: 'signed',
      details: {
        key_id: 'e2c1b0a9-8f7e-4d6c-b5a4-938271605f4e',
        algorithm: 'ECDSA_SHA_256',
        rule: 'default-allow',
        reason: 'no rule objected',
        event_inputs: { project: 'acme/app', environment: 'staging' },
        batch: { id: name, size: n, signed: items.length, root: '' },
        key_store: 'pkcs11',
        signature_id: `batch-${name}`,
      },
    },
    items,
    [],
  );
  if (seq === undefined) throw new Error('the store answered no seq');
  return items.map((item) => ({
    id: `evt_log${seq}i${item.index}`,
    signatureId: `batch-${name}.${item.index}`,
    digest: item.digest.toString('base64'),
  }));
}

/** One signature made at once (`sign`): its entry, and the event it should give. */
async function signOne(store: Store, tenantId: string, name: string): Promise<Told> {
  const digest = digestOf(name).toString('base64');
  await store.audit.append({
    at: new Date().toISOString(),
    tenantId,
    actor: 'a1b2c3d4e5f60718',
    action: 'sign',
    outcome: 'signed',
    details: {
      key_id: 'e2c1b0a9-8f7e-4d6c-b5a4-938271605f4e',
      algorithm: 'ECDSA_SHA_256',
      hash: digest,
      rule: 'default-allow',
      reason: 'no rule objected',
      key_store: 'pkcs11',
      signature_id: `one-${name}`,
      signature_sha256: '00'.repeat(32),
    },
  });
  const seq = (await store.audit.read(0, 1_000_000)).at(-1)?.seq;
  return { id: `evt_log${seq}`, signatureId: `one-${name}`, digest };
}

/** Each id once, in the order of its first appearance. */
const firstsOf = (ids: string[]) => ids.filter((id, i) => ids.indexOf(id) === i);

describe.each(backends)('batches read from the log on %s', (_name, open, enabled) => {
  it.skipIf(!enabled)('reads batch entries through audit_log_signed_at_once', async () => {
    const [store] = await open();
    for (let i = 0; i < 20; i++) await signBatch(store, 'ix', `ix${i}`, 3);
    await signOne(store, 'other', 'o');
    expect((await store.events.explainLogRead('ix')).join('\n')).toContain('audit_log_signed_at_once');
  });

  it.skipIf(!enabled)(
    "delivers each item once, in item order, with the outbox's data, a lease stopping inside batches",
    async () => {
      const [store] = await open();
      await signBatch(store, 'bt', 'before', 4); // before the subscription: not its events
      await store.events.addSubscription(subscriptionRecord({ id: 'wh_blg0000000000001', tenantId: 'bt' }));
      const told = [
        ...(await signBatch(store, 'bt', 'a', 10)),
        await signOne(store, 'bt', 'between'),
        ...(await signBatch(store, 'bt', 'b', 6, [2, 4])), // digests 2 and 4 failed at the key store
        ...(await signBatch(store, 'bt', 'c', 1)),
      ];
      await signBatch(store, 'other', 'x', 5); // another tenant's
      const r = receiver();
      // Seven events a lease: the cursor stops inside batch a, then inside batch b.
      const { d, delivered } = dispatcher(store, r.deliver, { logBatch: 7, perSubscription: 1 });
      d.start();
      await until('every event delivered', () => (told.every((t) => delivered.has(t.id)) ? true : undefined));
      await d.stop();
      expect(r.attempts.map((a) => a.id)).toEqual(told.map((t) => t.id));
      expect([...delivered.values()].every((n) => n === 1)).toBe(true);
      for (const [i, a] of r.attempts.entries()) {
        expect(eventDataProblem('signature.signed', a.data), JSON.stringify(a.data)).toBeUndefined();
        expect(a.data).toMatchObject({
          tenant_id: 'bt',
          signature_id: told[i]?.signatureId,
          digest: told[i]?.digest,
          requester: { api_key_id: 'a1b2c3d4e5f60718' },
        });
      }
      expect(r.attempts[0]?.data.inputs).toEqual({ project: 'acme/app', environment: 'staging' });
      // Nothing kept: no outbox row, no delivery row, nothing left behind the cursor.
      expect(await store.events.readEvents(0, 1000)).toEqual([]);
      expect(await store.events.countPendingDeliveries()).toBe(0);
    },
  );

  it.skipIf(!enabled)(
    'gives a receiver failing at item 37 of 100 every item in order once it recovers, the failed one under its id',
    async () => {
      const [store] = await open();
      await store.events.addSubscription(subscriptionRecord({ id: 'wh_blg0000000000002', tenantId: 'mf' }));
      const told = [...(await signBatch(store, 'mf', 'big', 100)), await signOne(store, 'mf', 'after')];
      const failing = told[37]?.id;
      let up = false;
      const r = receiver((claim) =>
        claim.event.id === failing && !up
          ? { outcome: 'retry', status: 503, error: 'busy' }
          : { outcome: 'delivered', status: 200 },
      );
      const { d, delivered } = dispatcher(store, r.deliver, { perSubscription: 1 });
      d.start();
      await until('item 37 tried three times', () =>
        r.attempts.filter((a) => a.id === failing).length >= 3 ? true : undefined,
      );
      // While item 37 fails, the items after it wait behind its retries, untried.
      expect(firstsOf(r.attempts.map((a) => a.id))).toEqual(told.slice(0, 38).map((t) => t.id));
      expect(await store.events.countPendingDeliveries()).toBeGreaterThan(0);
      up = true;
      await until('every event delivered', () => (told.every((t) => delivered.has(t.id)) ? true : undefined));
      await d.stop();
      // Delivered in item order, each once; the failed item's attempts all under one id.
      expect(r.attempts.filter((a) => a.delivered).map((a) => a.id)).toEqual(told.map((t) => t.id));
      expect([...delivered.values()].every((n) => n === 1)).toBe(true);
      expect(await store.events.countPendingDeliveries()).toBe(0);
      // Only the failed attempt kept a row.
      expect((await store.events.readEvents(0, 1000)).map((e) => e.id)).toEqual([failing]);
    },
  );

  it.skipIf(!enabled)(
    'sends again, with the same ids, the items an instance that died had sent but not recorded',
    async () => {
      const [store, other] = await open();
      await store.events.addSubscription(subscriptionRecord({ id: 'wh_blg0000000000003', tenantId: 'kd' }));
      const told = await signBatch(store, 'kd', 'dies', 12);
      const dying = dyingBeforeCursorMoves(store);
      const r = receiver();
      const first = dispatcher(dying, r.deliver, { leaseMs: 300, logBatch: 5 });
      await first.d.runOnce();
      await first.d.stop();
      expect(r.attempts.map((a) => a.id)).toEqual(told.slice(0, 5).map((t) => t.id));
      const second = dispatcher(other, r.deliver, { leaseMs: 300, logBatch: 5 });
      second.d.start();
      await until('every item delivered by the replacement', () =>
        told.every((t) => second.delivered.has(t.id)) ? true : undefined,
      );
      await second.d.stop();
      expect(attemptsPerId(r.attempts)).toEqual(told.map((t, i) => [t.id, i < 5 ? 2 : 1]));
    },
  );
});

describe.skipIf(testPostgresUrl() === undefined)('batches read from the log, two instances on PostgreSQL', () => {
  it('delivers each item once between them', async () => {
    const [a, b] = await postgresPair();
    await a.events.addSubscription(subscriptionRecord({ id: 'wh_blg0000000000004', tenantId: 'two' }));
    await a.events.addSubscription(subscriptionRecord({ id: 'wh_blg0000000000005', tenantId: 'two' }));
    const r = receiver();
    const settings = { logBatch: 16 };
    const one = dispatcher(a, r.deliver, settings);
    const two = dispatcher(b, r.deliver, settings);
    one.d.start();
    two.d.start();
    const told: Told[] = [];
    for (let i = 0; i < 6; i++) {
      told.push(...(await signBatch(i % 2 === 0 ? a : b, 'two', `p${i}`, 25)));
      told.push(await signOne(i % 2 === 0 ? b : a, 'two', `q${i}`));
    }
    await until('every item delivered to both subscriptions', async () =>
      (await a.events.countPendingDeliveries()) === 0 ? true : undefined,
    );
    await one.d.stop();
    await two.d.stop();
    const times = new Map<string, number>();
    for (const x of r.attempts) times.set(`${x.to} ${x.id}`, (times.get(`${x.to} ${x.id}`) ?? 0) + 1);
    const expected = ['wh_blg0000000000004', 'wh_blg0000000000005'].flatMap((to) => told.map((t) => `${to} ${t.id}`));
    expect([...times.keys()].sort()).toEqual(expected.sort());
    expect([...times.values()].every((n) => n === 1)).toBe(true);
  });
});
