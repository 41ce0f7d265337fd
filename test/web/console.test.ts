// The web console in a real browser (Debian's chromium through playwright-core) against the real service and a real
// OpenID provider (oidc-provider, in process): sign-in by redirect, the pages of an approver and of a tenant admin,
// deciding a pending request, API keys shown once, members and exceptions, and the refusals: no membership, no role,
// no tenant, a form without its CSRF token. With SIGNBRIDGE_SCREENSHOTS=1 it writes docs/images/console-*.png.
import { createHash } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packagePath } from '../../src/paths.js';
import { parsePolicyDocument } from '../../src/policy/policy-file.js';
import { RulesPolicyEngine } from '../../src/policy/rules-engine.js';
import { launchBrowser, signInAtIdp, type TestBrowser } from '../helpers/browser.js';
import { type OidcStand, startOidcStand } from '../helpers/oidc-service.js';
import { callAction, type TestService } from '../helpers/service.js';
import type { TestIdp } from '../helpers/test-idp.js';

const ACCOUNTS = {
  carol: { email: 'carol@example.com', email_verified: true, name: 'Carol' },
  alice: { email: 'alice@example.com', email_verified: true, name: 'Alice' },
  bob: { email: 'bob@elsewhere.test', email_verified: true, name: 'Bob' },
};

const SCREENSHOTS = process.env.SIGNBRIDGE_SCREENSHOTS === '1';
const imagesDir = packagePath('docs', 'images');

let stand: OidcStand;
let idp: TestIdp;
let svc: TestService;
let browser: TestBrowser;
let base = '';
const people: Record<string, { context: BrowserContext; page: Page }> = {};

const policy = new RulesPolicyEngine(
  parsePolicyDocument('version: 1\nrules:\n  environments:\n    requireApproval: [production]\n', 'test'),
);
const digest = (m: string) => createHash('sha256').update(m).digest('base64');

beforeAll(async () => {
  stand = await startOidcStand({
    accounts: ACCOUNTS,
    tenants: ['acme'],
    invitations: [
      { email: 'carol@example.com', tenant: 'acme', role: 'admin' },
      { email: 'carol@example.com', tenant: 'acme', role: 'approver' },
      { email: 'alice@example.com', tenant: 'acme', role: 'signer' },
    ],
    app: { policy },
  });
  ({ idp, svc, base } = stand);
  browser = await launchBrowser();
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await stand?.close();
});

/** A browser of its own for `login`, signed in through the IdP by opening `path` (the console sends it there). */
async function signedIn(login: keyof typeof ACCOUNTS, path = '/console'): Promise<Page> {
  const known = people[login];
  if (known) {
    await known.page.goto(`${base}${path}`);
    return known.page;
  }
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(`${base}${path}`);
  expect(page.url().startsWith(idp.issuer), 'the console sends a visitor without a session to the IdP').toBe(true);
  await signInAtIdp(page, idp.issuer, login);
  expect(new URL(page.url()).pathname).toBe(path);
  people[login] = { context, page };
  return page;
}

async function screenshot(page: Page, name: string): Promise<void> {
  if (!SCREENSHOTS) return;
  mkdirSync(imagesDir, { recursive: true });
  await page.screenshot({ path: `${imagesDir}/console-${name}.png`, fullPage: true });
}

