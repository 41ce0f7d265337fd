// Sign-in through a real OpenID provider (oidc-provider, in process) and the device flow, over real HTTP with a
// cookie-keeping client: browser sign-in, the whole device flow ending in a signature, and its failure paths.
import { createHash } from 'node:crypto';
import {
  decodeJwt,
  decodeProtectedHeader,
  generateKeyPair,
  importJWK,
  type JWTHeaderParameters,
  type JWTPayload,
  SignJWT,
} from 'jose';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AppOptions, buildApp } from '../../src/app.js';
import type { OidcSettings } from '../../src/auth/oidc/settings.js';
import { parsePolicyDocument } from '../../src/policy/policy-file.js';
import { RulesPolicyEngine } from '../../src/policy/rules-engine.js';
import { BrowserJar, type Page } from '../helpers/browser-jar.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';
import { listenTestIdp, TEST_CLIENT, type TestIdp } from '../helpers/test-idp.js';

const LONG_SUBJECT = `s${'0'.repeat(255)}`;
const ACCOUNTS = {
  alice: { email: 'alice@example.com', email_verified: true, name: 'Alice' },
  bob: { email: 'bob@elsewhere.test', email_verified: true, name: 'Bob (no membership)' },
  carol: { email: 'carol@example.com', email_verified: true, name: 'Carol' },
  dave: { email: 'dave@example.com', email_verified: false, groups: ['builders'] },
  gina: { email: 'gina@example.com', email_verified: true },
  hank: { email: 'hank@example.com', email_verified: true },
  ivan: { email: 'ivan@example.com', email_verified: true },
  judy: { email: 'judy@example.com', email_verified: true },
  kim: { email: 'kim@example.com', email_verified: true, name: `Kim\u0007 ${'k'.repeat(500)}` },
  long_email: { email: `${'e'.repeat(250)}@example.com`, email_verified: true },
  [LONG_SUBJECT]: { email: 'long-subject@example.com', email_verified: true },
};

// The service's clock runs ahead of the real one by `skew` (the IdP's tokens use the real clock).
let skew = 0;
const now = () => new Date(Date.now() + skew);

let idp: TestIdp;
let svc: TestService;
let base = '';
let settings: OidcSettings;

const policy = new RulesPolicyEngine(
  parsePolicyDocument('version: 1\nrules:\n  environments:\n    requireApproval: [production]\n', 'test'),
);

beforeAll(async () => {
  idp = await listenTestIdp(ACCOUNTS);
  settings = {
    issuer: idp.issuer,
    clientId: TEST_CLIENT.id,
    clientSecret: TEST_CLIENT.secret,
    scopes: ['openid', 'email', 'profile', 'groups'],
    groupsClaim: 'groups',
    personKeyMs: 12 * 3_600_000,
    autoJoin: [{ group: 'builders', tenant: 'acme', role: 'signer' }],
    allowInsecureIssuer: true,
  };
  svc = await startTestService({ now, policy, oauth: { oidc: settings, publicUrl: () => base } });
  base = await svc.app.listen({ host: '127.0.0.1', port: 0 });
  idp.start(`${base}/oauth/callback`);
  await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'acme', key_spec: 'ECC_NIST_P256' });
  await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'beta', key_spec: 'ECC_NIST_P256' });
  // Invitations by email, before anyone signed in: claimed at the first sign-in with that verified email.
  const invite = (email: string, tenantId: string, role: 'signer' | 'approver') =>
    svc.store.people.addMembership({
      tenantId,
      role,
      personId: null,
      email,
      createdAt: new Date().toISOString(),
      createdBy: 'test',
    });
  await invite('alice@example.com', 'acme', 'signer');
  await invite('alice@example.com', 'acme', 'approver');
  await invite('alice@example.com', 'beta', 'signer');
  await invite('carol@example.com', 'acme', 'approver');
});
afterAll(async () => {
  await svc?.close();
  await idp?.close();
});

const CLI_AGENT = 'signbridge-cli/test';

