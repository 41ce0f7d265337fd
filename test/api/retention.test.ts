// Issue 31, "Bytes": the pruner deletes what the contract lets go and nothing else (docs/deployment.md, "Retention").
// The real service (SQLite, or PostgreSQL with SIGNBRIDGE_TEST_STORE=postgres) with the approval policy, the
// transparency log and a controlled clock; the pruner's passes are run by the test (its timer never fires here).
// - The outbox, driven through the store's own delivery calls with explicit times: finished deliveries and events
//   whose deliveries are all finished go once the retry window has passed; rows inside the window, pending
//   deliveries, the events they belong to and events not fanned out yet stay, and order keys still hold afterwards.
//   Two instances pruning the same rows at once delete each row once.
// - Signing requests: a request decided within the retry window of approvals stays (also when the retention setting
//   is shorter: the window wins, and so do the 24 hours an idempotent replay names the request), so a retried `sign`
//   still gets its outcome after a prune pass; a waiting request stays however old it is; a decided one goes after
//   the window. Idempotency records go after their 24 hours.
// - The audit chain still verifies, and inclusion proofs of signatures made before pruning still verify, after it.
import { createHash } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IDEMPOTENCY_LIFETIME_MS } from '../../src/api/idempotency.js';
import { parsePolicyDocument } from '../../src/policy/policy-file.js';
import { RulesPolicyEngine } from '../../src/policy/rules-engine.js';
import { type PruneCounts, Pruner } from '../../src/retention/pruner.js';
import { RETENTION_DEFAULTS } from '../../src/retention/retention-settings.js';
import { verifyAuditChain } from '../../src/store/audit/verify-chain.js';
import type { DeliveryClaim, SubscriptionRecord } from '../../src/store/events/event-store.js';
import type { EventInput } from '../../src/store/records/event-kinds.js';
import { logGet, parseVkey, publishCheckpoint, verifyCheckpoint } from '../helpers/log-client.js';
import { refVerifyInclusion } from '../helpers/rfc9162-verify.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';
import { subscriptionRecord } from '../helpers/subscription-record.js';
import { until } from '../helpers/wait.js';

const HOUR = 3600_000;
const MINUTE = 60_000;
/** The service's clock; event rows take explicit times, so it starts at the real time and only moves on. */
let clock = Date.now();
const policy = new RulesPolicyEngine(
  parsePolicyDocument('version: 1\nrules:\n  environments:\n    requireApproval: [production]\n', 'retention'),
);
/** Retention settings shorter than the contract's floors: the test shows the floors win. */
const RETENTION = { requestsMs: MINUTE, batchRows: 10, intervalMs: 24 * HOUR };

let svc: TestService;
let pruner: Pruner;
let operator: string;

beforeAll(async () => {
  svc = await startTestService({
    policy,
    now: () => new Date(clock),
    // Waiting requests outlive every jump of the clock below: only their being decided ends them here.
    approvalLifetimeMs: 365 * 24 * HOUR,
    retention: RETENTION,
    log: { checkpointEveryEntries: 1_000_000, checkpointEverySeconds: 3600, public: false, intervalMs: 20 },
  });
  pruner = svc.app.pruner as Pruner;
  operator = svc.operator;
  for (const tenant of ['rq', 'other']) {
    const made = await callAction(svc.app, operator, 'create_tenant', { tenant_id: tenant, key_spec: 'ECC_NIST_P256' });
    expect(made.status).toBe(201);
  }
}, 60_000);
afterAll(async () => svc?.close());

const iso = (ms: number) => new Date(ms).toISOString();
/** What the dispatcher asks of the store: each of the test's two subscriptions, any number of its deliveries. */
const BOTH_SUBSCRIPTIONS = [
  { subscriptionId: 's1', limit: 1000 },
  { subscriptionId: 's2', limit: 1000 },
];

