// The event subscriptions page of the console in a real browser (Debian's chromium through playwright-core) against
// the real service, a real OpenID provider, the real event dispatcher and sender, and a real receiver on 127.0.0.1
// (allowed by the operator's webhooks.allow, as an internal receiver would be). A tenant admin adds a Slack
// subscription that then gets a change made in the console; URLs the default webhook settings refuse (a second
// instance on the same store without an allow list) are shown with the reason and nothing saved; a standard
// subscription's secret is shown once and signs what the receiver gets; a paused subscription shows since when,
// why and its last error, and Resume (audited) sends what waited; a signer or approver gets 403 for the page and
// its forged posts; another tenant's subscription is not found through one's own tenant; a post without the CSRF
// token changes nothing. Nothing waits on the clock: the test waits for what it needs (a delivery, a row).
import type { FastifyInstance } from 'fastify';
import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { destinations } from '../../src/events/destinations.js';
import type { Deliver } from '../../src/events/dispatcher.js';
import { addSubscription } from '../../src/events/subscription-service.js';
import { checkSubscriptionUrl } from '../../src/events/webhook-sender.js';
import { launchBrowser, signInAtIdp, type TestBrowser } from '../helpers/browser.js';
import { type OidcStand, startOidcStand } from '../helpers/oidc-service.js';
import { callAction, type TestService } from '../helpers/service.js';
import type { TestIdp } from '../helpers/test-idp.js';
import { until, waitFor } from '../helpers/wait.js';
import { WebhookReceiver } from '../helpers/webhook-receiver.js';

const GITHUB = 'https://token.actions.githubusercontent.com';
/** The operator's webhooks.allow of the instance that delivers: the test receiver is on 127.0.0.1. */
const webhooks = { allow: ['127.0.0.1'] };

const ACCOUNTS = {
  carol: { email: 'carol@example.com', email_verified: true, name: 'Carol' },
  alice: { email: 'alice@example.com', email_verified: true, name: 'Alice' },
  dave: { email: 'dave@example.com', email_verified: true, name: 'Dave' },
};

let stand: OidcStand;
let idp: TestIdp;
let svc: TestService;
let browser: TestBrowser;
let base = '';
/** A second instance on the same store with the default webhook settings (no allow list) and no dispatcher. */
let strict: FastifyInstance;
let strictBase = '';
let deliver: Deliver;
const receiver = new WebhookReceiver();
const people: Record<string, { context: BrowserContext; page: Page }> = {};

beforeAll(async () => {
  await receiver.start();
  stand = await startOidcStand({
    accounts: ACCOUNTS,
    tenants: ['acme', 'beta'],
    invitations: [
      { email: 'carol@example.com', tenant: 'acme', role: 'admin' },
      { email: 'alice@example.com', tenant: 'acme', role: 'signer' },
      { email: 'dave@example.com', tenant: 'acme', role: 'approver' },
    ],
    app: {
      webhooks,
      eventDelivery: {
        deliver: (claim) => deliver(claim),
        settings: {
          pollMs: 25,
          idlePollMaxMs: 200,
          retryBaseMs: 200,
          retryMaxMs: 2000,
          leaseMs: 10_000,
          pauseAfterFailingMs: 3600_000,
        },
      },
    },
  });
  ({ idp, svc, base } = stand);
  deliver = destinations(svc.store, { webhooks });
  // Sessions live in the store and cookies are not told apart by port, so a browser signed in at `base` is signed
  // in here too, as with two instances behind one name.
  strict = await buildApp({
    store: svc.store,
    keyStore: svc.keyStores,
    oauth: { oidc: stand.settings, publicUrl: () => base },
  });
  strictBase = await strict.listen({ host: '127.0.0.1', port: 0 });
  browser = await launchBrowser();
}, 120_000);

// Each test starts without subscriptions, trust rules or scripted answers, whatever the one before left when it failed.
afterEach(async () => {
  for (const s of await svc.store.events.listSubscriptions()) await svc.store.events.removeSubscription(s.id);
  for (const rule of await svc.store.workload.listTrustRules('acme')) await svc.store.workload.removeTrustRule(rule.id);
  receiver.script.length = 0;
});

afterAll(async () => {
  await browser?.close();
  await strict?.close();
  await stand?.close();
  await receiver.stop();
});

