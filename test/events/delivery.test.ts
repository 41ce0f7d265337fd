// Event delivery end to end in one service (SQLite, the real dispatcher and sender): changes made through the API
// reach a real receiver on 127.0.0.1 (allowed by the operator, as webhooks.allow would), signed so the Standard
// Webhooks reference library accepts them, with data that follows each kind's schema. The receiver plays faults:
// 500 then 200, 429 with Retry-After, slow past the time-out, down then up, 410. Nothing is lost, nothing reaches
// a healthy receiver twice, retries wait at least their backoff, and a paused subscription resumes when asked.
// Times asserted are lower bounds only (a retry never comes early); nothing depends on how fast the machine is.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { destinations } from '../../src/events/destinations.js';
import type { Deliver } from '../../src/events/dispatcher.js';
import { eventDataProblem } from '../../src/events/event-schemas.js';
import { addSubscription } from '../../src/events/subscription-service.js';
import { checkSubscriptionUrl } from '../../src/events/webhook-sender.js';
import { ServiceMetrics } from '../../src/metrics/service-metrics.js';
import { parsePolicyDocument } from '../../src/policy/policy-file.js';
import { RulesPolicyEngine } from '../../src/policy/rules-engine.js';
import { parseExposition, sample } from '../helpers/metrics.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';
import { until, waitFor } from '../helpers/wait.js';
import { WebhookReceiver } from '../helpers/webhook-receiver.js';

const policy = new RulesPolicyEngine(
  parsePolicyDocument('version: 1\nrules:\n  environments:\n    requireApproval: [production]\n', 'events-policy'),
);
const RETRY_BASE_MS = 200;
const webhooks = { allow: ['127.0.0.1'], timeoutMs: 400 };

let svc: TestService;
let deliver: Deliver;
const receiver = new WebhookReceiver();
let subscriptionId: string;
let metrics: ServiceMetrics | undefined;
let admin: string;

beforeAll(async () => {
  await receiver.start();
  svc = await startTestService({
    policy,
    publicUrl: 'https://signbridge.example.test',
    eventDelivery: {
      deliver: (claim) => deliver(claim),
      settings: {
        pollMs: 25,
        idlePollMaxMs: 200,
        retryBaseMs: RETRY_BASE_MS,
        retryMaxMs: 2000,
        leaseMs: 10_000,
        pauseAfterFailingMs: 3600_000,
        onOutcome: (claim, result) => metrics?.eventDelivery(claim.subscription.format, result.outcome),
      },
      sweeps: { everyMs: 50 },
    },
  });
  deliver = destinations(svc.store, { webhooks });
  metrics = new ServiceMetrics({ store: svc.store, keyStore: svc.keyStores });
  await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'ev', key_spec: 'ECC_NIST_P256' });
  admin = await svc.apiKey('admin', 'ev');
  const { subscription, secret } = await addSubscription(
    svc.store,
    { tenantId: 'ev', url: receiver.url, format: 'standard', eventKinds: [] },
    { actor: 'test', via: 'cli' },
    async (url) => {
      const checked = await checkSubscriptionUrl(url, webhooks);
      return checked.ok ? undefined : checked.error;
    },
  );
  subscriptionId = subscription.id;
  receiver.secret = secret ?? undefined;
});
afterAll(async () => {
  await svc?.close();
  await receiver.stop();
});

const rotate = async () => {
  const res = await callAction(svc.app, admin, 'rotate_key', { tenant_id: 'ev' });
  expect(res.status).toBe(200);
  return res.body.key_id as string;
};

/** The attempts for the event of the key rotation that made `keyId`. */
const attemptsFor = (keyId: string) =>
  receiver.attempts.filter(
    (a) => (a.body.data as Record<string, unknown>).key_id === keyId && a.type === 'key.rotated',
  );

