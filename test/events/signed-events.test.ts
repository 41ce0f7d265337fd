// Issue 31: signature.signed for every signature, made at once or after its approval (docs/events.md). One service
// (SQLite, or PostgreSQL with SIGNBRIDGE_TEST_STORE=postgres) with the real dispatcher and sender delivers to a real
// receiver on 127.0.0.1, which checks each request with the Standard Webhooks reference library. Signatures are made
// through every route a user has: `sign`, `pkcs11_sign`, a CI job's key from the token exchange (made directly, as
// test/api/workload-policy.test.ts does), and an approval; then N signatures give exactly N signature.signed events,
// each delivered once, schema-valid, naming its signature record. Issue 46: a signature made at once is told of from
// its `signed` audit entry (no outbox row); an approval's signature.signed is still an outbox row, written only for a
// tenant with a subscription that wants it (the store's exact cache answers that): none before the subscription,
// none after it is removed. The same across two server processes on PostgreSQL:
// test/events/postgres-signed-events.test.ts.
import { createHash, createPublicKey, randomUUID, verify } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createWorkloadApiKey } from '../../src/auth/api-keys.js';
import { runUrlOf, type WorkloadIdentity } from '../../src/auth/workload/workload-identity.js';
import { destinations } from '../../src/events/destinations.js';
import { eventDataProblem } from '../../src/events/event-schemas.js';
import { addSubscription, removeSubscription } from '../../src/events/subscription-service.js';
import { checkSubscriptionUrl } from '../../src/events/webhook-sender.js';
import { parsePolicyDocument } from '../../src/policy/policy-file.js';
import { RulesPolicyEngine } from '../../src/policy/rules-engine.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';
import { waitFor } from '../helpers/wait.js';
import { type Attempt, WebhookReceiver } from '../helpers/webhook-receiver.js';

const policy = new RulesPolicyEngine(
  parsePolicyDocument('version: 1\nrules:\n  environments:\n    requireApproval: [production]\n', 'signed-events'),
);
const webhooks = { allow: ['127.0.0.1'], timeoutMs: 5000 };
const GITHUB = 'https://token.actions.githubusercontent.com';

let svc: TestService;
const receiver = new WebhookReceiver();
let signer: string;
let approver: string;
let pem: string;

beforeAll(async () => {
  await receiver.start();
  svc = await startTestService({
    policy,
    publicUrl: 'https://signbridge.example.test',
    eventDelivery: {
      deliver: (claim) => destinations(svc.store, { webhooks })(claim),
      settings: { pollMs: 25, idlePollMaxMs: 200, leaseMs: 10_000 },
    },
  });
  expect(
    (await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'sg', key_spec: 'ECC_NIST_P256' })).status,
  ).toBe(201);
  signer = await svc.apiKey('signer', 'sg');
  approver = await svc.apiKey('approver', 'sg');
  pem = (await callAction(svc.app, signer, 'get_public_key', { tenant_id: 'sg' })).body.public_key_pem as string;
}, 60_000);
afterAll(async () => {
  await svc?.close();
  await receiver.stop();
});

/** A subscription of tenant sg to `kinds` (none: every kind), made as `signbridge admin webhook add` makes it. */
async function subscribe(kinds: string[]): Promise<string> {
  const { subscription, secret } = await addSubscription(
    svc.store,
    { tenantId: 'sg', url: receiver.url, format: 'standard', eventKinds: kinds },
    { actor: 'test', via: 'cli' },
    async (url) => {
      const checked = await checkSubscriptionUrl(url, webhooks);
      return checked.ok ? undefined : checked.error;
    },
  );
  receiver.secret = secret ?? undefined;
  return subscription.id;
}

const digestOf = (message: string) => createHash('sha256').update(message).digest('base64');

/** A signature made: the digest it signed, the answer's signature, and how it was made. */
interface Made {
  message: string;
  digest: string;
  signature: string;
  via: 'sign' | 'pkcs11_sign' | 'workload' | 'approval';
  requestId?: string;
}

async function signAtOnce(token: string, message: string, via: Made['via'], action = 'sign'): Promise<Made> {
  const hash = digestOf(message);
  const res = await callAction(svc.app, token, action, {
    tenant_id: 'sg',
    hash,
    ...(action === 'sign' && { algorithm: 'ECDSA_SHA_256' }),
    ...(via !== 'workload' && { project: 'acme/app', environment: 'staging' }),
  });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return { message, digest: hash, signature: res.body.signature as string, via };
}

async function signAfterApproval(message: string): Promise<Made> {
  const hash = digestOf(message);
  const held = await callAction(svc.app, signer, 'sign', {
    tenant_id: 'sg',
    algorithm: 'ECDSA_SHA_256',
    hash,
    environment: 'production',
  });
  expect(held.status, JSON.stringify(held.body)).toBe(202);
  const requestId = held.body.request_id as string;
  const approved = await callAction(svc.app, approver, 'approve_sign', { tenant_id: 'sg', request_id: requestId });
  expect(approved.status, JSON.stringify(approved.body)).toBe(200);
  return { message, digest: hash, signature: approved.body.signature as string, via: 'approval', requestId };
}