async function signedIn(login: keyof typeof ACCOUNTS, path = '/console'): Promise<Page> {
  const known = people[login];
  if (known) {
    await known.page.goto(`${base}${path}`);
    return known.page;
  }
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(`${base}${path}`);
  expect(page.url().startsWith(idp.issuer)).toBe(true);
  await signInAtIdp(page, idp.issuer, login);
  expect(new URL(page.url()).pathname).toBe(path);
  people[login] = { context, page };
  return page;
}

const PAGE = '/console/tenants/acme/webhooks';
const subscriptionAudit = async (tenant = 'acme') =>
  (await svc.store.audit.recent(tenant, 200)).filter((e) => e.action === 'webhook_subscription');
const personId = async (email: string) => (await svc.store.people.findByEmail(email))[0]?.id;
const allowedUrl = async (url: string) => {
  const checked = await checkSubscriptionUrl(url, webhooks);
  return checked.ok ? undefined : checked.error;
};
const rotate = async () => {
  const res = await callAction(svc.app, await svc.apiKey('admin', 'acme'), 'rotate_key', { tenant_id: 'acme' });
  expect(res.status).toBe(200);
  return res.body.key_id as string;
};
/** The receiver's attempts with the key.rotated event of the rotation that made `keyId`. */
const rotationAttempts = (keyId: string) =>
  receiver.attempts.filter(
    (a) => a.type === 'key.rotated' && (a.body.data as Record<string, unknown>).key_id === keyId,
  );