async function post(path: string, body?: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${base}${path}`, {
    method: 'POST',
    headers: { 'user-agent': CLI_AGENT, ...(body !== undefined && { 'content-type': 'application/json' }), ...headers },
    ...(body !== undefined && { body: JSON.stringify(body) }),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

async function startDevice(body: Record<string, unknown> = { tenant_id: 'acme', client_name: 'build-07' }) {
  const res = await post('/oauth/device/start', body);
  expect(res.status).toBe(200);
  return res.body as {
    device_code: string;
    user_code: string;
    verification_uri: string;
    verification_uri_complete: string;
  };
}

const poll = (deviceCode: string) => post(`/oauth/device/poll?device_code=${encodeURIComponent(deviceCode)}`);

/** Opens verification_uri_complete in a fresh browser, signs in at the IdP; returns the service's page. */
async function openAndSignIn(
  url: string,
  login: string,
  jar = new BrowserJar(),
): Promise<{ jar: BrowserJar; page: Page }> {
  const first = await jar.go(url);
  const page = first.url.startsWith(idp.issuer) ? await jar.signInAtIdp(first, login) : first;
  return { jar, page };
}

/** The whole device flow for `login`: start, sign in, confirm, poll once. Returns the poll's answer. */
async function deviceLogin(login: string, body?: Record<string, unknown>) {
  const started = await startDevice(body);
  const { page, jar } = await openAndSignIn(started.verification_uri_complete, login);
  expect(page.html).toContain('Confirm the device sign-in');
  const done = await jar.submit(page, { decision: 'confirm' });
  expect(done.status).toBe(200);
  return poll(started.device_code);
}

const digest = (m: string) => createHash('sha256').update(m).digest('base64');

describe('browser sign-in', () => {
  it('round trip: redirect to the IdP with PKCE S256, callback, a session cookie, the account page', async () => {
    const jar = new BrowserJar();
    const start = await jar.go(`${base}/oauth/start`, { follow: false });
    expect(start.status).toBe(302);
    const location = new URL(start.headers.get('location') as string);
    expect(location.origin).toBe(idp.issuer);
    expect(location.searchParams.get('code_challenge_method')).toBe('S256');
    expect(location.searchParams.get('nonce')).toBeTruthy();
    expect(location.searchParams.get('redirect_uri')).toBe(`${base}/oauth/callback`);
    const page = await jar.signInAtIdp(await jar.go(location.href), 'alice');
    expect(page.status).toBe(200);
    expect(page.url).toBe(`${base}/oauth/account`);
    expect(page.html).toContain('Signed in as alice@example.com');
    expect(page.headers.get('content-security-policy')).toContain("frame-ancestors 'none'");
    expect(page.html).toContain('acme: approver');
    const sessionCookie = page.setCookies.find((c) => c.startsWith('signbridge-session='));
    expect(sessionCookie).toMatch(/HttpOnly/);
    expect(sessionCookie).toMatch(/SameSite=Lax/);
    const [person] = await svc.store.people.findByEmail('alice@example.com');
    expect(person?.issuer).toBe(idp.issuer);
    expect(person?.subject).toBe('alice');
    // The invitations became hers.
    expect((await svc.store.people.rolesIn(person?.id as string, 'acme')).sort()).toEqual(['approver', 'signer']);

    // Sign-out needs the CSRF token; with it, the session ends.
    const noToken = await jar.go(`${base}/oauth/logout`, { method: 'POST', form: {} });
    expect(noToken.status).toBe(403);
    expect((await jar.go(`${base}/oauth/account`, { follow: false })).status).toBe(200);
    const out = await jar.submit(page);
    expect(out.html).toContain('Signed out');
    expect((await jar.go(`${base}/oauth/account`, { follow: false })).status).toBe(303);
  });

  it('a person with no membership signs in and is told so, nothing more', async () => {
    const { page } = await openAndSignIn(`${base}/oauth/account`, 'bob');
    expect(page.status).toBe(200);
    expect(page.html).toContain('no membership in any tenant');
    const [bob] = await svc.store.people.findByEmail('bob@elsewhere.test');
    expect(await svc.store.people.listMemberships({ personId: bob?.id as string })).toEqual([]);
  });

  it('a group claim auto-joins; an unverified email is display data only', async () => {
    await openAndSignIn(`${base}/oauth/account`, 'dave');
    const [dave] = await svc.store.people.findBySubject('dave');
    expect(dave?.emailVerified).toBe(false);
    expect(await svc.store.people.rolesIn(dave?.id as string, 'acme')).toEqual(['signer']);
    expect(await svc.store.people.findByEmail('dave@example.com')).toEqual([]);
  });

  it('a callback whose state does not match the browser is refused and opens no session', async () => {
    const jar = new BrowserJar();
    await jar.go(`${base}/oauth/start`, { follow: false });
    const res = await jar.go(`${base}/oauth/callback?code=forged&state=not-the-one`);
    expect(res.status).toBe(400);
    expect(res.html).toContain('invalid_sign_in');
    expect(jar.cookie(base, 'signbridge-session')).toBeUndefined();
  });

  it('an ID token whose nonce does not match the attempt is refused and creates nothing', async () => {
    const jar = new BrowserJar();
    const start = await jar.go(`${base}/oauth/start`, { follow: false });
    // Swap the nonce kept for this attempt, as if the ID token had been made for another sign-in.
    await svc.run(sql`UPDATE oauth_attempts SET nonce = ${'another-nonce'}`);
    const page = await jar.signInAtIdp(await jar.go(start.headers.get('location') as string), 'carol');
    expect(page.status).toBe(400);
    expect(page.html).toMatch(/invalid_sign_in/);
    expect(page.html).toMatch(/nonce/);
    expect(jar.cookie(base, 'signbridge-session')).toBeUndefined();
    expect(await svc.store.people.findByEmail('carol@example.com')).toEqual([]);
  });
});

describe('return_to after sign-in', () => {
  /** Signs carol in from /oauth/start with this raw query string; returns the page the sign-in ended on. */
  async function signInReturningTo(rawQuery: string) {
    const jar = new BrowserJar();
    jar.stayOn = [new URL(base).origin, idp.issuer];
    const start = await jar.go(`${base}/oauth/start?${rawQuery}`, { follow: false });
    expect(start.status).toBe(302);
    const page = await jar.signInAtIdp(await jar.go(start.headers.get('location') as string), 'carol');
    return { page, jar };
  }

  it.each([
    ['a TAB the browser drops (/<TAB>/evil.example/x)', 'return_to=%2F%09%2Fevil.example%2Fx'],
    ['a backslash read as a slash (/\\evil.example)', `return_to=${encodeURIComponent('/\\evil.example')}`],
    ['backslashes only (\\\\evil.example)', `return_to=${encodeURIComponent('\\\\evil.example/x')}`],
    ['protocol-relative (//evil.example)', `return_to=${encodeURIComponent('//evil.example/x')}`],
    ['another origin (https://evil.example)', `return_to=${encodeURIComponent('https://evil.example/x')}`],
    ['a CR/LF before another host', `return_to=${encodeURIComponent('/\r\n/evil.example')}`],
  ])('%s: the sign-in completes and ends on the account page of this service', async (_name, query) => {
    const { page, jar } = await signInReturningTo(query);
    expect(page.status).toBe(200);
    expect(page.url).toBe(`${base}/oauth/account`);
    expect(page.html).toContain('Signed in as carol@example.com');
    expect(jar.cookie(base, 'signbridge-session')).toBeTruthy();
  });

  it.each([
    ['CR and LF (header splitting)', '/oauth/account?x=1\r\nSet-Cookie: a=b', '/oauth/account?x=1Set-Cookie:%20a=b'],
    ['NUL', '/oauth/account?n=a\u0000b', '/oauth/account?n=a%00b'],
    ['a non-Latin-1 character', '/oauth/account?who=\u{1F600}', '/oauth/account?who=%F0%9F%98%80'],
    ['a Latin-1 letter', '/oauth/account?name=\u00e9', '/oauth/account?name=%C3%A9'],
    ['its own origin, absolute', 'SELF/oauth/account?full=1', '/oauth/account?full=1'],
  ])('%s: no 500; the sign-in completes and Location is the percent-encoded path on this service', async (_n, raw, path) => {
    const { page, jar } = await signInReturningTo(`return_to=${encodeURIComponent(raw.replace('SELF', base))}`);
    expect(page.status).toBe(200);
    expect(page.url).toBe(`${base}${path}`);
    expect(page.html).toContain('Signed in as carol@example.com');
    expect(jar.cookie(base, 'signbridge-session')).toBeTruthy();
  });
});

describe('the ID token', () => {
  type SigningKey = Parameters<SignJWT['sign']>[0];
  /** The token signed again with `key` under the provider's own header (alg, kid), its claims changed by `change`. */
  const resign =
    (key: SigningKey, change: (claims: JWTPayload) => JWTPayload = (c) => c) =>
    async (idToken: string) =>
      new SignJWT(change(decodeJwt(idToken)))
        .setProtectedHeader(decodeProtectedHeader(idToken) as JWTHeaderParameters)
        .sign(key);
  const providerKey = async (): Promise<SigningKey> => importJWK(idp.signingKey, 'RS256');

  /** Signs `login` in while the IdP's /token answers go through `rewrite`. */
  async function signInRewritten(login: string, rewrite: (idToken: string) => Promise<string>) {
    const jar = new BrowserJar();
    idp.rewriteIdToken = rewrite;
    try {
      return { page: await jar.signInAtIdp(await jar.go(`${base}/oauth/start`), login), jar };
    } finally {
      idp.rewriteIdToken = undefined;
    }
  }

  it("signed with a key not in the IdP's JWKS, under the IdP's kid: refused, no person, no session", async () => {
    const foreign = await generateKeyPair('RS256');
    const { page, jar } = await signInRewritten('ivan', resign(foreign.privateKey));
    expect(page.status).toBe(400);
    expect(page.html).toContain('invalid_sign_in');
    expect(page.html).toMatch(/signature/i);
    expect(jar.cookie(base, 'signbridge-session')).toBeUndefined();
    expect(await svc.store.people.findBySubject('ivan')).toEqual([]);
    // The same token signed with the IdP's own key passes the proxy unharmed: the key made the difference.
    const honest = await signInRewritten('ivan', resign(await providerKey()));
    expect(honest.page.status).toBe(200);
    expect(honest.page.url).toBe(`${base}/oauth/account`);
  });

  it('issued 30 days in the future: refused; 30 s ahead (clocks that differ a little) is accepted', async () => {
    const key = await providerKey();
    const ahead = (seconds: number) => resign(key, (c) => ({ ...c, iat: Math.floor(Date.now() / 1000) + seconds }));
    const { page, jar } = await signInRewritten('judy', ahead(30 * 86_400));
    expect(page.status).toBe(400);
    expect(page.html).toContain('invalid_sign_in');
    expect(page.html).toContain('claim iat');
    expect(jar.cookie(base, 'signbridge-session')).toBeUndefined();
    expect(await svc.store.people.findBySubject('judy')).toEqual([]);
    const slightly = await signInRewritten('judy', ahead(30));
    expect(slightly.page.status).toBe(200);
    expect(await svc.store.people.findBySubject('judy')).toHaveLength(1);
  });
});

describe('claims from the IdP', () => {
  it('a name longer than 200 characters is cut to 200, control characters dropped', async () => {
    const { page } = await openAndSignIn(`${base}/oauth/account`, 'kim');
    expect(page.status).toBe(200);
    const [kim] = await svc.store.people.findBySubject('kim');
    expect(kim?.name).toBe(`Kim ${'k'.repeat(196)}`);
  });

  it('an email longer than 254 characters refuses the sign-in, naming the claim', async () => {
    const { page, jar } = await openAndSignIn(`${base}/oauth/account`, 'long_email');
    expect(page.status).toBe(400);
    expect(page.html).toContain('invalid_sign_in');
    expect(page.html).toContain('claim email');
    expect(jar.cookie(base, 'signbridge-session')).toBeUndefined();
    expect(await svc.store.people.findBySubject('long_email')).toEqual([]);
  });

  it('a subject longer than 255 characters refuses the sign-in, naming the claim', async () => {
    const { page, jar } = await openAndSignIn(`${base}/oauth/account`, LONG_SUBJECT);
    expect(page.status).toBe(400);
    expect(page.html).toContain('claim sub');
    expect(jar.cookie(base, 'signbridge-session')).toBeUndefined();
    expect(await svc.store.people.findBySubject(LONG_SUBJECT)).toEqual([]);
  });
});

describe('browser sessions', () => {
  it('a new sign-in rotates the session; the old id no longer works', async () => {
    const { jar } = await openAndSignIn(`${base}/oauth/account`, 'alice');
    const old = jar.cookie(base, 'signbridge-session') as string;
    await jar.signInAtIdp(await jar.go(`${base}/oauth/start`), 'alice');
    const fresh = jar.cookie(base, 'signbridge-session');
    expect(fresh).toBeTruthy();
    expect(fresh).not.toBe(old);
    const stale = new BrowserJar();
    stale.setCookie(base, 'signbridge-session', old);
    expect((await stale.go(`${base}/oauth/account`, { follow: false })).status).toBe(303);
    expect((await jar.go(`${base}/oauth/account`, { follow: false })).status).toBe(200);
  });

  it('a session unused for 30 minutes ends', async () => {
    const { jar } = await openAndSignIn(`${base}/oauth/account`, 'alice');
    skew = 29 * 60_000;
    try {
      expect((await jar.go(`${base}/oauth/account`, { follow: false })).status).toBe(200);
      skew = 29 * 60_000 + 31 * 60_000; // 31 minutes after the last use
      expect((await jar.go(`${base}/oauth/account`, { follow: false })).status).toBe(303);
    } finally {
      skew = 0;
    }
  });

  it('a session used all day still ends 12 hours after sign-in (absolute expiry)', async () => {
    const { jar } = await openAndSignIn(`${base}/oauth/account`, 'alice');
    try {
      // Used every 20 minutes, so the idle expiry never ends it.
      for (let minutes = 20; minutes < 12 * 60; minutes += 20) {
        skew = minutes * 60_000;
        expect((await jar.go(`${base}/oauth/account`, { follow: false })).status).toBe(200);
      }
      skew = 12 * 3_600_000 + 60_000;
      expect((await jar.go(`${base}/oauth/account`, { follow: false })).status).toBe(303);
    } finally {
      skew = 0;
    }
  });

  it('a disabled person signs in and gets no session', async () => {
    await openAndSignIn(`${base}/oauth/account`, 'gina');
    const [gina] = await svc.store.people.findBySubject('gina');
    await svc.store.people.setDisabled(gina?.id as string, new Date().toISOString());
    try {
      const { page, jar } = await openAndSignIn(`${base}/oauth/account`, 'gina');
      expect(page.status).toBe(403);
      expect(page.html).toContain('Account disabled');
      expect(jar.cookie(base, 'signbridge-session')).toBeUndefined();
    } finally {
      await svc.store.people.setDisabled(gina?.id as string, null);
    }
  });

  it('the IdP unreachable at the token exchange: 503 idp_unavailable, nothing created; it recovers', async () => {
    const jar = new BrowserJar();
    idp.broken.add('/token');
    let page: Page;
    try {
      page = await jar.signInAtIdp(await jar.go(`${base}/oauth/start`), 'hank');
    } finally {
      idp.broken.delete('/token');
    }
    expect(page.status).toBe(503);
    expect(page.html).toContain('idp_unavailable');
    expect(jar.cookie(base, 'signbridge-session')).toBeUndefined();
    expect(await svc.store.people.findBySubject('hank')).toEqual([]);
    const again = await jar.signInAtIdp(await jar.go(`${base}/oauth/start`), 'hank');
    expect(again.status).toBe(200);
    expect(await svc.store.people.findBySubject('hank')).toHaveLength(1);
  });
});

describe('device flow', () => {
  it('start -> verification page -> IdP sign-in -> confirm -> poll: one key, once, that signs', async () => {
    const started = await startDevice();
    expect(started.user_code).toMatch(/^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/);
    expect(started.device_code).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(started.verification_uri).toBe(`${base}/oauth/device`);
    expect(await poll(started.device_code)).toMatchObject({ status: 400, body: { error: 'authorization_pending' } });

    const { page, jar } = await openAndSignIn(started.verification_uri_complete, 'alice');
    // The code is pre-filled but the confirmation is never skipped: it shows who asked, for what.
    expect(page.html).toContain(started.user_code);
    expect(page.html).toContain('build-07');
    expect(page.html).toContain(CLI_AGENT);
    expect(page.html).toMatch(/<dt>Tenant<\/dt><dd>acme<\/dd>/);
    expect(page.html).toContain('signer, approver');
    const done = await jar.submit(page, { decision: 'confirm' });
    expect(done.html).toContain('Device signed in');

    const granted = await poll(started.device_code);
    expect(granted.status).toBe(200);
    expect(granted.body).toMatchObject({
      token_type: 'Bearer',
      tenant_id: 'acme',
      roles: ['signer', 'approver'],
      email: 'alice@example.com',
    });
    expect(granted.body.expires_in).toBeGreaterThan(12 * 3600 - 60);
    expect(granted.body.expires_in).toBeLessThanOrEqual(12 * 3600);
    expect(Date.parse(granted.body.expires_at as string)).toBeGreaterThan(Date.now() + 11 * 3_600_000);
    // A second poll with the same code is refused.
    expect(await poll(started.device_code)).toMatchObject({ status: 400, body: { error: 'expired_token' } });

    const key = granted.body.api_key as string;
    const signed = await callAction(svc.app, key, 'sign', {
      tenant_id: 'acme',
      algorithm: 'ECDSA_SHA_256',
      hash: digest('device flow artifact'),
    });
    expect(signed.status).toBe(200);
    expect(signed.body.signature).toBeTruthy();
    const who = await fetch(`${base}/oauth/whoami`, { headers: { authorization: `Bearer ${key}` } });
    expect(await who.json()).toMatchObject({
      kind: 'person',
      tenant_id: 'acme',
      email: 'alice@example.com',
      subject: 'alice',
    });
  });
});

describe('device flow failure paths', () => {
  it('a wrong code is refused on the page; an expired code is refused on the page and the poll', async () => {
    const { jar } = await openAndSignIn(`${base}/oauth/account`, 'alice');
    const wrong = await jar.go(`${base}/oauth/device?user_code=BBBB-BBBB`);
    expect(wrong.status).toBe(400);
    expect(wrong.html).toContain('unknown, expired or already used');
    expect(wrong.html).toMatch(/<label for="user_code">/);

    const started = await startDevice();
    skew = 601_000;
    try {
      expect(await poll(started.device_code)).toMatchObject({ status: 400, body: { error: 'expired_token' } });
      const late = await jar.go(started.verification_uri_complete);
      expect(late.status).toBe(400);
    } finally {
      skew = 0;
    }
    expect(await poll('never-issued-device-code')).toMatchObject({ status: 400, body: { error: 'expired_token' } });
  });

  it('slow_down when polling faster than the interval; the interval grows by 5 s', async () => {
    const started = await startDevice();
    expect((await poll(started.device_code)).body.error).toBe('authorization_pending');
    const fast = await poll(started.device_code);
    expect(fast).toMatchObject({ status: 400, body: { error: 'slow_down' } });
    expect(fast.body.reason).toContain('every 10 s');
    skew = 6_000; // past 5 s, not past the grown 10 s
    try {
      expect((await poll(started.device_code)).body.error).toBe('slow_down');
      skew = 30_000;
      expect((await poll(started.device_code)).body.error).toBe('authorization_pending');
    } finally {
      skew = 0;
    }
  });

  it('Deny: the poll answers access_denied', async () => {
    const started = await startDevice();
    const { page, jar } = await openAndSignIn(started.verification_uri_complete, 'alice');
    const denied = await jar.submit(page, { decision: 'deny' });
    expect(denied.html).toContain('Denied');
    expect(await poll(started.device_code)).toMatchObject({ status: 400, body: { error: 'access_denied' } });
    const [alice] = await svc.store.people.findByEmail('alice@example.com');
    const last = (await svc.store.audit.read(0, 100_000)).filter((e) => e.action === 'device_sign_in').at(-1);
    expect(last).toMatchObject({ actor: `person:${alice?.id}`, outcome: 'denied', tenantId: 'acme' });
    expect(last?.details).toMatchObject({ client_name: 'build-07', address: '127.0.0.1' });
  });

  it('a missing or wrong CSRF token changes nothing', async () => {
    const started = await startDevice();
    const { jar } = await openAndSignIn(started.verification_uri_complete, 'alice');
    const code = started.user_code;
    const missing = await jar.go(`${base}/oauth/device/decision`, {
      method: 'POST',
      form: { user_code: code, tenant_id: 'acme', decision: 'confirm' },
    });
    expect(missing.status).toBe(403);
    expect(missing.html).toContain('csrf_token_invalid');
    const wrong = await jar.go(`${base}/oauth/device/decision`, {
      method: 'POST',
      form: { user_code: code, tenant_id: 'acme', decision: 'confirm', csrf_token: 'x'.repeat(43) },
    });
    expect(wrong.status).toBe(403);
    expect(await poll(started.device_code)).toMatchObject({ status: 400, body: { error: 'authorization_pending' } });
  });

  it("opening a colleague's code without a membership changes nothing; the colleague still signs the device in", async () => {
    const started = await startDevice();
    const auditBefore = (await svc.store.audit.read(0, 100_000)).length;
    const { page } = await openAndSignIn(started.verification_uri_complete, 'bob');
    expect(page.status).toBe(403);
    expect(page.html).toContain('no role in acme');
    // Opened again (a reload, a link preview): still nothing.
    const { page: again } = await openAndSignIn(started.verification_uri_complete, 'bob');
    expect(again.status).toBe(403);
    expect(await poll(started.device_code)).toMatchObject({ status: 400, body: { error: 'authorization_pending' } });
    const entries = (await svc.store.audit.read(0, 100_000)).slice(auditBefore);
    expect(entries.filter((e) => e.action === 'device_sign_in')).toEqual([]);
    skew = 6_000; // past the poll interval
    try {
      const { page: hers, jar } = await openAndSignIn(started.verification_uri_complete, 'alice');
      expect(hers.html).toContain('Confirm the device sign-in');
      await jar.submit(hers, { decision: 'confirm' });
      expect(await poll(started.device_code)).toMatchObject({ status: 200, body: { tenant_id: 'acme' } });
    } finally {
      skew = 0;
    }
  });

  it('a person with no membership who denies (the form on the page) or confirms: the poll answers access_denied', async () => {
    const started = await startDevice();
    const { page, jar } = await openAndSignIn(started.verification_uri_complete, 'bob');
    expect(page.status).toBe(403);
    const denied = await jar.submit(page, { decision: 'deny' });
    expect(denied.status).toBe(200);
    expect(denied.html).toContain('The device was not signed in');
    expect(await poll(started.device_code)).toMatchObject({ status: 400, body: { error: 'access_denied' } });
    // The confirmation POST itself, without the form's deny button, denies too.
    const other = await startDevice();
    const { page: second, jar: bobs } = await openAndSignIn(other.verification_uri_complete, 'bob');
    const csrf = /name="csrf_token" value="([^"]+)"/.exec(second.html)?.[1] as string;
    const confirmed = await bobs.go(`${base}/oauth/device/decision`, {
      method: 'POST',
      form: { csrf_token: csrf, user_code: other.user_code, tenant_id: 'acme', decision: 'confirm' },
    });
    expect(confirmed.status).toBe(403);
    expect(confirmed.html).toContain('the device was denied');
    expect(await poll(other.device_code)).toMatchObject({ status: 400, body: { error: 'access_denied' } });
  });

  it('without a tenant, the person picks one of theirs', async () => {
    const started = await startDevice({});
    const { page, jar } = await openAndSignIn(started.verification_uri_complete, 'alice');
    expect(page.html).toContain('<legend>Tenant the key acts for</legend>');
    await jar.submit(page, { decision: 'confirm', tenant_id: 'beta' });
    expect((await poll(started.device_code)).body).toMatchObject({ tenant_id: 'beta', roles: ['signer'] });
  });
});

describe('person keys', () => {
  it('four eyes between people: another key of the requester is refused; another person approves', async () => {
    const key1 = (await deviceLogin('alice')).body.api_key as string;
    const key2 = (await deviceLogin('alice')).body.api_key as string;
    const carol = (await deviceLogin('carol')).body.api_key as string;
    const pending = await callAction(svc.app, key1, 'sign', {
      tenant_id: 'acme',
      algorithm: 'ECDSA_SHA_256',
      hash: digest('production release'),
      environment: 'production',
    });
    expect(pending.status).toBe(202);
    const self = await callAction(svc.app, key2, 'approve_sign', {
      tenant_id: 'acme',
      request_id: pending.body.request_id,
    });
    expect(self.status).toBe(403);
    expect(self.body.error).toBe('self_approval');
    const ok = await callAction(svc.app, carol, 'approve_sign', {
      tenant_id: 'acme',
      request_id: pending.body.request_id,
    });
    expect(ok.status).toBe(200);
    const [alice] = await svc.store.people.findByEmail('alice@example.com');
    const [carolP] = await svc.store.people.findByEmail('carol@example.com');
    const audit = await svc.store.audit.read(0, 10_000);
    const approval = audit.filter((e) => e.action === 'approve_sign').at(-1);
    expect(approval?.details).toMatchObject({ person: carolP?.id, requester_person: alice?.id });
    const request = await svc.store.requests.get('acme', pending.body.request_id as string);
    expect(request?.decisions[0]?.by_person).toBe(carolP?.id);
  });

  it('identity inputs come from the server for a person key; a body claiming otherwise is a 400', async () => {
    const key = (await deviceLogin('alice')).body.api_key as string;
    const [alice] = await svc.store.people.findByEmail('alice@example.com');
    const sign = (extra: Record<string, unknown>) =>
      callAction(svc.app, key, 'sign', { tenant_id: 'acme', algorithm: 'ECDSA_SHA_256', hash: digest('x'), ...extra });
    expect((await sign({ identity_id: 'someone-else' })).body.error).toBe('invalid_request');
    expect((await sign({ identity_status: 'inactive' })).body.error).toBe('invalid_request');
    expect((await sign({ identity_id: alice?.id })).status).toBe(200);
  });

  it('expired and revoked keys no longer work', async () => {
    const key = (await deviceLogin('alice')).body.api_key as string;
    const whoami = () => fetch(`${base}/oauth/whoami`, { headers: { authorization: `Bearer ${key}` } });
    expect((await whoami()).status).toBe(200);
    skew = 12 * 3_600_000 + 1000;
    try {
      const expired = await callAction(svc.app, key, 'sign', {
        tenant_id: 'acme',
        algorithm: 'ECDSA_SHA_256',
        hash: digest('late'),
      });
      expect(expired.status).toBe(401);
      expect(expired.body.reason).toContain('expired');
    } finally {
      skew = 0;
    }
    expect(await post('/oauth/revoke', undefined, { authorization: `Bearer ${key}` })).toEqual({
      status: 200,
      body: { revoked: true },
    });
    expect((await whoami()).status).toBe(401);
    expect((await post('/oauth/revoke', undefined, { authorization: `Bearer ${key}` })).status).toBe(401);
  });

  it('a membership removed while its key is live: the key stops at once; other roles stay', async () => {
    const key = (await deviceLogin('carol')).body.api_key as string;
    const getKey = () => callAction(svc.app, key, 'get_public_key', { tenant_id: 'acme' });
    expect((await getKey()).status).toBe(200);
    const [carol] = await svc.store.people.findByEmail('carol@example.com');
    const removed = await svc.store.people.removeMembership(
      'acme',
      'approver',
      { personId: carol?.id as string },
      new Date().toISOString(),
    );
    expect(removed.removed).toBe(1);
    expect(removed.keysRevoked.length).toBeGreaterThanOrEqual(1);
    expect((await getKey()).status).toBe(401);
  });

  it('a disabled person: keys fail and the browser session ends; enabled again, the key works', async () => {
    const { jar } = await openAndSignIn(`${base}/oauth/account`, 'dave');
    const key = (await deviceLogin('dave')).body.api_key as string;
    const getKey = () => callAction(svc.app, key, 'get_public_key', { tenant_id: 'acme' });
    expect((await getKey()).status).toBe(200);
    const [dave] = await svc.store.people.findBySubject('dave');
    await svc.store.people.setDisabled(dave?.id as string, new Date().toISOString());
    const refused = await getKey();
    expect(refused.status).toBe(401);
    expect(refused.body.reason).toContain('disabled');
    expect((await jar.go(`${base}/oauth/account`, { follow: false })).status).toBe(303);
    await svc.store.people.setDisabled(dave?.id as string, null);
    expect((await getKey()).status).toBe(200);
  });

  it('admin keys: whoami says admin; their identity inputs still come from the body', async () => {
    const admin = await svc.apiKey('signer', 'acme');
    const who = await fetch(`${base}/oauth/whoami`, { headers: { authorization: `Bearer ${admin}` } });
    expect(await who.json()).toEqual({
      tenant_id: 'acme',
      roles: ['signer'],
      expires_at: null,
      email: null,
      subject: null,
      kind: 'admin',
    });
    const signed = await callAction(svc.app, admin, 'sign', {
      tenant_id: 'acme',
      algorithm: 'ECDSA_SHA_256',
      hash: digest('admin'),
      identity_id: 'ci-runner-1',
    });
    expect(signed.status).toBe(200);
  });
});

describe('documents and limits', () => {
  it('the OpenAPI document has the device endpoints with their bodies, and /oauth/start', async () => {
    const doc = (await (await fetch(`${base}/api/openapi.json`)).json()) as {
      paths: Record<string, Record<string, Record<string, unknown>>>;
    };
    expect(doc.paths['/oauth/device/start']?.post?.requestBody).toBeTruthy();
    const pollOp = doc.paths['/oauth/device/poll']?.post as { parameters: Array<{ name: string }>; responses: object };
    expect(pollOp.parameters.map((p) => p.name)).toContain('device_code');
    expect(Object.keys(pollOp.responses)).toEqual(expect.arrayContaining(['200', '400']));
    expect(doc.paths['/oauth/start']?.get).toBeTruthy();
    expect(doc.paths['/oauth/whoami']?.get).toBeTruthy();
  });

  it('code entry is rate-limited per address', async () => {
    const { jar } = await openAndSignIn(`${base}/oauth/account`, 'alice');
    const started = await startDevice();
    let last = 0;
    for (let i = 0; i < 11; i++)
      last = (await jar.go(`${base}/oauth/device?user_code=BBBB-BBB${'BCDFGHJKLMN'[i]}`)).status;
    expect(last).toBe(429);
    // Even the right code waits now.
    expect((await jar.go(started.verification_uri_complete)).status).toBe(429);
    // The count is in the store: another instance on the same database refuses this address too.
    const other = await buildApp({
      store: svc.store,
      keyStore: svc.keyStores,
      now,
      oauth: { oidc: settings, publicUrl: () => base },
    });
    try {
      const res = await other.inject({
        url: '/oauth/device?user_code=BBBB-BBBB',
        remoteAddress: '127.0.0.1',
        headers: { cookie: `signbridge-session=${jar.cookie(base, 'signbridge-session')}` },
      });
      expect(res.statusCode).toBe(429);
      expect(res.body).toContain('Too many wrong codes');
    } finally {
      await other.close();
    }
  });
});

describe('without an identity provider', () => {
  // A second app on the same store and token (a process initialises PKCS#11 once).
  const otherApp = (oauth: AppOptions['oauth']) =>
    buildApp({ store: svc.store, keyStore: svc.keyStore, ...(oauth && { oauth }) });

  it('the sign-in endpoints answer 503 oauth_not_configured; whoami still works', async () => {
    const plain = await otherApp(undefined);
    for (const [method, url] of [
      ['POST', '/oauth/device/start'],
      ['POST', '/oauth/device/poll?device_code=x'],
      ['GET', '/oauth/start'],
      ['GET', '/oauth/device'],
    ] as const) {
      const res = await plain.inject({ method, url });
      expect(res.statusCode, url).toBe(503);
      expect(res.json().error).toBe('oauth_not_configured');
      expect(res.json().reason).toContain('SIGNBRIDGE_OIDC_ISSUER');
    }
    const who = await plain.inject({ url: '/oauth/whoami', headers: { authorization: `Bearer ${svc.operator}` } });
    expect(who.json()).toMatchObject({ kind: 'admin', tenant_id: null, roles: ['operator'] });
    await plain.close();
  });

  it('over https: the sign-in cookie is __Host- prefixed and Secure', async () => {
    const https = await otherApp({ oidc: settings, publicUrl: 'https://signbridge.example.com' });
    const res = await https.inject({ url: '/oauth/start' });
    expect(res.statusCode).toBe(302);
    expect(String(res.headers['set-cookie'])).toMatch(
      /^__Host-signbridge-signin=[A-Za-z0-9_-]+; Path=\/; HttpOnly; SameSite=Lax; Secure; Max-Age=600$/,
    );
    expect(new URL(res.headers.location as string).searchParams.get('redirect_uri')).toBe(
      'https://signbridge.example.com/oauth/callback',
    );
    expect(res.headers['strict-transport-security']).toBe('max-age=31536000');
    expect(res.headers['x-content-type-options']).toBe('nosniff');
    await https.close();
  });

  it('an unreachable IdP: 503 idp_unavailable (retry later), and no sign-in attempt is stored', async () => {
    const gone = await listenTestIdp({});
    const issuer = gone.issuer;
    await gone.close();
    const down = await otherApp({ oidc: { ...settings, issuer }, publicUrl: 'http://127.0.0.1:1' });
    const attempts = async () =>
      Number((await svc.run(sql<{ n: number }>`SELECT count(*) AS n FROM oauth_attempts`))[0]?.n);
    const before = await attempts();
    const res = await down.inject({ url: '/oauth/start' });
    expect(res.statusCode).toBe(503);
    expect(res.json().error).toBe('idp_unavailable');
    expect(res.json().reason).toContain('try again later');
    expect(await attempts()).toEqual(before);
    await down.close();
  });
});