describe('pruning the outbox', () => {
  const event = (tenant: string, n: number, orderKey?: string): EventInput => ({
    type: 'key.rotated',
    data: { tenant_id: tenant, n },
    ...(orderKey !== undefined && { orderKey }),
  });
  const subscription = (id: string): SubscriptionRecord =>
    subscriptionRecord({ id, tenantId: 'ob', createdAt: iso(clock) });
  /** Events of tenant `ob` (and of `nobody`, which has no subscription) by their data's n. */
  const events = async () =>
    (
      await svc.run<{ seq: number; data: string; fanned_out: number }>(
        sql`SELECT seq, data, fanned_out FROM event_outbox WHERE tenant_id IN ('ob', 'nobody') ORDER BY seq`,
      )
    ).map((r) => (JSON.parse(r.data) as { n: number }).n);
  /** Deliveries as "n/subscription:status", in seq order. */
  const deliveries = async () =>
    (
      await svc.run<{ data: string; subscription_id: string; status: string }>(
        sql`SELECT e.data, d.subscription_id, d.status FROM event_deliveries d
            JOIN event_outbox e ON e.seq = d.event_seq WHERE e.tenant_id = 'ob' ORDER BY d.event_seq, d.subscription_id`,
      )
    ).map((r) => `${(JSON.parse(r.data) as { n: number }).n}/${r.subscription_id}:${r.status}`);
  const nOf = (claim: DeliveryClaim) => (claim.event.data as unknown as { n: number }).n;

  // Written 30 h before `now`: 1 and 2 finished (delivered; delivered and failed), 3 with one delivery waiting for a
  // retry, 6 behind 3 on the same order key, 10-34 delivered (several batches of 10), 5 of a tenant with no
  // subscription (fanned out to none), 4 written after the fan-out (not fanned out yet). 100: delivered an hour ago.
  let now = 0;
  const BULK = Array.from({ length: 25 }, (_, i) => 10 + i);
  beforeAll(async () => {
    now = clock;
    const old = now - 30 * HOUR;
    const store = svc.store.events;
    await store.addSubscription(subscription('s1'));
    await store.addSubscription(subscription('s2'));
    await store.appendEvents(
      [
        event('ob', 1),
        event('ob', 2),
        event('ob', 3, 'req-x'),
        event('ob', 6, 'req-x'),
        ...BULK.map((n) => event('ob', n)),
      ],
      iso(old),
    );
    await store.appendEvents([event('nobody', 5)], iso(old));
    await store.appendEvents([event('ob', 100)], iso(now - HOUR));
    while ((await store.fanOut(200, iso(old))) > 0) {
      // every event so far fanned out
    }
    await store.appendEvents([event('ob', 4)], iso(old));
    for (const at of [old + MINUTE, old + 2 * MINUTE]) {
      for (const claim of await store.claimDeliveries('test', iso(at), iso(at + MINUTE / 2), BOTH_SUBSCRIPTIONS)) {
        const n = nOf(claim);
        if (n === 3 && claim.subscription.id === 's2') {
          await store.markFailedAttempt(claim, { status: 500, error: 'down', retryAt: iso(now + HOUR) }, iso(at));
        } else if (n === 2 && claim.subscription.id === 's2') {
          await store.markFailedAttempt(claim, { status: 410, error: 'gone', retryAt: null }, iso(at));
        } else if (n === 100) {
        } else {
          await store.markDelivered(claim, 200, iso(at));
        }
      }
    }
    for (const claim of await store.claimDeliveries('test', iso(now - HOUR), iso(now), BOTH_SUBSCRIPTIONS)) {
      await store.markDelivered(claim, 200, iso(now - HOUR));
    }
    const before = await deliveries();
    expect(before).toContain('3/s2:pending');
    expect(before).toContain('6/s2:pending');
    expect(before).toContain('2/s2:failed');
    expect(before).toContain('100/s2:delivered');
    expect(before.filter((d) => d.endsWith(':pending'))).toEqual(['3/s2:pending', '6/s2:pending']);
  });

  it('keeps everything while the retry window lasts', async () => {
    const rows = [await events(), await deliveries()];
    clock = now - 30 * HOUR + 23 * HOUR;
    const counts = await pruner.runOnce();
    expect(counts.events + counts.deliveries).toBe(0);
    expect([await events(), await deliveries()]).toEqual(rows);
  });

  it('after the window deletes finished deliveries and events whose deliveries all finished, nothing else', async () => {
    clock = now;
    const counts = await pruner.runOnce();
    // Deliveries: 1 (2), 2 (2: delivered and failed), 3 and 6 (their delivered one each), 25 x 2 in bulk.
    expect(counts.deliveries).toBeGreaterThanOrEqual(2 + 2 + 1 + 1 + 50);
    expect(await deliveries()).toEqual(['3/s2:pending', '6/s2:pending', '100/s1:delivered', '100/s2:delivered']);
    // Events: 1, 2, the bulk and the one fanned out to no subscription go; 3 and 6 (a delivery pending), 100
    // (inside the window) and 4 (not fanned out) stay.
    expect(await events()).toEqual([3, 6, 100, 4]);
    expect(counts.events).toBeGreaterThanOrEqual(2 + 25 + 1);
  });

  it('leaves order keys working: the pending delivery behind another still waits for it, then goes too', async () => {
    const store = svc.store.events;
    // Retry time of 3's delivery has come; 6 has the same order key and waits behind it.
    const first = await store.claimDeliveries('test', iso(now + 2 * HOUR), iso(now + 3 * HOUR), BOTH_SUBSCRIPTIONS);
    expect(first.map((c) => `${nOf(c)}/${c.subscription.id}`)).toEqual(['3/s2']);
    await store.markDelivered(first[0] as DeliveryClaim, 200, iso(now + 2 * HOUR));
    const second = await store.claimDeliveries('test', iso(now + 2 * HOUR), iso(now + 3 * HOUR), BOTH_SUBSCRIPTIONS);
    expect(second.map((c) => `${nOf(c)}/${c.subscription.id}`)).toEqual(['6/s2']);
    await store.markDelivered(second[0] as DeliveryClaim, 200, iso(now + 2 * HOUR));
    clock = now + 2 * HOUR;
    await pruner.runOnce();
    // All their deliveries finished and the window long past: 3 and 6 go; 100 (an hour into its window) stays.
    expect(await events()).toEqual([100, 4]);
    expect(await deliveries()).toEqual(['100/s1:delivered', '100/s2:delivered']);
  });

  it('two instances pruning the same rows at once delete each row once, in bounded batches', async () => {
    const store = svc.store.events;
    const at = clock - 48 * HOUR;
    const many = Array.from({ length: 120 }, (_, i) => event('ob', 1000 + i));
    await store.appendEvents(many, iso(at));
    while ((await store.fanOut(200, iso(at))) > 0) {
      // fanned out
    }
    for (;;) {
      const claims = await store.claimDeliveries('test', iso(at), iso(at + MINUTE), BOTH_SUBSCRIPTIONS);
      if (claims.length === 0) break;
      for (const claim of claims) await store.markDelivered(claim, 200, iso(at));
    }
    const other = await svc.openSameStore();
    try {
      const settings = { ...RETENTION_DEFAULTS, ...RETENTION };
      const floors = { retryForMs: 24 * HOUR, approvalRetryWindowMs: 10 * MINUTE, idempotencyLifetimeMs: 24 * HOUR };
      const second = new Pruner(other.background(), { settings, floors, now: () => new Date(clock) });
      const results: PruneCounts[] = await Promise.all([pruner.runOnce(), second.runOnce()]);
      // On PostgreSQL each skips the rows the other holds: what both skipped goes in the next pass.
      results.push(await pruner.runOnce());
      const total = (k: keyof PruneCounts) => results.reduce((sum, r) => sum + r[k], 0);
      // The 120, and 4: this fan-out took it too, and its deliveries were made with the rest.
      expect(total('events')).toBe(121);
      expect(total('deliveries')).toBe(242);
      expect(await events()).toEqual([100]);
    } finally {
      await other.close();
    }
  });
});

