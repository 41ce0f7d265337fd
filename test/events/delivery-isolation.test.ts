// One tenant's hanging receiver does not hold up another tenant's deliveries (issue 31). The reproduction of the
// report, in one service (SQLite, or PostgreSQL with SIGNBRIDGE_TEST_STORE=postgres) with the real dispatcher and
// sender and two real HTTP receivers on 127.0.0.1:
//
// - Tenant `hang`'s receiver accepts every connection and never answers (WebhookReceiver.hold()): a receiver that
//   hangs. The sender's time-out is 120 s, far past anything this test waits for, so A's attempts are still hanging
//   when the test looks.
// - Tenant `ok`'s receiver answers 200 at once.
// - Events flow for both: denied signature requests, alternating between the tenants (signature.denied has no order
//   key, so nothing but the dispatcher orders them).
//
// What is shown: `ok`'s receiver gets every one of its events while `hang`'s first attempts are still unanswered
// (no time-out recorded, no retry made), and `hang` holds only its own subscription's slots (perSubscription).
// Before, the dispatcher leased 16 deliveries and waited for all of them: `ok` got the ones leased beside `hang`'s,
// then nothing until `hang`'s time-outs ended. Nothing here measures a rate: counts and the order of outcomes only.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { destinations } from '../../src/events/destinations.js';
import { addSubscription } from '../../src/events/subscription-service.js';
import { checkSubscriptionUrl } from '../../src/events/webhook-sender.js';
import { parsePolicyDocument } from '../../src/policy/policy-file.js';
import { RulesPolicyEngine } from '../../src/policy/rules-engine.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';
import { until, waitFor } from '../helpers/wait.js';
import { WebhookReceiver } from '../helpers/webhook-receiver.js';

const policy = new RulesPolicyEngine(
  parsePolicyDocument('version: 1\nrules:\n  environments:\n    deny: [blocked]\n', 'isolation-policy'),
);
const webhooks = { allow: ['127.0.0.1'], timeoutMs: 120_000 };
/** Events per tenant. */
const N = 40;
const PER_SUBSCRIPTION = 4;

let svc: TestService;
const hanging = new WebhookReceiver();
const healthy = new WebhookReceiver();
const subscriptions = new Map<string, string>();
const signers = new Map<string, string>();

beforeAll(async () => {
  await Promise.all([hanging.start(), healthy.start()]);
  svc = await startTestService({
    policy,
    eventDelivery: {
      deliver: (claim) => deliver(claim),
      settings: { pollMs: 25, idlePollMaxMs: 200, leaseMs: 30_000, perSubscription: PER_SUBSCRIPTION },
    },
  });
  const deliver = destinations(svc.store, { webhooks });
  for (const [tenant, receiver] of [
    ['hang', hanging],
    ['ok', healthy],
  ] as const) {
    const created = await callAction(svc.app, svc.operator, 'create_tenant', {
      tenant_id: tenant,
      key_spec: 'ECC_NIST_P256',
    });
    expect(created.status).toBe(201);
    signers.set(tenant, await svc.apiKey('signer', tenant));
    const { subscription, secret } = await addSubscription(
      svc.store,
      { tenantId: tenant, url: receiver.url, format: 'standard', eventKinds: ['signature.denied'] },
      { actor: 'test', via: 'cli' },
      async (url) => {
        const checked = await checkSubscriptionUrl(url, webhooks);
        return checked.ok ? undefined : checked.error;
      },
    );
    subscriptions.set(tenant, subscription.id);
    receiver.secret = secret ?? undefined;
  }
  hanging.hold();
});
afterAll(async () => {
  hanging.release();
  await svc?.close();
  await Promise.all([hanging.stop(), healthy.stop()]);
});

/** A signature the policy denies: one signature.denied event for the tenant. */
async function denied(tenant: string, n: number): Promise<void> {
  const res = await callAction(svc.app, signers.get(tenant), 'sign', {
    tenant_id: tenant,
    algorithm: 'ECDSA_SHA_256',
    hash: Buffer.alloc(32, n % 256).toString('base64'),
    environment: 'blocked',
  });
  expect(res.status).toBe(403);
}

describe('a hanging receiver beside a healthy one', () => {
  it("delivers all of the healthy tenant's events while the hanging tenant's attempts still wait", async () => {
    for (let i = 0; i < N; i++) {
      await denied('hang', i);
      await denied('ok', i);
    }
    await waitFor(
      `all ${N} events at the healthy receiver (got ${healthy.delivered().size})`,
      () => healthy.delivered().size === N,
    );
    // Meanwhile the hanging receiver holds the hanging tenant's first attempts (its subscription's slots), all from
    // live senders: none timed out, none was tried again.
    await waitFor('the hanging attempts to reach their receiver', () => hanging.held().length === PER_SUBSCRIPTION);
    const held = hanging.held();
    expect(held.every((h) => !h.senderGone)).toBe(true);
    expect(hanging.attempts).toHaveLength(PER_SUBSCRIPTION);
    const hangDeliveries = await svc.store.events.listDeliveries(subscriptions.get('hang') as string, N + 1);
    expect(hangDeliveries).toHaveLength(N);
    // No outcome recorded for the hanging tenant yet: its attempts are under way, the rest not tried.
    expect(hangDeliveries.every((d) => d.status === 'pending' && d.lastError === null)).toBe(true);
    expect(hangDeliveries.filter((d) => d.attempts === 1)).toHaveLength(PER_SUBSCRIPTION);
    // The healthy tenant's: every one delivered, each once, signed.
    const okDeliveries = await until('the healthy deliveries recorded', async () => {
      const rows = await svc.store.events.listDeliveries(subscriptions.get('ok') as string, N + 1);
      return rows.every((d) => d.status === 'delivered') ? rows : undefined;
    });
    expect(okDeliveries).toHaveLength(N);
    expect([...healthy.delivered().values()].every((n) => n === 1)).toBe(true);
    expect(healthy.attempts.every((a) => a.signatureValid && a.type === 'signature.denied')).toBe(true);
  }, 120_000);

  it('delivers the hanging tenant its events too once its receiver answers', async () => {
    hanging.release();
    await waitFor(`all ${N} events at the receiver that hung`, () => hanging.delivered().size === N);
    expect([...hanging.delivered().values()].every((n) => n === 1)).toBe(true);
    expect(hanging.attempts.every((a) => a.signatureValid)).toBe(true);
  }, 120_000);
});
