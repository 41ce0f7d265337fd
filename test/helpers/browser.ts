// A real browser for the web tests: Debian's chromium (installed by scripts/setup.sh, which the test command runs)
// driven by playwright-core, which downloads no browser. Headless, with a fresh profile in a temp dir, and without
// the background traffic (updates, sync, safe browsing) that would try to reach hosts this network refuses.
// No skipping when chromium is missing: that is a broken setup, and the test says so.
import { existsSync, rmSync } from 'node:fs';
import { type BrowserContext, chromium, type Page } from 'playwright-core';
import { makeTempDir } from './service.js';

export const CHROMIUM = process.env.SIGNBRIDGE_CHROMIUM ?? '/usr/bin/chromium';

const FLAGS = [
  '--no-sandbox', // tests run as root in CI containers, where chromium's sandbox cannot start
  '--disable-gpu',
  '--disable-dev-shm-usage',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
  '--no-default-browser-check',
];

export interface TestBrowser {
  context: BrowserContext;
  /** A second, separate browser profile (another person at another desk): its own cookies. */
  newContext(): Promise<BrowserContext>;
  close(): Promise<void>;
}

async function openProfile(): Promise<{ context: BrowserContext; dir: string }> {
  const dir = makeTempDir('signbridge-chromium-');
  const context = await chromium.launchPersistentContext(dir, {
    executablePath: CHROMIUM,
    headless: true,
    args: FLAGS,
    viewport: { width: 1100, height: 800 },
  });
  return { context, dir };
}

export async function launchBrowser(): Promise<TestBrowser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`${CHROMIUM} is missing: run scripts/setup.sh (it installs Debian's chromium)`);
  }
  // A persistent context is what takes a user-data dir (a fresh profile); each one is its own browser.
  const profiles = [await openProfile()];
  return {
    context: (profiles[0] as { context: BrowserContext }).context,
    async newContext() {
      const other = await openProfile();
      profiles.push(other);
      return other.context;
    },
    async close() {
      for (const p of profiles) {
        await p.context.close();
        rmSync(p.dir, { recursive: true, force: true });
      }
    },
  };
}

/**
 * On a page of the test IdP (oidc-provider's development pages): signs in as `login` (any password) and consents,
 * until the browser is back at the service. Does nothing when the IdP still knows this browser and went on by itself.
 */
export async function signInAtIdp(page: Page, issuer: string, login: string): Promise<void> {
  for (let step = 0; step < 4 && page.url().startsWith(issuer); step++) {
    if ((await page.locator('input[name="login"]').count()) > 0) {
      await page.fill('input[name="login"]', login);
      await page.fill('input[name="password"]', 'any');
    }
    await page.click('button[type="submit"]');
    await page.waitForLoadState('load');
  }
  if (page.url().startsWith(issuer)) throw new Error(`still at the IdP after signing in as ${login}: ${page.url()}`);
}