describe('the pruner on its own timer', () => {
  it('prunes by itself every interval, tells what it deleted, and stops when asked', async () => {
    const store = svc.store.events;
    const at = clock - 48 * HOUR;
    await store.appendEvents([{ type: 'key.rotated', data: { tenant_id: 'timer', n: 1 } }], iso(at));
    while ((await store.fanOut(200, iso(at))) > 0) {
      // fanned out (to no subscription: tenant `timer` has none)
    }
    const told: PruneCounts[] = [];
    const timed = new Pruner(svc.store.background(), {
      settings: { ...RETENTION_DEFAULTS, intervalMs: 20 },
      floors: { retryForMs: 24 * HOUR, approvalRetryWindowMs: 10 * MINUTE, idempotencyLifetimeMs: 24 * HOUR },
      now: () => new Date(clock),
      onPruned: (counts) => told.push(counts),
    });
    const left = async () =>
      Number(
        (await svc.run<{ n: number }>(sql`SELECT count(*) AS n FROM event_outbox WHERE tenant_id = 'timer'`))[0]?.n,
      );
    timed.start();
    try {
      await until('the timer pass', async () => ((await left()) === 0 ? true : undefined), 30_000);
    } finally {
      await timed.stop();
    }
    expect(told.reduce((n, c) => n + c.events, 0)).toBeGreaterThanOrEqual(1);
  });
});

