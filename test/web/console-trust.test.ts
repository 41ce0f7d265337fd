// The trust-rules page of the console in a real browser (Debian's chromium through playwright-core) against the real
// service and a real OpenID provider: a tenant admin lists, adds and removes rules (audited as the person, via the
// console); a refused rule is shown on the page with what was typed and nothing saved; values are escaped; a signer
// or an approver of the tenant gets 403 for the page and for forged posts with a valid CSRF token; another tenant's
// rule cannot be removed through one's own tenant; a post without the CSRF token changes nothing.
import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addTrustRule } from '../../src/auth/workload/trust-rules-service.js';
import { launchBrowser, signInAtIdp, type TestBrowser } from '../helpers/browser.js';
import { type OidcStand, startOidcStand } from '../helpers/oidc-service.js';
import type { TestService } from '../helpers/service.js';
import type { TestIdp } from '../helpers/test-idp.js';

const GITHUB = 'https://token.actions.githubusercontent.com';

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
const people: Record<string, { context: BrowserContext; page: Page }> = {};

beforeAll(async () => {
  stand = await startOidcStand({
    accounts: ACCOUNTS,
    tenants: ['acme', 'beta'],
    invitations: [
      { email: 'carol@example.com', tenant: 'acme', role: 'admin' },
      { email: 'alice@example.com', tenant: 'acme', role: 'signer' },
      { email: 'dave@example.com', tenant: 'acme', role: 'approver' },
    ],
  });
  ({ idp, svc, base } = stand);
  browser = await launchBrowser();
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await stand?.close();
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

const trustAudit = async (tenant = 'acme') =>
  (await svc.store.audit.recent(tenant, 100)).filter((e) => e.action === 'trust_rule');

describe('trust rules in the console', () => {
  it('an admin finds the page from the overview, adds a rule (escaped, audited as the person) and removes it', async () => {
    const page = await signedIn('carol');
    await page.getByRole('link', { name: 'trust rules' }).click();
    expect(new URL(page.url()).pathname).toBe('/console/tenants/acme/trust');
    expect(await page.locator('h1').textContent()).toBe('Trust rules of acme');
    expect(await page.locator('tbody').textContent()).toContain('No trust rules');

    await page.getByLabel(/^Issuer/).fill(GITHUB);
    await page.getByLabel(/^Audience/).fill('https://signbridge.example');
    await page
      .getByLabel(/^Conditions/)
      .fill('repository_id=123456\nrepository=acme/app\nref=refs/tags/v*\n\nworkflow=<b>release</b>');
    await page.getByLabel(/^Key lifetime/).fill('20');
    // Issue 31: the bound on a token's life, and the claims velocity.perIdentity counts by.
    expect(await page.getByLabel(/^Max token lifetime/).inputValue()).toBe('1d');
    await page.getByLabel(/^Max token lifetime/).fill('2h');
    await page.getByLabel(/^Velocity identity claims/).fill('repository_id');
    await page.getByRole('button', { name: 'Add the rule' }).click();
    expect(new URL(page.url()).pathname).toBe('/console/tenants/acme/trust'); // POST-redirect-GET
    expect(await page.getByRole('status').textContent()).toContain('trust rule was added');

    const [rule, ...others] = await svc.store.workload.listTrustRules('acme');
    expect(others).toEqual([]);
    const carol = (await svc.store.people.findByEmail('carol@example.com'))[0];
    expect(rule).toMatchObject({
      issuer: GITHUB,
      audience: 'https://signbridge.example',
      conditions: {
        repository_id: '123456',
        repository: 'acme/app',
        ref: 'refs/tags/v*',
        workflow: '<b>release</b>',
      },
      role: 'signer',
      keyMinutes: 20,
      maxTokenLifetimeS: 7200,
      identityClaims: ['repository_id'],
      createdBy: `person:${carol?.id}`,
    });
    expect(await page.locator('tbody').textContent()).toContain('tokens living up to 2hvelocity per repository_id');
    const table = (await page.locator('table').textContent()) as string;
    expect(table).toContain(rule?.id);
    expect(table).toContain('<b>release</b>'); // shown as text
    expect(await page.locator('main b').count()).toBe(0);
    // ref without event_name or environment: the warning shows in the rule's row.
    expect(table).toContain('pull_request_target');

    await page.getByRole('button', { name: `Remove trust rule ${rule?.id}` }).click();
    expect(await page.getByRole('status').textContent()).toContain('trust rule was removed');
    expect(await svc.store.workload.listTrustRules('acme')).toEqual([]);
    const audit = await trustAudit();
    expect(audit.map((e) => e.outcome)).toEqual(['removed', 'added']); // newest first
    for (const entry of audit) {
      expect(entry.actor).toBe(`person:${carol?.id}`);
      expect(entry.details).toMatchObject({ rule_id: rule?.id, issuer: GITHUB, via: 'console' });
    }
  });

  it('a refused rule is shown on the page with the reason and what was typed; nothing is saved', async () => {
    const page = await signedIn('carol', '/console/tenants/acme/trust');
    const auditBefore = (await trustAudit()).length;
    for (const [conditions, reason] of [
      ['repository=**', 'the pattern for repository has only wildcards and separators'],
      ['ref=refs/heads/main', 'a rule must pin the workload'],
      ['repository_id 123456', 'each condition is a line NAME=PATTERN'],
    ] as const) {
      await page.getByLabel(/^Issuer/).fill(GITHUB);
      await page.getByLabel(/^Conditions/).fill(conditions);
      await page.getByLabel(/^Key lifetime/).fill('15');
      const answer = page.waitForResponse((r) => r.request().method() === 'POST');
      await page.getByRole('button', { name: 'Add the rule' }).click();
      expect((await answer).status()).toBe(400);
      expect(await page.getByRole('alert').textContent()).toContain(reason);
      expect(await page.getByLabel(/^Conditions/).inputValue()).toBe(conditions);
      expect(await page.getByLabel(/^Issuer/).inputValue()).toBe(GITHUB);
    }
    // Past the form's own limits (a forged post): 90 minutes and the admin role are refused by the service.
    const csrf = await page.locator('input[name="csrf_token"]').first().inputValue();
    for (const [extra, reason] of [
      [{ key_minutes: '90', role: 'signer' }, 'key minutes must be a whole number from 1 to 60'],
      [{ key_minutes: '15', role: 'admin' }, 'role admin cannot come from a workload identity'],
      [{ key_minutes: '15', role: 'signer', max_token_lifetime: '0' }, 'max token lifetime must be from 1m to 3650d'],
      [
        { key_minutes: '15', role: 'signer', max_token_lifetime: '10 years' },
        'max token lifetime must be a whole number with an optional unit',
      ],
      [
        { key_minutes: '15', role: 'signer', identity_claims: 'repository_id jti' },
        'identity claim jti differs from token to token',
      ],
    ] as const) {
      const res = await page.context().request.post(`${base}/console/tenants/acme/trust`, {
        form: { csrf_token: csrf, issuer: GITHUB, conditions: 'repository_id=1', ...extra },
        maxRedirects: 0,
      });
      expect(res.status()).toBe(400);
      expect(await res.text()).toContain(reason);
    }
    expect(await svc.store.workload.listTrustRules('acme')).toEqual([]);
    expect((await trustAudit()).length).toBe(auditBefore);
  });

  it('a signer or an approver of the tenant cannot see or change its rules, even with a valid CSRF token', async () => {
    const { rule } = await addTrustRule(
      svc.store,
      { tenantId: 'acme', issuer: GITHUB, conditions: { repository_id: '42' } },
      { actor: 'test', via: 'cli' },
    );
    for (const login of ['alice', 'dave'] as const) {
      const page = await signedIn(login);
      expect(await page.getByRole('link', { name: 'trust rules' }).count()).toBe(0);
      const res = await page.goto(`${base}/console/tenants/acme/trust`);
      expect(res?.status()).toBe(403);
      expect(await page.locator('main').textContent()).toContain('needs the admin role');
      // Their own valid token, from a page they may use.
      await page.goto(`${base}/console/keys`);
      const csrf = await page.locator('input[name="csrf_token"]').first().inputValue();
      const add = await page.context().request.post(`${base}/console/tenants/acme/trust`, {
        form: { csrf_token: csrf, issuer: GITHUB, conditions: 'repository_id=7', key_minutes: '15' },
        maxRedirects: 0,
      });
      expect(add.status()).toBe(403);
      const remove = await page.context().request.post(`${base}/console/tenants/acme/trust/remove`, {
        form: { csrf_token: csrf, rule_id: rule.id },
        maxRedirects: 0,
      });
      expect(remove.status()).toBe(403);
    }
    expect((await svc.store.workload.listTrustRules('acme')).map((r) => r.id)).toEqual([rule.id]);
    await svc.store.workload.removeTrustRule(rule.id);
  });

  it("an admin cannot reach another tenant's rules, and a post without the CSRF token changes nothing", async () => {
    const { rule: other } = await addTrustRule(
      svc.store,
      { tenantId: 'beta', issuer: GITHUB, conditions: { repository_id: '99' } },
      { actor: 'test', via: 'cli' },
    );
    const page = await signedIn('carol', '/console/tenants/acme/trust');
    expect((await page.goto(`${base}/console/tenants/beta/trust`))?.status()).toBe(404);
    await page.goto(`${base}/console/tenants/acme/trust`);
    const csrf = await page.locator('input[name="csrf_token"]').first().inputValue();
    // beta's rule through acme, where carol is admin: not found there, and still in place.
    const crossTenant = await page.context().request.post(`${base}/console/tenants/acme/trust/remove`, {
      form: { csrf_token: csrf, rule_id: other.id },
      maxRedirects: 0,
    });
    expect(crossTenant.status()).toBe(404);
    expect(await crossTenant.text()).toContain(`acme has no trust rule ${other.id}`);
    const noCsrf = await page.context().request.post(`${base}/console/tenants/acme/trust`, {
      form: { issuer: GITHUB, conditions: 'repository_id=5', key_minutes: '15' },
      maxRedirects: 0,
    });
    expect(noCsrf.status()).toBe(403);
    expect(await noCsrf.text()).toContain('csrf_token_invalid');
    expect(await svc.store.workload.listTrustRules('acme')).toEqual([]);
    expect((await svc.store.workload.listTrustRules('beta')).map((r) => r.id)).toEqual([other.id]);
  });
});