describe('the web console in a browser', () => {
  it('a person without membership signs in and is told so, nothing more', async () => {
    const page = await signedIn('bob');
    await expect(page.locator('h1').textContent()).resolves.toBe('No membership');
    expect(await page.locator('main').textContent()).toContain('you have no role in any tenant');
    await page.goto(`${base}/console/tenants/acme/members`);
    expect(await page.locator('h1').textContent()).toBe('Not found');
  });

  it('signs an approver and admin in and shows their tenants', async () => {
    const page = await signedIn('carol');
    expect(await page.locator('h1').textContent()).toBe('Overview');
    const row = page.locator('tr', { has: page.locator('th', { hasText: 'acme' }) });
    expect(await row.textContent()).toMatch(/admin, approver/);
    expect(await page.getByRole('link', { name: 'members' }).count()).toBe(1);
    await screenshot(page, 'overview');
  });

  it('shows a pending request with what a reviewer needs, refuses a rejection without reason, and approves', async () => {
    const signer = await svc.apiKey('signer', 'acme');
    const held = await callAction(svc.app, signer, 'sign', {
      tenant_id: 'acme',
      algorithm: 'ECDSA_SHA_256',
      hash: digest('release 2.4.0'),
      environment: 'production',
      project: 'payments',
      artifact_type: 'jar',
      artifact_version: '2.4.0',
    });
    expect(held.status).toBe(202);
    const requestId = held.body.request_id as string;

    const page = await signedIn('carol', '/console/requests');
    const article = page.locator('article', { hasText: requestId });
    const text = (await article.textContent()) as string;
    for (const expected of ['test signer', 'payments', 'production', 'jar 2.4.0', 'Held by rule', 'Expires']) {
      expect(text).toContain(expected);
    }
    await screenshot(page, 'requests');

    await article.getByRole('button', { name: `Reject ${requestId}` }).click();
    expect(await page.locator('h1').textContent()).toBe('Refused');
    expect(await page.locator('main').textContent()).toContain('a rejection needs a reason');
    expect((await svc.store.requests.get('acme', requestId))?.status).toBe('pending_approval');

    await page.goto(`${base}/console/requests`);
    await page
      .locator('article', { hasText: requestId })
      .getByRole('button', { name: `Approve ${requestId}` })
      .click();
    expect(new URL(page.url()).pathname).toBe('/console/requests'); // POST-redirect-GET
    expect(await page.getByRole('status').textContent()).toMatch(/^Approved/);
    const record = await svc.store.requests.get('acme', requestId);
    expect(record?.status).toBe('approved');
    expect(record?.decisions[0]?.by_person).toBeTruthy();
    // The signer collects the signature with the request id, as after approve_sign.
    const collected = await callAction(svc.app, signer, 'sign', {
      tenant_id: 'acme',
      algorithm: 'ECDSA_SHA_256',
      hash: digest('release 2.4.0'),
      environment: 'production',
      project: 'payments',
      artifact_type: 'jar',
      artifact_version: '2.4.0',
      request_id: requestId,
    });
    expect(collected.status, JSON.stringify(collected.body)).toBe(200);
  });

  it('mints an API key shown once that works, and revokes it', async () => {
    const page = await signedIn('carol', '/console/keys');
    await page.getByLabel('Tenant and role').selectOption('acme approver');
    await page.getByLabel('Expires after').selectOption({ label: '7 days' }); // longer than 12 h: carol is admin
    await page.getByLabel('Label').fill('ci <b>payments</b>');
    await page.getByRole('button', { name: 'Make the key' }).click();
    const token = ((await page.locator('#new-key').textContent()) as string).trim();
    expect(token).toMatch(/^sbk_[0-9a-f]{16}_/);
    const whoami = await fetch(`${base}/oauth/whoami`, { headers: { authorization: `Bearer ${token}` } });
    expect(whoami.status).toBe(200);
    const me = (await whoami.json()) as { roles: string[]; kind: string; email: string; expires_at: string };
    expect(me).toMatchObject({ roles: ['approver'], kind: 'person', email: 'carol@example.com' });
    expect(Date.parse(me.expires_at) - Date.now()).toBeGreaterThan(6 * 86_400_000);

    await page.goto(`${base}/console/keys`);
    expect(await page.locator('main').textContent()).not.toContain(token); // shown once only
    expect(await page.locator('td', { hasText: 'ci <b>payments</b>' }).count()).toBe(1); // shown as text, escaped
    expect(await page.locator('main b').count()).toBe(0);
    await screenshot(page, 'keys');
    const id = /^sbk_([0-9a-f]{16})_/.exec(token)?.[1] as string;
    await page.getByRole('button', { name: `Revoke key ${id}` }).click();
    expect(await page.getByRole('status').textContent()).toContain('revoked');
    expect((await fetch(`${base}/oauth/whoami`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(401);
  });

  it('a long-lived key is an admin choice: a signer is refused one, and sees no pending requests', async () => {
    const page = await signedIn('alice', '/console/keys');
    await page.getByLabel('Tenant and role').selectOption('acme signer');
    await page.getByLabel('Expires after').selectOption({ label: '30 days' });
    await page.getByLabel('Label').fill('ci');
    const before = (await svc.store.apiKeys.list()).length;
    await page.getByRole('button', { name: 'Make the key' }).click();
    expect(await page.locator('h1').textContent()).toBe('Not allowed');
    expect(await page.locator('main').textContent()).toContain('are made by an admin of acme');
    expect((await svc.store.apiKeys.list()).length).toBe(before);
    // A signer does not see what others asked to sign.
    await page.goto(`${base}/console/requests`);
    expect(await page.locator('main').textContent()).toContain('shown to approvers, security reviewers and admins');
    expect(await page.locator('article').count()).toBe(0);
  });

  it('an admin adds and removes members; a non-admin gets 403', async () => {
    const page = await signedIn('carol', '/console/tenants/acme/members');
    await page.getByLabel(/^Email/).fill('dave@example.com');
    await page.getByLabel('Role').selectOption('security_reviewer');
    await page.getByRole('button', { name: 'Add' }).click();
    expect(await page.getByRole('status').textContent()).toContain('membership was added');
    expect(await page.locator('table').textContent()).toContain('dave@example.com (invited)');
    const added = await svc.store.people.listMemberships({ tenantId: 'acme' });
    expect(added.some((m) => m.email === 'dave@example.com' && m.role === 'security_reviewer')).toBe(true);
    await screenshot(page, 'members');
    await page.getByRole('button', { name: 'Remove security_reviewer from dave@example.com (invited)' }).click();
    expect(await page.locator('table').textContent()).not.toContain('dave@example.com');

    const alice = await signedIn('alice', '/console/tenants/acme/members');
    expect(await alice.locator('h1').textContent()).toBe('Not allowed');
    const res = await alice.goto(`${base}/console/tenants/acme/members`);
    expect(res?.status()).toBe(403);
    expect((await alice.goto(`${base}/console/no-such-page`))?.status()).toBe(404);
  });

  it('an admin creates and revokes an exception; the audit page shows the console actions by person', async () => {
    const page = await signedIn('carol', '/console/tenants/acme/exceptions');
    await page.getByLabel(/^Vulnerability id/).fill('GHSA-aaaa-bbbb-cccc');
    await page.getByLabel('Reason').fill('not reachable in our build');
    await page.getByLabel('Expires after (days)').fill('14');
    await page.getByRole('button', { name: 'Create' }).click();
    expect(await page.getByRole('status').textContent()).toContain('exception was created');
    const [exception] = await svc.store.exceptions.list('acme');
    expect(exception?.vulnId).toBe('GHSA-aaaa-bbbb-cccc');
    await screenshot(page, 'exceptions');
    await page.getByRole('button', { name: `Revoke exception ${exception?.id}` }).click();
    expect((await svc.store.exceptions.get('acme', exception?.id as string))?.revokedAt).not.toBe(null);

    await page.goto(`${base}/console/tenants/acme/audit`);
    const log = (await page.locator('table').textContent()) as string;
    const carol = (await svc.store.people.findByEmail('carol@example.com'))[0];
    expect(log).toContain(`person:${carol?.id}`);
    expect(log).toContain('member_add');
    expect(log).toContain('approve_sign');
    await screenshot(page, 'audit');
  });

  it('a form without its CSRF token is refused and changes nothing', async () => {
    const page = await signedIn('carol', '/console/tenants/acme/members');
    const before = await svc.store.people.listMemberships({ tenantId: 'acme' });
    // The browser's own cookies, a form post without the hidden field (what a cross-site form would send).
    const res = await page.context().request.post(`${base}/console/tenants/acme/members`, {
      form: { email: 'mallory@example.com', role: 'admin' },
      maxRedirects: 0,
    });
    expect(res.status()).toBe(403);
    expect(await res.text()).toContain('csrf_token_invalid');
    const wrong = await page.context().request.post(`${base}/console/tenants/acme/members`, {
      form: { email: 'mallory@example.com', role: 'admin', csrf_token: 'not-the-token' },
      maxRedirects: 0,
    });
    expect(wrong.status()).toBe(403);
    expect(await svc.store.people.listMemberships({ tenantId: 'acme' })).toEqual(before);
  });

  it('pages carry the no-script CSP and no-store', async () => {
    const page = await signedIn('carol');
    const res = await page.goto(`${base}/console`);
    const headers = res?.headers() ?? {};
    expect(headers['content-security-policy']).toContain("default-src 'none'");
    expect(headers['cache-control']).toBe('no-store');
  });
});
