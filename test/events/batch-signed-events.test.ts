// Issue 46: a batch made at once (`sign_batch`) writes no outbox row and no delivery row for its signatures: each
// signature's signature.signed is read by the dispatcher from the batch's one `signed` entry and its items. One
// service (SQLite, or PostgreSQL with SIGNBRIDGE_TEST_STORE=postgres) with the real dispatcher and sender delivering
// to a real receiver on 127.0.0.1 (checked with the Standard Webhooks reference library): N batched signatures give
// N signature.signed events, each delivered once, schema-valid, with the signature_id and digest the sign_batch
// answer gave, in item order; the event tables hold no row for them.
import { createHash } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { destinations } from '../../src/events/destinations.js';
import { eventDataProblem } from '../../src/events/event-schemas.js';
import { addSubscription } from '../../src/events/subscription-service.js';
import { checkSubscriptionUrl } from '../../src/events/webhook-sender.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';
import { waitFor } from '../helpers/wait.js';
import { type Attempt, WebhookReceiver } from '../helpers/webhook-receiver.js';

const webhooks = { allow: ['127.0.0.1'], timeoutMs: 5000 };
let svc: TestService;
const receiver = new WebhookReceiver();
let signer: string;

beforeAll(async () => {
  await receiver.start();
  svc = await startTestService({
    publicUrl: 'https://signbridge.example.test',
    eventDelivery: {
      deliver: (claim) => destinations(svc.store, { webhooks })(claim),
      // One attempt at a time: the receiver sees the events in the order they are sent.
      settings: { pollMs: 25, idlePollMaxMs: 200, leaseMs: 10_000, perSubscription: 1 },
    },
  });
  expect(
    (await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'bs', key_spec: 'ECC_NIST_P256' })).status,
  ).toBe(201);
  signer = await svc.apiKey('signer', 'bs');
  const { secret } = await addSubscription(
    svc.store,
    { tenantId: 'bs', url: receiver.url, format: 'standard', eventKinds: ['signature.signed'] },
    { actor: 'test', via: 'cli' },
    async (url) => {
      const checked = await checkSubscriptionUrl(url, webhooks);
      return checked.ok ? undefined : checked.error;
    },
  );
  receiver.secret = secret ?? undefined;
}, 60_000);
afterAll(async () => {
  await svc?.close();
  await receiver.stop();
});

/** Rows of tenant bs's events in the outbox, and delivery rows of any event. */
async function eventRows(): Promise<{ outbox: number; deliveries: number }> {
  const [outbox] = await svc.run<{ n: number | string }>(
    sql`SELECT count(*) AS n FROM event_outbox WHERE tenant_id = 'bs'`,
  );
  const [deliveries] = await svc.run<{ n: number | string }>(sql`SELECT count(*) AS n FROM event_deliveries`);
  return { outbox: Number(outbox?.n), deliveries: Number(deliveries?.n) };
}

describe('signature.signed of a batch made at once', () => {
  it('tells of each signature once, in item order, from the entry: no outbox or delivery row', async () => {
    const before = await eventRows();
    const answers: Array<{ digest: string; signatureId: string }> = [];
    for (const [b, size] of [
      [0, 7],
      [1, 3],
    ] as const) {
      const hashes = Array.from({ length: size }, (_, i) =>
        createHash('sha256').update(`batch ${b} item ${i}`).digest('base64'),
      );
      const res = await callAction(svc.app, signer, 'sign_batch', {
        tenant_id: 'bs',
        algorithm: 'ECDSA_SHA_256',
        hashes,
        project: 'acme/app',
        environment: 'staging',
      });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      const results = res.body.results as Array<{ signature_id: string }>;
      answers.push(...results.map((r, i) => ({ digest: hashes[i] as string, signatureId: r.signature_id })));
    }
    const signed = (): Attempt[] => receiver.attempts.filter((a) => a.type === 'signature.signed' && a.status === 200);
    await waitFor(`${answers.length} signature.signed deliveries`, () => signed().length >= answers.length, 30_000);
    const data = signed().map((a) => a.body.data as Record<string, unknown>);
    expect(data.map((d) => [d.digest, d.signature_id])).toEqual(answers.map((a) => [a.digest, a.signatureId]));
    for (const [i, d] of data.entries()) {
      expect(signed()[i]?.signatureValid).toBe(true);
      expect(eventDataProblem('signature.signed', d), JSON.stringify(d)).toBeUndefined();
      expect(d).toMatchObject({
        tenant_id: 'bs',
        algorithm: 'ECDSA_SHA_256',
        inputs: { project: 'acme/app', environment: 'staging' },
        console_url: 'https://signbridge.example.test/console/tenants/bs/audit',
      });
    }
    expect([...receiver.delivered()].filter(([, n]) => n > 1)).toEqual([]);
    // Ten signatures told of, and not one row written for them.
    expect(await eventRows()).toEqual(before);
  });
});
