// Issue 44: a failing receiver is spared. A receiver answering 500 for minutes used to get every new event's first
// attempt as soon as it was written (28 a second on average, 85 at peak), one after the other; docs/events.md
// ("Failing") promises it the retry schedule only. One service (SQLite, or PostgreSQL with
// SIGNBRIDGE_TEST_STORE=postgres) with the real dispatcher and sender, and a real receiver on 127.0.0.1 that answers
// 500 to everything and counts the requests it has open at once. Events are made steadily (signatures, and key
// rotations, which are ordered) while it fails; then it recovers and everything arrives, once, rotations in order.
// Nothing here depends on the machine's speed: the test counts attempts and compares them with what the retry
// schedule allows in the time that actually went by (a retry never comes early, so a slow machine only makes fewer).
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { destinations } from '../../src/events/destinations.js';
import { addSubscription } from '../../src/events/subscription-service.js';
import { checkSubscriptionUrl } from '../../src/events/webhook-sender.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';
import { until } from '../helpers/wait.js';
import { type Attempt, WebhookReceiver } from '../helpers/webhook-receiver.js';

const RETRY_BASE_MS = 100;
const webhooks = { allow: ['127.0.0.1'], timeoutMs: 5000 };
const SIGNATURES = 60;
const ROTATE_EVERY = 15;

let svc: TestService;
const receiver = new WebhookReceiver();
let subscriptionId: string;
let signer: string;
let admin: string;

beforeAll(async () => {
  await receiver.start();
  svc = await startTestService({
    eventDelivery: {
      deliver: (claim) => destinations(svc.store, { webhooks })(claim),
      settings: {
        pollMs: 25,
        idlePollMaxMs: 200,
        retryBaseMs: RETRY_BASE_MS,
        // No cap within the test: the bound below is the plain doubling.
        retryMaxMs: 3600_000,
        leaseMs: 10_000,
        pauseAfterFailingMs: 3600_000,
      },
    },
  });
  expect(
    (await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'fr', key_spec: 'ECC_NIST_P256' })).status,
  ).toBe(201);
  signer = await svc.apiKey('signer', 'fr');
  admin = await svc.apiKey('admin', 'fr');
  const { subscription, secret } = await addSubscription(
    svc.store,
    { tenantId: 'fr', url: receiver.url, format: 'standard', eventKinds: ['signature.signed', 'key.rotated'] },
    { actor: 'test', via: 'cli' },
    async (url) => {
      const checked = await checkSubscriptionUrl(url, webhooks);
      return checked.ok ? undefined : checked.error;
    },
  );
  subscriptionId = subscription.id;
  receiver.secret = secret ?? undefined;
}, 60_000);
afterAll(async () => {
  await svc?.close();
  await receiver.stop();
});

async function sign(n: number): Promise<void> {
  const res = await callAction(svc.app, signer, 'sign', {
    tenant_id: 'fr',
    algorithm: 'ECDSA_SHA_256',
    hash: createHash('sha256').update(`failing receiver ${n}`).digest('base64'),
  });
  expect(res.status).toBe(200);
}

async function rotate(): Promise<string> {
  const res = await callAction(svc.app, admin, 'rotate_key', { tenant_id: 'fr' });
  expect(res.status).toBe(200);
  return res.body.key_id as string;
}

/**
 * The most attempts of one delivery the retry schedule allows within `spanMs` of its first: retry i waits at least
 * half of RETRY_BASE_MS * 2^(i-1) (equal jitter), so k attempts take at least RETRY_BASE_MS/2 * (2^(k-1) - 1).
 * One more for the milliseconds between the dispatcher's clock and the receiver's.
 */
function attemptsAllowed(spanMs: number): number {
  return 1 + Math.floor(Math.log2((2 * spanMs) / RETRY_BASE_MS + 1)) + 1;
}