describe('event delivery to a Standard Webhooks receiver', () => {
  it('delivers a change signed, with schema-valid data and a console link, once', async () => {
    const keyId = await rotate();
    await waitFor('the key.rotated delivery', () => attemptsFor(keyId).some((a) => a.status === 200));
    const [attempt] = attemptsFor(keyId);
    expect(attempt?.signatureValid).toBe(true);
    const data = attempt?.body.data as Record<string, unknown>;
    expect(eventDataProblem('key.rotated', data)).toBeUndefined();
    expect(data.console_url).toBe('https://signbridge.example.test/console/tenants/ev/audit');
    expect(attemptsFor(keyId)).toHaveLength(1);
  });

  it('retries a 500 after at least the backoff, then delivers once', async () => {
    receiver.script.push({ status: 500 });
    const keyId = await rotate();
    await waitFor('the retry after the 500', () => attemptsFor(keyId).some((a) => a.status === 200));
    const [first, second] = attemptsFor(keyId);
    expect([first?.status, second?.status]).toEqual([500, 200]);
    expect(first?.id).toBe(second?.id);
    // Equal jitter: at least half the first delay.
    expect((second?.at ?? 0) - (first?.at ?? 0)).toBeGreaterThanOrEqual(RETRY_BASE_MS / 2);
  });

  it('honours Retry-After on a 429', async () => {
    receiver.script.push({ status: 429, headers: { 'retry-after': '1' } });
    const keyId = await rotate();
    await waitFor('the delivery after the 429', () => attemptsFor(keyId).some((a) => a.status === 200));
    const [first, second] = attemptsFor(keyId);
    expect(first?.status).toBe(429);
    expect((second?.at ?? 0) - (first?.at ?? 0)).toBeGreaterThanOrEqual(1000);
  });

  it('retries an answer slower than the time-out; the late answer counts for nothing', async () => {
    receiver.script.push({ delayMs: 1500, status: 200 });
    const keyId = await rotate();
    await waitFor('the delivery after the slow answer', () => attemptsFor(keyId).some((a) => a.status === 200));
    const attempts = attemptsFor(keyId);
    expect(attempts.length).toBeGreaterThanOrEqual(2);
    expect(attempts.filter((a) => a.status === 200)).toHaveLength(1);
  });

  it('keeps what happened while the receiver was down, and delivers it in order once it is up', async () => {
    // Only deliveries of events after this one count below: until the new events are fanned out (the dispatcher's
    // next pass), the newest deliveries are the earlier tests', one of which (the slow answer) was tried twice.
    const seenBefore = (await svc.store.events.listDeliveries(subscriptionId, 1))[0]?.eventSeq ?? 0;
    await receiver.stop();
    const keys = [await rotate(), await rotate(), await rotate()];
    // Attempts fail (connection refused) and are rescheduled: wait until the first one has been tried twice.
    await until('retries while down', async () => {
      const deliveries = await svc.store.events.listDeliveries(subscriptionId, 3);
      return deliveries.some((d) => d.eventSeq > seenBefore && d.attempts >= 2) ? true : undefined;
    });
    await receiver.start();
    await waitFor('all three delivered', () => keys.every((k) => attemptsFor(k).some((a) => a.status === 200)));
    // Per tenant order key: the rotations arrive in the order they happened.
    const order = receiver.attempts
      .filter((a) => a.status === 200 && keys.includes((a.body.data as Record<string, unknown>).key_id as string))
      .map((a) => (a.body.data as Record<string, unknown>).key_id);
    expect(order).toEqual(keys);
  });

  it('tells of a held signature, its approval and the signature; each event exactly once', async () => {
    const requester = await svc.apiKey('signer', 'ev');
    const approver = await svc.apiKey('approver', 'ev');
    const held = await callAction(svc.app, requester, 'sign', {
      tenant_id: 'ev',
      algorithm: 'ECDSA_SHA_256',
      hash: Buffer.alloc(32, 7).toString('base64'),
      environment: 'production',
    });
    expect(held.status).toBe(202);
    const requestId = held.body.request_id as string;
    // The module polls: a retry continues the request and tells nobody again.
    const polled = await callAction(svc.app, requester, 'sign', {
      tenant_id: 'ev',
      algorithm: 'ECDSA_SHA_256',
      hash: Buffer.alloc(32, 7).toString('base64'),
      environment: 'production',
    });
    expect(polled.status).toBe(202);
    const approved = await callAction(svc.app, approver, 'approve_sign', { tenant_id: 'ev', request_id: requestId });
    expect(approved.status).toBe(200);
    const ofRequest = () =>
      receiver.attempts.filter((a) => (a.body.data as Record<string, unknown>).request_id === requestId);
    await waitFor('pending, approved and signed', () => ofRequest().filter((a) => a.status === 200).length >= 3);
    expect(ofRequest().map((a) => a.type)).toEqual(['signature.pending', 'signature.approved', 'signature.signed']);
    for (const a of ofRequest()) {
      expect(a.signatureValid).toBe(true);
      expect(eventDataProblem(a.type as never, a.body.data)).toBeUndefined();
    }
    const pending = ofRequest()[0]?.body.data as Record<string, unknown>;
    expect(pending.console_url).toBe(`https://signbridge.example.test/console/requests#req-${requestId}`);
  });

  it('pauses the subscription on 410 Gone, keeps later events, and sends them when resumed', async () => {
    receiver.script.push({ status: 410 });
    const gone = await rotate();
    await until('the subscription to pause', async () =>
      (await svc.store.events.getSubscription(subscriptionId))?.pausedAt ? true : undefined,
    );
    const paused = await svc.store.events.getSubscription(subscriptionId);
    expect(paused?.pauseReason).toMatch(/410/);
    const later = await rotate();
    // Paused: a few passes go by without an attempt at the later event.
    const passes = svc.app.eventDispatcher;
    if (!passes) throw new Error('no dispatcher');
    await passes.runOnce();
    await passes.runOnce();
    expect(attemptsFor(later)).toEqual([]);
    await svc.store.events.resumeSubscription(subscriptionId, new Date().toISOString());
    await waitFor('the later event after resuming', () => attemptsFor(later).some((a) => a.status === 200));
    // The 410'd delivery itself was given up, not retried.
    expect(attemptsFor(gone).map((a) => a.status)).toEqual([410]);
  });

  it('never sent any event twice to the receiver that answered 200', () => {
    const twice = [...receiver.delivered()].filter(([, n]) => n > 1);
    expect(twice).toEqual([]);
    expect(receiver.attempts.every((a) => a.signatureValid)).toBe(true);
  });

  it('counts the attempts by outcome on /metrics, and nothing is left to deliver', async () => {
    const answered200 = [...receiver.delivered().values()].reduce((a, b) => a + b, 0);
    const scrape = async () => parseExposition((await metrics?.registry.metrics()) ?? '');
    const attemptsIn = (samples: Awaited<ReturnType<typeof scrape>>, outcome: string) =>
      sample(samples, 'signbridge_event_delivery_attempts_total', { format: 'standard', outcome })?.value ?? 0;
    // The last outcome is recorded (and counted) just after the receiver answered: wait for it.
    const samples = await until('the last outcomes to be counted', async () => {
      const now = await scrape();
      return attemptsIn(now, 'delivered') === answered200 ? now : undefined;
    });
    const attempts = (outcome: string) => attemptsIn(samples, outcome);
    // 500, 429, the slow answer, and at least one refused connection while the receiver was down.
    expect(attempts('retry')).toBeGreaterThanOrEqual(4);
    expect(attempts('gone')).toBe(1);
    expect(sample(samples, 'signbridge_event_deliveries_pending')?.value).toBe(0);
    expect(sample(samples, 'signbridge_webhook_subscriptions_paused')?.value).toBe(0);
  });
});