describe('pruning signing requests and idempotency records', () => {
  const digestOf = (m: string) => createHash('sha256').update(m).digest('base64');
  const requester = () => svc.apiKey('signer', 'rq');
  let signer: string;
  let approver: string;
  /** The request that waits through every test here. */
  let waiting = '';
  beforeAll(async () => {
    signer = await requester();
    approver = await svc.apiKey('approver', 'rq');
  });
  const sign = (message: string, extra: Record<string, unknown> = { environment: 'production' }) =>
    callAction(svc.app, signer, 'sign', {
      tenant_id: 'rq',
      algorithm: 'ECDSA_SHA_256',
      hash: digestOf(message),
      ...extra,
    });
  const decide = (requestId: unknown, decision: 'approve' | 'reject') =>
    callAction(svc.app, approver, 'approve_sign', { tenant_id: 'rq', request_id: requestId, decision });
  const requestRows = async () =>
    (await svc.run<{ id: string }>(sql`SELECT id FROM pending_requests WHERE tenant_id = 'rq' ORDER BY id`)).map(
      (r) => r.id,
    );

  it('a retried sign within the retry window still continues its request after a prune pass', async () => {
    waiting = (await sign('waits')).body.request_id as string;
    const rejected = (await sign('rejected')).body.request_id as string;
    expect((await decide(rejected, 'reject')).status).toBe(200);
    // 5 minutes on: past the retention setting (1 minute) but inside approvals.retryWindowMinutes (10) and the
    // 24 hours an Idempotency-Key replays the 202 that names the request.
    clock += 5 * MINUTE;
    expect((await pruner.runOnce()).requests).toBe(0);
    expect(await requestRows()).toEqual([waiting, rejected].sort());
    const again = await sign('rejected');
    expect(again.status, JSON.stringify(again.body)).toBe(403);
    expect(again.body).toMatchObject({ error: 'request_rejected', request_id: rejected });
    const stillWaiting = await sign('waits');
    expect(stillWaiting.status).toBe(202);
    expect(stillWaiting.body.request_id).toBe(waiting);
  });

  it('deletes decided requests once the window has passed; a waiting one stays however old', async () => {
    const approved = (await sign('approved')).body.request_id as string;
    expect((await decide(approved, 'approve')).status).toBe(200);
    // Past the retry window, not yet 24 hours: an idempotent replay may still name them.
    clock += 11 * MINUTE;
    expect((await pruner.runOnce()).requests).toBe(0);
    clock += IDEMPOTENCY_LIFETIME_MS;
    const counts = await pruner.runOnce();
    expect(counts.requests).toBe(2); // the rejected one and the approved one
    expect(await requestRows()).toEqual([waiting]);
    // Collecting a pruned request finds none; a retry now opens a new request, as after the window anyway.
    const collect = await sign('approved', { environment: 'production', request_id: approved });
    expect(collect.status).toBe(404);
    const retry = await sign('approved');
    expect(retry.status).toBe(202);
    expect(retry.body.request_id).not.toBe(approved);
    // Two months on, the waiting request is still there and a retry still continues it.
    clock += 60 * 24 * HOUR;
    await pruner.runOnce();
    expect(await requestRows()).toContain(waiting);
    const stillWaiting = await sign('waits');
    expect(stillWaiting.status).toBe(202);
    expect(stillWaiting.body.request_id).toBe(waiting);
  });

  it('forgets an Idempotency-Key after its 24 hours, not before', async () => {
    const once = () =>
      svc.app.inject({
        method: 'POST',
        url: '/v1/sign',
        headers: { authorization: `Bearer ${signer}`, 'idempotency-key': 'retention-k1' },
        payload: { action: 'sign', tenant_id: 'rq', algorithm: 'ECDSA_SHA_256', hash: digestOf('idem') },
      });
    const keyRows = async () =>
      (await svc.run<{ n: number }>(sql`SELECT count(*) AS n FROM sign_idempotency WHERE idem_key = 'retention-k1'`))[0]
        ?.n;
    const first = await once();
    expect(first.statusCode).toBe(200);
    clock += IDEMPOTENCY_LIFETIME_MS - HOUR;
    await pruner.runOnce();
    expect(Number(await keyRows())).toBe(1);
    const replay = await once();
    expect(replay.json().signature).toBe(first.json().signature);
    clock += 2 * HOUR;
    expect((await pruner.runOnce()).idempotencyKeys).toBeGreaterThanOrEqual(1);
    expect(Number(await keyRows())).toBe(0);
  });
});