describe('a receiver that keeps failing gets the retry schedule, not every new event', () => {
  it('holds new events behind the retry with one attempt in flight, then delivers all once it recovers', async () => {
    receiver.answerAll = { status: 500 };
    await sign(0);
    await until('the subscription to be failing', async () =>
      (await svc.store.events.getSubscription(subscriptionId))?.failingSince ? true : undefined,
    );
    const [first] = receiver.attempts;
    if (!first) throw new Error('no first attempt');

    // Events keep coming while it fails: signatures, and now and then a rotation (their order is promised).
    const rotations: string[] = [];
    for (let n = 1; n <= SIGNATURES; n++) {
      await sign(n);
      if (n % ROTATE_EVERY === 0) rotations.push(await rotate());
    }
    // Let the retry schedule run a few steps after the last event, so that a pass had every chance to send more.
    await until('the first event to be retried three times', () =>
      receiver.attempts.filter((a) => a.id === first.id).length >= 4 ? true : undefined,
    );
    const whileFailing: Attempt[] = [...receiver.attempts];
    const spanMs = (whileFailing.at(-1)?.at ?? first.at) - first.at;

    // Only the first event was tried: the others waited behind its retry, and one request at a time was open.
    expect(new Set(whileFailing.map((a) => a.id))).toEqual(new Set([first.id]));
    expect(receiver.maxInFlight).toBe(1);
    expect(whileFailing.length).toBeLessThanOrEqual(attemptsAllowed(spanMs));
    expect(whileFailing.length).toBeLessThan(1 + SIGNATURES + rotations.length);

    // It recovers: the retry gets through, and everything held is delivered once.
    receiver.answerAll = undefined;
    const expected = 1 + SIGNATURES + rotations.length;
    // Issue 46: the signatures' events are read from the log, and only the failed one kept a delivery row.
    await until('every event delivered', async () =>
      receiver.delivered().size === expected && (await svc.store.events.countPendingDeliveries()) === 0
        ? true
        : undefined,
    );
    const delivered = receiver.delivered();
    const rows = await svc.store.events.listDeliveries(subscriptionId, 1000);
    expect(rows.every((d) => d.status === 'delivered')).toBe(true);
    expect(new Set(rows.map((d) => d.eventId)).has(first.id)).toBe(true);
    expect([...delivered.values()].every((n) => n === 1)).toBe(true);
    expect(receiver.attempts.every((a) => a.signatureValid)).toBe(true);
    const rotated = receiver.attempts
      .filter((a) => a.status === 200 && a.type === 'key.rotated')
      .map((a) => (a.body.data as Record<string, unknown>).key_id);
    expect(rotated).toEqual(rotations);
  });

  it('sends what it held once the retry is given up without another (a 4xx), so nothing waits for ever', async () => {
    const before = receiver.attempts.length;
    receiver.maxInFlight = 0;
    receiver.answerAll = { status: 500 };
    await sign(1000);
    await until('the subscription to be failing', async () =>
      (await svc.store.events.getSubscription(subscriptionId))?.failingSince ? true : undefined,
    );
    const head = receiver.attempts[before];
    if (!head) throw new Error('no attempt');
    for (let n = 1001; n <= 1003; n++) await sign(n);
    // The receiver now refuses outright: the retry is given up, and no retry is left for the others to wait for.
    receiver.answerAll = { status: 400 };
    const deliveries = await until('every delivery to be given up', async () => {
      const all = await svc.store.events.listDeliveries(subscriptionId, 4);
      return all.length === 4 && all.every((d) => d.status === 'failed') ? all : undefined;
    });
    const attempted = new Set(receiver.attempts.slice(before).map((a) => a.id));
    expect(attempted).toEqual(new Set(deliveries.map((d) => d.eventId)));
    expect(
      receiver.attempts
        .slice(before)
        .filter((a) => a.id === head.id)
        .map((a) => a.status),
    ).toEqual(expect.arrayContaining([500, 400]));
    expect(receiver.maxInFlight).toBe(1);
    receiver.answerAll = undefined;
  });
});