describe('event subscriptions in the console', () => {
  it('an admin finds the page from the overview, adds a Slack subscription (escaped, audited), sees its delivery and removes it', async () => {
    const page = await signedIn('carol');
    await page.getByRole('link', { name: 'event subscriptions' }).click();
    expect(new URL(page.url()).pathname).toBe(PAGE);
    expect(await page.locator('h1').textContent()).toBe('Event subscriptions of acme');
    expect(await page.locator('table').first().textContent()).toContain('No subscriptions');

    const url = `${receiver.url}?team=<b>ops</b>`;
    await page.getByLabel(/^URL/).fill(url);
    await page.getByLabel('Format', { exact: true }).selectOption('slack');
    await page.getByLabel('trust.changed', { exact: true }).check();
    await page.getByRole('button', { name: 'Add the subscription' }).click();
    expect(new URL(page.url()).pathname).toBe(PAGE); // POST-redirect-GET
    expect(await page.getByRole('status').textContent()).toContain('subscription was added');

    const [sub, ...others] = await svc.store.events.listSubscriptions('acme');
    expect(others).toEqual([]);
    const carol = await personId('carol@example.com');
    expect(sub).toMatchObject({
      url,
      format: 'slack',
      eventKinds: ['trust.changed'],
      secret: null,
      pausedAt: null,
      createdBy: `person:${carol}`,
    });
    const id = sub?.id as string;
    const row = page.locator(`#sub-${id}`);
    const rowText = (await row.textContent()) as string;
    // The URL's path beyond its first segment and its query are not shown: Slack's and Teams' URLs are their secret.
    const shownUrl = `${receiver.url}/…`;
    for (const shown of [id, 'slack', shownUrl, 'trust.changed', 'active', 'never']) expect(rowText).toContain(shown);
    expect(rowText).not.toContain('team=');
    expect(await page.locator('main b').count()).toBe(0);
    expect(await page.locator(`#deliveries-${id}`).textContent()).toContain('No deliveries yet');

    // A change in the console (a trust rule) is an event of the kind it asked for: it reaches the receiver.
    await page.goto(`${base}/console/tenants/acme/trust`);
    await page.getByLabel(/^Issuer/).fill(GITHUB);
    await page.getByLabel(/^Conditions/).fill('repository_id=4711');
    await page.getByRole('button', { name: 'Add the rule' }).click();
    const delivered = await until('the trust.changed delivery recorded', async () => {
      const [d] = await svc.store.events.listDeliveries(id, 5);
      return d?.status === 'delivered' ? d : undefined;
    });
    expect(delivered).toMatchObject({ eventType: 'trust.changed', attempts: 1, lastStatus: 200 });
    const [attempt, ...more] = receiver.attempts;
    expect(more).toEqual([]);
    expect(attempt?.status).toBe(200);
    expect(String(attempt?.body.text)).toContain('acme'); // a Slack message: text and blocks
    expect(attempt?.body.blocks).toBeInstanceOf(Array);

    await page.goto(`${base}${PAGE}`);
    const after = await svc.store.events.getSubscription(id);
    expect(after?.lastDeliveredAt).not.toBeNull();
    expect(await row.locator('time').first().getAttribute('datetime')).toBe(after?.lastDeliveredAt);
    const deliveries = (await page.locator(`#deliveries-${id}`).textContent()) as string;
    for (const shown of ['trust.changed', delivered.eventId, 'delivered', '200']) expect(deliveries).toContain(shown);

    await page.getByRole('button', { name: `Remove subscription ${id}` }).click();
    expect(await page.getByRole('status').textContent()).toContain('subscription was removed');
    expect(await svc.store.events.listSubscriptions('acme')).toEqual([]);
    const audit = await subscriptionAudit();
    expect(audit.map((e) => e.outcome)).toEqual(['removed', 'added']); // newest first
    for (const entry of audit) {
      expect(entry.actor).toBe(`person:${carol}`);
      expect(entry.details).toMatchObject({ subscription_id: id, url: shownUrl, via: 'console' });
    }
    expect(audit[1]?.details).toMatchObject({ format: 'slack', events: ['trust.changed'] });
  });

  it('without an allow list, http, loopback, link-local, private and loopback-resolving URLs are refused with the reason; nothing is saved', async () => {
    const page = await signedIn('carol');
    await page.goto(`${strictBase}${PAGE}`); // the same session, on the instance with the default settings
    expect(await page.locator('h1').textContent()).toBe('Event subscriptions of acme');
    const auditBefore = (await subscriptionAudit()).length;
    const special = 'a loopback, private or other special-use address';
    for (const [url, format, reason] of [
      ['http://127.0.0.1/x', 'slack', /http:\/\/127\.0\.0\.1 is refused: webhooks are sent over https/],
      // What the other instance accepted, because its webhooks.allow lists 127.0.0.1.
      [receiver.url, 'standard', /is refused: webhooks are sent over https/],
      ['https://169.254.169.254/latest', 'standard', `the address 169.254.169.254 is ${special}`],
      ['https://10.1.2.3/', 'teams', `the address 10.1.2.3 is ${special}`],
      ['https://localhost/', 'standard', new RegExp(`the host localhost resolves to [0-9a-f:.]+, ${special}`)],
    ] as const) {
      await page.getByLabel(/^URL/).fill(url);
      await page.getByLabel('Format', { exact: true }).selectOption(format);
      await page.getByLabel('key.rotated', { exact: true }).check();
      const answer = page.waitForResponse((r) => r.request().method() === 'POST');
      await page.getByRole('button', { name: 'Add the subscription' }).click();
      expect((await answer).status()).toBe(400);
      const alert = (await page.getByRole('alert').textContent()) as string;
      expect(alert).toContain('The subscription was not saved');
      expect(alert).toMatch(reason);
      // The form comes back as it was filled.
      expect(await page.getByLabel(/^URL/).inputValue()).toBe(url);
      expect(await page.getByLabel('Format', { exact: true }).inputValue()).toBe(format);
      expect(await page.getByLabel('key.rotated', { exact: true }).isChecked()).toBe(true);
      expect(await page.getByLabel('trust.changed', { exact: true }).isChecked()).toBe(false);
    }
    expect(await svc.store.events.listSubscriptions('acme')).toEqual([]);
    expect((await subscriptionAudit()).length).toBe(auditBefore);
  });

  it("a standard subscription's secret is shown once, in the answer, and signs what the receiver gets; the list never shows it", async () => {
    const page = await signedIn('carol', PAGE);
    await page.getByLabel(/^URL/).fill(receiver.url);
    await page.getByLabel('Format', { exact: true }).selectOption('standard');
    await page.getByLabel('key.rotated', { exact: true }).check();
    const answer = page.waitForResponse((r) => r.request().method() === 'POST');
    await page.getByRole('button', { name: 'Add the subscription' }).click();
    const response = await answer;
    expect(response.status()).toBe(200); // the answer itself, not a redirect
    expect(response.headers()['cache-control']).toBe('no-store');
    expect(await page.locator('h1').textContent()).toBe('Your new subscription');
    expect(await page.locator('main p[role="status"]').textContent()).toContain('shown only this once');
    const secret = ((await page.locator('#new-secret').textContent()) as string).trim();
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    const [sub] = await svc.store.events.listSubscriptions('acme');
    expect(sub?.secret).toBe(secret);
    const id = sub?.id as string;

    // The receiver checks deliveries with the secret the page showed.
    receiver.secret = secret;
    const keyId = await rotate();
    await waitFor('the key.rotated delivery', () => rotationAttempts(keyId).some((a) => a.status === 200));
    expect(rotationAttempts(keyId).map((a) => a.signatureValid)).toEqual([true]);

    await page.goto(`${base}${PAGE}`);
    expect(await page.locator(`#sub-${id}`).count()).toBe(1);
    expect(await page.content()).not.toContain(secret);
    expect(await page.content()).not.toContain('whsec_');
    expect(JSON.stringify(await svc.store.audit.recent('acme', 200))).not.toContain(secret);
  });

  it('a paused subscription shows since when, why and its last error; Resume makes it active, is audited and sends what waited', async () => {
    const { subscription, secret } = await addSubscription(
      svc.store,
      { tenantId: 'acme', url: receiver.url, format: 'standard', eventKinds: ['key.rotated'] },
      { actor: 'test', via: 'cli' },
      allowedUrl,
    );
    const id = subscription.id;
    receiver.secret = secret ?? undefined;
    // A failed delivery (400: not retried) sets the last error; then the subscription is paused with a reason.
    receiver.script.push({ status: 400, body: 'no such <hook>' });
    const failedKey = await rotate();
    const failed = await until('the failed delivery recorded', async () => {
      const [d] = await svc.store.events.listDeliveries(id, 5);
      return d?.status === 'failed' ? d : undefined;
    });
    expect(rotationAttempts(failedKey).map((a) => a.status)).toEqual([400]);
    const reason = 'failed 50 times in a row <since the move>';
    await svc.store.events.pauseSubscription(id, reason, new Date().toISOString());
    const paused = await svc.store.events.getSubscription(id);
    expect(paused?.lastError).toContain('answered HTTP 400: no such <hook>');
    // While paused, a new event waits.
    const waitingKey = await rotate();
    await until('the waiting delivery written', async () => {
      const [d] = await svc.store.events.listDeliveries(id, 5);
      return d && d.eventSeq !== failed.eventSeq ? d : undefined;
    });

    const page = await signedIn('carol', PAGE);
    const rowText = (await page.locator(`#sub-${id}`).textContent()) as string;
    expect(rowText).toContain('paused');
    expect(rowText).toContain(reason);
    expect(rowText).toContain(paused?.lastError as string);
    const times = await page
      .locator(`#sub-${id} time`)
      .evaluateAll((els) => els.map((e) => e.getAttribute('datetime')));
    expect(times).toEqual(expect.arrayContaining([paused?.pausedAt, paused?.lastErrorAt]));
    const deliveries = (await page.locator(`#deliveries-${id}`).textContent()) as string;
    for (const shown of ['key.rotated', 'failed', '400', 'pending', 'no such <hook>']) {
      expect(deliveries).toContain(shown);
    }
    expect(await page.locator('main hook, main since').count()).toBe(0); // shown as text
    expect(rotationAttempts(waitingKey)).toEqual([]);

    await page.getByRole('button', { name: `Resume subscription ${id}` }).click();
    expect(await page.getByRole('status').textContent()).toContain('subscription was resumed');
    const after = (await page.locator(`#sub-${id}`).textContent()) as string;
    expect(after).toContain('active');
    expect(after).not.toContain(reason);
    expect(await page.getByRole('button', { name: `Resume subscription ${id}` }).count()).toBe(0);
    expect((await svc.store.events.getSubscription(id))?.pausedAt).toBeNull();
    const [resumed] = await subscriptionAudit();
    expect(resumed).toMatchObject({
      actor: `person:${await personId('carol@example.com')}`,
      outcome: 'resumed',
      details: { subscription_id: id, was_paused: true, via: 'console' },
    });
    await waitFor('the waiting event delivered', () => rotationAttempts(waitingKey).some((a) => a.status === 200));
    expect(rotationAttempts(waitingKey).map((a) => a.signatureValid)).toEqual([true]);
  });

  it('a signer or an approver of the tenant cannot see or change its subscriptions, even with a valid CSRF token', async () => {
    const { subscription } = await addSubscription(
      svc.store,
      { tenantId: 'acme', url: receiver.url, format: 'slack', eventKinds: [] },
      { actor: 'test', via: 'cli' },
      allowedUrl,
    );
    await svc.store.events.pauseSubscription(subscription.id, 'paused by the test', new Date().toISOString());
    const auditBefore = (await subscriptionAudit()).length;
    for (const login of ['alice', 'dave'] as const) {
      const page = await signedIn(login);
      expect(await page.getByRole('link', { name: 'event subscriptions' }).count()).toBe(0);
      const res = await page.goto(`${base}${PAGE}`);
      expect(res?.status()).toBe(403);
      const main = (await page.locator('main').textContent()) as string;
      expect(main).toContain('needs the admin role');
      expect(main).not.toContain(subscription.id);
      // Their own valid token, from a page they may use.
      await page.goto(`${base}/console/keys`);
      const csrf = await page.locator('input[name="csrf_token"]').first().inputValue();
      for (const [action, form] of [
        ['', { url: 'https://93.184.216.34/hook', format: 'standard' }],
        ['/remove', { subscription_id: subscription.id }],
        ['/resume', { subscription_id: subscription.id }],
      ] as const) {
        const post = await page.context().request.post(`${base}${PAGE}${action}`, {
          form: { csrf_token: csrf, ...form },
          maxRedirects: 0,
        });
        expect(post.status()).toBe(403);
      }
    }
    const left = await svc.store.events.listSubscriptions('acme');
    expect(left.map((s) => [s.id, s.pauseReason])).toEqual([[subscription.id, 'paused by the test']]);
    expect((await subscriptionAudit()).length).toBe(auditBefore);
  });

  it("an admin cannot reach another tenant's subscriptions, and a post without the CSRF token changes nothing", async () => {
    const { subscription: other } = await addSubscription(
      svc.store,
      { tenantId: 'beta', url: receiver.url, format: 'teams', eventKinds: [] },
      { actor: 'test', via: 'cli' },
      allowedUrl,
    );
    await svc.store.events.pauseSubscription(other.id, 'beta paused', new Date().toISOString());
    const { subscription: own } = await addSubscription(
      svc.store,
      { tenantId: 'acme', url: receiver.url, format: 'teams', eventKinds: [] },
      { actor: 'test', via: 'cli' },
      allowedUrl,
    );
    const page = await signedIn('carol', PAGE);
    expect(await page.content()).not.toContain(other.id);
    expect((await page.goto(`${base}/console/tenants/beta/webhooks`))?.status()).toBe(404);
    await page.goto(`${base}${PAGE}`);
    const csrf = await page.locator('input[name="csrf_token"]').first().inputValue();
    // beta's subscription through acme, where carol is admin: not found there, and left as it was.
    for (const action of ['remove', 'resume']) {
      const crossTenant = await page.context().request.post(`${base}${PAGE}/${action}`, {
        form: { csrf_token: csrf, subscription_id: other.id },
        maxRedirects: 0,
      });
      expect(crossTenant.status()).toBe(404);
      expect(await crossTenant.text()).toContain(`acme has no subscription ${other.id}`);
    }
    expect(await svc.store.events.getSubscription(other.id)).toMatchObject({ pauseReason: 'beta paused' });
    // Without the token: refused before anything is done.
    for (const [action, form] of [
      ['', { url: receiver.url, format: 'slack' }],
      ['/remove', { subscription_id: own.id }],
    ] as const) {
      const noCsrf = await page.context().request.post(`${base}${PAGE}${action}`, { form, maxRedirects: 0 });
      expect(noCsrf.status()).toBe(403);
      expect(await noCsrf.text()).toContain('csrf_token_invalid');
    }
    expect((await svc.store.events.listSubscriptions('acme')).map((s) => s.id)).toEqual([own.id]);
    expect((await subscriptionAudit('beta')).map((e) => e.outcome)).toEqual(['added']);
    const ownAudit = (await subscriptionAudit()).filter((e) => e.details?.subscription_id === own.id);
    expect(ownAudit.map((e) => e.outcome)).toEqual(['added']);
  });
});