describe('the audit log and the transparency log after pruning', () => {
  it('the chain still verifies and inclusion proofs of earlier signatures still verify', async () => {
    const signer = await svc.apiKey('signer', 'other');
    const signatures: Buffer[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await callAction(svc.app, signer, 'sign', {
        tenant_id: 'other',
        algorithm: 'ECDSA_SHA_256',
        hash: createHash('sha256').update(`kept ${i}`).digest('base64'),
      });
      expect(res.status).toBe(200);
      signatures.push(Buffer.from(res.body.signature as string, 'base64'));
    }
    const count = async (table: string) =>
      Number((await svc.run<{ n: number }>(sql`SELECT count(*) AS n FROM ${sql.table(table)}`))[0]?.n);
    const kept = ['audit_log', 'signatures', 'signature_lookups'];
    const before = await Promise.all(kept.map(count));
    clock += 400 * 24 * HOUR;
    await pruner.runOnce();
    expect(await Promise.all(kept.map(count))).toEqual(before);
    const chain = await verifyAuditChain(svc.store);
    expect(chain.problem).toBeUndefined();
    expect(chain.count).toBe(before[0]);

    const vkey = parseVkey((await logGet(svc.app, '/log/public-key', signer)).text);
    // The integrator runs on its own timer: publish once it has every entry.
    let checkpoint = verifyCheckpoint((await publishCheckpoint(svc.app, operator)).text, vkey);
    for (let tries = 0; checkpoint.size < (before[0] as number) && tries < 200; tries++) {
      await new Promise((r) => setTimeout(r, 25));
      checkpoint = verifyCheckpoint((await publishCheckpoint(svc.app, operator)).text, vkey);
    }
    expect(checkpoint.size).toBe(before[0]);
    for (const signature of signatures) {
      const sha = createHash('sha256').update(signature).digest('hex');
      const res = await logGet(svc.app, `/log/proof/inclusion?signature_sha256=${sha}`, signer);
      expect(res.status, res.text).toBe(200);
      const body = res.json();
      const proof = (body.proof as string[]).map((h) => Buffer.from(h, 'base64'));
      expect(body.tree_size).toBe(checkpoint.size);
      expect(
        refVerifyInclusion(Buffer.from(body.leaf_hash, 'base64'), body.index, checkpoint.size, proof, checkpoint.root),
      ).toBe(true);
    }
  });
});
