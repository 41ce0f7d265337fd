// The open redirect of issue 21 in a real browser (Debian's chromium): a sign-in started with
// `return_to=%2F%09%2Fevil.example%2Fx` ended in `Location: /<TAB>/evil.example/x`, which Chromium reads as
// `//evil.example/x` and follows off the service. Requests to any other origin are aborted and navigations to one
// recorded (so an open redirect shows up as a recorded navigation, not as a lookup of a host that does not exist).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchBrowser, signInAtIdp, type TestBrowser } from '../helpers/browser.js';
import { type OidcStand, startOidcStand } from '../helpers/oidc-service.js';

let stand: OidcStand;
let browser: TestBrowser;

beforeAll(async () => {
  stand = await startOidcStand({
    accounts: { erin: { email: 'erin@example.com', email_verified: true, name: 'Erin' } },
    tenants: [],
    invitations: [],
  });
  browser = await launchBrowser();
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await stand?.close();
});

describe('return_to in a real browser', () => {
  it.each([
    ['/<TAB>/evil.example/x', 'return_to=%2F%09%2Fevil.example%2Fx'],
    ['/\\evil.example/x', 'return_to=%2F%5Cevil.example%2Fx'],
  ])('%s: Chromium follows the sign-in to the account page of the service, never elsewhere', async (_name, query) => {
    const allowed = new Set([new URL(stand.base).origin, stand.idp.issuer]);
    const offSite: string[] = [];
    const context = await browser.newContext();
    // Every request, redirect hops included, is seen here; the route below keeps them from going out.
    context.on('request', (request) => {
      if (request.isNavigationRequest() && !allowed.has(new URL(request.url()).origin)) offSite.push(request.url());
    });
    await context.route(
      (url) => !allowed.has(url.origin),
      (route) => route.abort(),
    );
    const page = await context.newPage();
    await page.goto(`${stand.base}/oauth/start?${query}`);
    await signInAtIdp(page, stand.idp.issuer, 'erin');
    await page.waitForLoadState('load');
    expect(offSite).toEqual([]);
    expect(page.url()).toBe(`${stand.base}/oauth/account`);
    expect(await page.locator('main').textContent()).toContain('Signed in as erin@example.com');
  });
});