/** A CI job's short-lived signer key, as the token exchange mints it. */
async function workloadKey(): Promise<string> {
  const facts = {
    project: 'acme/app',
    ref: 'refs/heads/main',
    refType: 'branch',
    refProtected: true,
    sha: 'c0ffee0000000000000000000000000000000031',
    runId: '3131',
    runAttempt: '1',
    runnerEnvironment: 'github-hosted',
  };
  const identity: WorkloadIdentity = {
    issuer: GITHUB,
    subject: 'repo:acme/app:ref:refs/heads/main',
    kind: 'github',
    ruleId: 'tr_0123456789abcdef',
    tokenId: randomUUID(),
    facts,
    runUrl: runUrlOf('github', GITHUB, facts) as string,
  };
  return (
    await createWorkloadApiKey(svc.store, {
      tenantId: 'sg',
      role: 'signer',
      expiresAt: new Date(Date.now() + 15 * 60_000),
      identity,
    })
  ).token;
}

/** signature.signed rows in the outbox for tenant sg: what was written, delivered or not. */
async function signedEventsWritten(): Promise<number> {
  const rows = await svc.run<{ n: number | string }>(
    sql`SELECT count(*) AS n FROM event_outbox WHERE type = 'signature.signed' AND tenant_id = 'sg'`,
  );
  return Number(rows[0]?.n);
}

const signedAttempts = (): Attempt[] => receiver.attempts.filter((a) => a.type === 'signature.signed');
const dataOf = (a: Attempt) => a.body.data as Record<string, unknown>;

describe('signature.signed for every signature', () => {
  it('writes none while no subscription of the tenant wants it', async () => {
    await signAtOnce(signer, 'before any subscription', 'sign');
    // A subscription to other kinds: still nobody to receive signature.signed.
    await subscribe(['key.rotated']);
    await signAtOnce(signer, 'with a key.rotated subscription', 'sign');
    await signAfterApproval('held before any subscription to it');
    // The approved request's signature.signed is written (a request's events always are), the two at once not.
    expect(await signedEventsWritten()).toBe(1);
  });

  let subscriptionId: string;
  const made: Made[] = [];

  it('tells of each signature once: at once through sign and pkcs11_sign, by a CI job, after an approval', async () => {
    subscriptionId = await subscribe(['signature.signed']);
    const before = await signedEventsWritten();
    const ci = await workloadKey();
    made.push(
      ...(await Promise.all(Array.from({ length: 12 }, (_, i) => signAtOnce(signer, `at once ${i}`, 'sign')))),
      ...(await Promise.all(
        Array.from({ length: 4 }, (_, i) => signAtOnce(signer, `pkcs11 ${i}`, 'pkcs11_sign', 'pkcs11_sign')),
      )),
      ...(await Promise.all(Array.from({ length: 3 }, (_, i) => signAtOnce(ci, `ci job ${i}`, 'workload')))),
      await signAfterApproval('held, then approved'),
    );
    const digests = new Set(made.map((m) => m.digest));
    expect(digests.size).toBe(made.length);

    const ofThese = () => signedAttempts().filter((a) => digests.has(dataOf(a).digest as string));
    const deliveredIds = () => new Set(ofThese().flatMap((a) => (a.status === 200 ? [a.id] : [])));
    await waitFor(`${made.length} signature.signed deliveries`, () => deliveredIds().size >= made.length, 30_000);
    // Exactly one event per signature, delivered once (the receiver); only the approval's is an outbox row, the
    // others are read from their `signed` entries.
    expect((await signedEventsWritten()) - before).toBe(1);
    const delivered = ofThese().filter((a) => a.status === 200);
    expect(delivered).toHaveLength(made.length);
    expect(new Set(delivered.map((a) => dataOf(a).digest)).size).toBe(made.length);

    const records = await svc.store.signatures.list('sg', 100_000);
    for (const m of made) {
      const attempt = delivered.find((a) => dataOf(a).digest === m.digest) as Attempt;
      const data = dataOf(attempt);
      expect(attempt.signatureValid).toBe(true);
      expect(eventDataProblem('signature.signed', data), JSON.stringify(data)).toBeUndefined();
      expect(data).toMatchObject({ tenant_id: 'sg', algorithm: 'ECDSA_SHA_256', digest: m.digest });
      // The event names the signature record that holds this signature.
      const record = records.find((r) => r.id === data.signature_id);
      expect(record?.hash, `${m.via}: ${JSON.stringify(data)}`).toBe(m.digest);
      expect(data.key_id).toBe(record?.keyId);
      expect(verify('sha256', Buffer.from(m.message), createPublicKey(pem), Buffer.from(m.signature, 'base64'))).toBe(
        true,
      );
      if (m.via === 'approval') {
        expect(data.request_id).toBe(m.requestId);
        expect(data.console_url).toBe(`https://signbridge.example.test/console/requests#req-${m.requestId}`);
      } else {
        expect(data.request_id).toBeUndefined();
        expect(data.console_url).toBe('https://signbridge.example.test/console/tenants/sg/audit');
      }
      if (m.via === 'workload') {
        expect(data.requester).toMatchObject({ workload: { issuer: GITHUB, repository: 'acme/app' } });
        expect(data.inputs).toMatchObject({ project: 'acme/app', ci: { run_id: '3131', ref: 'refs/heads/main' } });
      } else {
        expect(data.requester).not.toHaveProperty('workload');
      }
    }
    expect([...receiver.delivered()].filter(([, n]) => n > 1)).toEqual([]);
  });

  it('writes none again once the subscription is removed', async () => {
    const before = await signedEventsWritten();
    await removeSubscription(svc.store, subscriptionId, { actor: 'test', via: 'cli' });
    await signAtOnce(signer, 'after the subscription went', 'sign');
    await signAtOnce(signer, 'after the subscription went, pkcs11', 'pkcs11_sign', 'pkcs11_sign');
    expect(await signedEventsWritten()).toBe(before);
  });
});
