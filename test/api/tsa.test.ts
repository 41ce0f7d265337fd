// The time-stamping authority as the service answers it (docs/tsa.md): queries made by the real `openssl ts -query`,
// replies read by the real `openssl ts -reply/-verify`; the identity made by the real `signbridge tsa init`.
// Refusals are RFC 3161 rejections (HTTP 200, never a 500); access, limits, audit entries, serials, clock trust.
import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp, type TsaAppOptions } from '../../src/app.js';
import { ClockTrust } from '../../src/tsa/clock-trust.js';
import { DEFAULT_TSA_POLICY } from '../../src/tsa/tsa-settings.js';
import { runCli } from '../helpers/cli.js';
import { startTestService, type TestService } from '../helpers/service.js';

let svc: TestService;
let work: string;

const NOT_CHECKED = { check: 'none', maxOffsetMs: 500, intervalMs: 60_000 } as const;

function tsaOptions(extra: Partial<TsaAppOptions> = {}): TsaAppOptions {
  return {
    clock: new ClockTrust(NOT_CHECKED),
    access: 'anonymous',
    allowNetworks: [],
    limit: { max: 1000, windowMs: 60_000 },
    policy: DEFAULT_TSA_POLICY,
    acceptedPolicies: ['1.3.6.1.4.1.99999.1.2'],
    accuracy: { seconds: 1 },
    tsaName: true,
    ...extra,
  };
}

beforeAll(async () => {
  svc = await startTestService({ tsa: tsaOptions() });
  work = mkdtempSync(join(svc.dataDir, 'tsa-'));
  const made = runCli([
    'tsa',
    'init',
    ...svc.storeArgs,
    '--key-spec',
    'ECC_NIST_P256',
    '--self-signed',
    '--subject',
    'CN=Test TSA, O=signbridge tests',
  ]);
  expect(made.code, made.stderr).toBe(0);
  writeFileSync(join(work, 'artifact.bin'), randomBytes(1000));
});
afterAll(async () => svc?.close());

function query(name: string, args: string[]): Buffer {
  const out = join(work, `${name}.tsq`);
  execFileSync('openssl', ['ts', '-query', '-data', join(work, 'artifact.bin'), '-out', out, ...args]);
  return readFileSync(out);
}

async function post(app: FastifyInstance, body: Buffer, url = '/tsa', headers: Record<string, string> = {}) {
  return app.inject({
    method: 'POST',
    url,
    payload: body,
    headers: { 'content-type': 'application/timestamp-query', ...headers },
    remoteAddress: headers['x-test-address'] ?? '192.0.2.10',
  });
}

function replyText(name: string, der: Buffer): string {
  const file = join(work, `${name}.tsr`);
  writeFileSync(file, der);
  return execFileSync('openssl', ['ts', '-reply', '-in', file, '-text'], { encoding: 'utf8' });
}

function verify(
  name: string,
  reply: Buffer,
  queryDer: Buffer,
  chainPem: string,
): { status: number | null; out: string } {
  writeFileSync(join(work, `${name}.tsr`), reply);
  writeFileSync(join(work, `${name}.tsq`), queryDer);
  writeFileSync(join(work, `${name}-chain.pem`), chainPem);
  const res = spawnSync(
    'openssl',
    ['ts', '-verify', '-in', `${name}.tsr`, '-queryfile', `${name}.tsq`, '-CAfile', `${name}-chain.pem`],
    { cwd: work, encoding: 'utf8' },
  );
  return { status: res.status, out: res.stdout + res.stderr };
}

function serialOf(text: string): string {
  const hex = /Serial number: 0x([0-9A-F]+)/.exec(text)?.[1];
  if (!hex) throw new Error(`no serial in:\n${text}`);
  return BigInt(`0x${hex}`).toString(16); // as the audit entry writes it (openssl prints whole bytes)
}

describe('POST /tsa with the real openssl ts client', () => {
  it('grants a token openssl verifies against /tsa/chain.pem, with the nonce echoed and an audit entry', async () => {
    const q = query('granted', ['-sha256', '-cert']);
    const res = await post(svc.app, q);
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('application/timestamp-reply');
    const chain = await svc.app.inject({ method: 'GET', url: '/tsa/chain.pem' });
    expect(chain.statusCode).toBe(200);
    expect(chain.body).toContain('BEGIN CERTIFICATE');
    const checked = verify('granted', res.rawPayload, q, chain.body);
    expect(checked.out).toContain('Verification: OK');
    const text = replyText('granted', res.rawPayload);
    expect(text).toContain(`Policy OID: ${DEFAULT_TSA_POLICY}`);
    expect(text).toContain('Accuracy: 0x01 seconds');
    const queryNonce = /Nonce: (0x[0-9A-F]+)/.exec(
      execFileSync('openssl', ['ts', '-query', '-in', join(work, 'granted.tsq'), '-text'], { encoding: 'utf8' }),
    )?.[1];
    expect(queryNonce).toBeDefined();
    expect(text).toContain(`Nonce: ${queryNonce}`);
    // The token's audit entry: same serial, imprint and requester.
    const entries = await svc.run<{ action: string; details: string; actor: string }>(
      (await import('kysely')).sql`SELECT action, details, actor FROM audit_log WHERE action = 'timestamp'`,
    );
    const serial = serialOf(text);
    const entry = entries
      .map((e) => ({ ...e, details: JSON.parse(e.details) }))
      .find((e) => e.details.serial === serial);
    expect(entry, `no audit entry with serial ${serial}`).toBeDefined();
    expect(entry?.actor).toBe('address:192.0.2.10');
    expect(entry?.details.hash_algorithm).toBe('sha256');
    expect(entry?.details.policy).toBe(DEFAULT_TSA_POLICY);
  });

  it('SHA-384 and SHA-512 imprints and an accepted policy are granted; no certificate without certReq', async () => {
    for (const hash of ['-sha384', '-sha512']) {
      const res = await post(svc.app, query(`h${hash}`, [hash, '-cert']));
      expect(replyText(`h${hash}`, res.rawPayload)).toContain('Status: Granted.');
    }
    const withPolicy = await post(svc.app, query('policy', ['-sha256', '-tspolicy', '1.3.6.1.4.1.99999.1.2']));
    expect(replyText('policy', withPolicy.rawPayload)).toContain('Policy OID: 1.3.6.1.4.1.99999.1.2');
    // Without -cert the token carries no certificate: verifying needs the chain given separately (-untrusted).
    const bare = await post(svc.app, query('bare', ['-sha256']));
    const chain = (await svc.app.inject({ method: 'GET', url: '/tsa/chain.pem' })).body;
    expect(verify('bare', bare.rawPayload, query('bare', ['-sha256']), chain).out).not.toContain('Verification: OK');
  });

  it("a query naming the service's own default policy (a 128-bit arc) gets a token with that policy", async () => {
    // The outside evaluation's reproduction: asn1js read the 2.25.<UUID> arc as hex, so this was unacceptedPolicy.
    const res = await post(svc.app, query('own-policy', ['-sha256', '-cert', '-tspolicy', DEFAULT_TSA_POLICY]));
    const text = replyText('own-policy', res.rawPayload);
    expect(text).toContain('Status: Granted.');
    expect(text).toContain(`Policy OID: ${DEFAULT_TSA_POLICY}`);
  });

  it('policy arcs between 2^53 and 2^56 are read and written exactly', async () => {
    const policy = '1.3.6.1.4.1.99999.9007199254740993';
    const app = await buildApp({ store: svc.store, keyStore: svc.keyStores, tsa: tsaOptions({ policy }) });
    try {
      const asked = await post(app, query('near-2-53', ['-sha256', '-tspolicy', policy]));
      expect(replyText('near-2-53', asked.rawPayload)).toContain(`Policy OID: ${policy}`);
      const neighbour = await post(
        app,
        query('near-2-53b', ['-sha256', '-tspolicy', '1.3.6.1.4.1.99999.9007199254740992']),
      );
      expect(replyText('near-2-53b', neighbour.rawPayload)).toContain('the requested TSA policy is not supported');
      const byDefault = await post(app, query('near-2-53c', ['-sha256']));
      expect(replyText('near-2-53c', byDefault.rawPayload)).toContain(`Policy OID: ${policy}`);
    } finally {
      await app.close();
    }
  });

  it.each([
    ['SHA-1 imprint', () => query('sha1', ['-sha1']), 'unrecognized or unsupported algorithm identifier'],
    [
      'unknown policy',
      () => query('pol', ['-sha256', '-tspolicy', '1.2.3.4.5']),
      'the requested TSA policy is not supported by the TSA',
    ],
    ['random bytes', () => randomBytes(80), 'transaction not permitted or supported'],
    ['a truncated query', () => query('trunc', ['-sha256']).subarray(0, 30), 'transaction not permitted or supported'],
  ])('%s: an RFC 3161 rejection (HTTP 200), never a 500', async (name, make, failure) => {
    const res = await post(svc.app, make());
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('application/timestamp-reply');
    const text = replyText(name.replace(/\W/g, ''), res.rawPayload);
    expect(text).toContain('Status: Rejected.');
    expect(text).toContain(failure);
  });

  it('refuses a JSON body (415) and an oversized query (413) with an ErrorResponse', async () => {
    const json = await svc.app.inject({ method: 'POST', url: '/tsa', payload: { a: 1 } });
    expect(json.statusCode).toBe(415);
    expect(json.json().error).toBe('unsupported_media_type');
    const big = await post(svc.app, randomBytes(20_000));
    expect(big.statusCode).toBe(413);
  });

  it('a tenant without an identity: 503 tsa_not_configured naming the command', async () => {
    const res = await post(svc.app, query('tenant', ['-sha256']), '/tsa/nobody');
    expect(res.statusCode).toBe(503);
    expect(res.json()).toEqual({
      error: 'tsa_not_configured',
      reason: expect.stringContaining('tsa init --tenant nobody'),
    });
  });

  it('a tenant with its own identity gets tokens under its own certificate', async () => {
    const made = runCli([
      'tsa',
      'init',
      ...svc.storeArgs,
      '--tenant',
      'acme',
      '--key-spec',
      'RSA_2048',
      '--self-signed',
      '--subject',
      'CN=Acme TSA',
    ]);
    expect(made.code, made.stderr).toBe(0);
    const q = query('acme', ['-sha256', '-cert']);
    const res = await post(svc.app, q, '/tsa/acme');
    const chain = (await svc.app.inject({ method: 'GET', url: '/tsa/acme/chain.pem' })).body;
    expect(replyText('acme', res.rawPayload)).toContain('TSA: DirName:/CN=Acme TSA');
    expect(verify('acme', res.rawPayload, q, chain).out).toContain('Verification: OK');
    // The service's chain does not verify the tenant's token.
    const service = (await svc.app.inject({ method: 'GET', url: '/tsa/chain.pem' })).body;
    expect(verify('acme-x', res.rawPayload, q, service).out).not.toContain('Verification: OK');
  });
});

describe('serials', () => {
  it('two instances on one database never hand out the same serial, and counters rise per instance', async () => {
    const store = await svc.openSameStore();
    const other = await buildApp({ store, keyStore: svc.keyStores, tsa: tsaOptions() });
    try {
      const serials: string[] = [];
      const q = query('serial', ['-sha256']);
      const replies = await Promise.all(Array.from({ length: 40 }, (_, i) => post(i % 2 ? other : svc.app, q)));
      for (const [i, res] of replies.entries()) serials.push(serialOf(replyText(`serial${i}`, res.rawPayload)));
      expect(serials.every((s) => s.length > 16)).toBe(true);
      expect(new Set(serials).size).toBe(serials.length);
      // The counter is the part above the low 64 random bits; two instances' counters come from distinct blocks.
      const counters = serials.map((s) => BigInt(`0x${s}`) >> 64n);
      expect(new Set(counters).size).toBe(counters.length);
    } finally {
      await other.close();
      await store.close();
    }
  });
});

describe('access', () => {
  it('limits queries per address (429 with Retry-After), other addresses unaffected', async () => {
    const app = await buildApp({
      store: svc.store,
      keyStore: svc.keyStores,
      tsa: tsaOptions({ limit: { max: 2, windowMs: 60_000 } }),
    });
    try {
      const q = query('limit', ['-sha256']);
      const addr = { 'x-test-address': '198.51.100.7' };
      expect((await post(app, q, '/tsa', addr)).statusCode).toBe(200);
      expect((await post(app, q, '/tsa', addr)).statusCode).toBe(200);
      const third = await post(app, q, '/tsa', addr);
      expect(third.statusCode).toBe(429);
      expect(Number(third.headers['retry-after'])).toBeGreaterThan(0);
      expect((await post(app, q, '/tsa', { 'x-test-address': '198.51.100.8' })).statusCode).toBe(200);
    } finally {
      await app.close();
    }
  });

  it('counts IPv6 clients by their /64: two addresses in one /64 share one limit, another /64 has its own', async () => {
    const app = await buildApp({
      store: svc.store,
      keyStore: svc.keyStores,
      tsa: tsaOptions({ limit: { max: 2, windowMs: 60_000 } }),
    });
    try {
      const q = query('v6', ['-sha256']);
      expect((await post(app, q, '/tsa', { 'x-test-address': '2001:db8:5:6::1' })).statusCode).toBe(200);
      expect((await post(app, q, '/tsa', { 'x-test-address': '2001:db8:5:6:ffff:1:2:3' })).statusCode).toBe(200);
      const third = await post(app, q, '/tsa', { 'x-test-address': '2001:0db8:0005:0006::9' });
      expect(third.statusCode).toBe(429);
      expect(third.json().reason).toContain('2001:db8:5:6::/64');
      expect((await post(app, q, '/tsa', { 'x-test-address': '2001:db8:5:7::1' })).statusCode).toBe(200);
    } finally {
      await app.close();
    }
  });

  it('anonymous queries have a daily quota per address and in all: 429 with Retry-After until the day ends', async () => {
    const app = await buildApp({
      store: svc.store,
      keyStore: svc.keyStores,
      tsa: tsaOptions({ anonymousQuota: { perAddress: 2, perDay: 3 } }),
    });
    try {
      const q = query('daily', ['-sha256']);
      const a = { 'x-test-address': '2001:db8:77::1' };
      expect((await post(app, q, '/tsa', a)).statusCode).toBe(200);
      expect((await post(app, q, '/tsa', { 'x-test-address': '2001:db8:77::2' })).statusCode).toBe(200);
      const own = await post(app, q, '/tsa', a);
      expect(own.statusCode).toBe(429);
      expect(own.json()).toEqual({ error: 'rate_limited', reason: expect.stringContaining('2 queries a day') });
      expect(Number(own.headers['retry-after'])).toBeGreaterThan(86_000);
      expect((await post(app, q, '/tsa', { 'x-test-address': '203.0.113.40' })).statusCode).toBe(200);
      const spent = await post(app, q, '/tsa', { 'x-test-address': '203.0.113.41' });
      expect(spent.statusCode).toBe(429);
      expect(spent.json().reason).toContain("this service's anonymous time-stamping quota of 3 queries a day is spent");
      expect(Number(spent.headers['retry-after'])).toBeGreaterThan(86_000);
    } finally {
      await app.close();
    }
  });

  it('restricted to API keys: 401 without one, granted with one; restricted to networks: 403 outside', async () => {
    const app = await buildApp({
      store: svc.store,
      keyStore: svc.keyStores,
      tsa: tsaOptions({ access: 'api-key', allowNetworks: ['192.0.2.0/24'] }),
    });
    try {
      const q = query('keyed', ['-sha256']);
      const anonymous = await post(app, q);
      expect(anonymous.statusCode).toBe(401);
      expect(anonymous.json().reason).toContain('anonymous time-stamping is off on this service (tsa.access: api-key)');
      const key = await svc.apiKey('signer', 'acme');
      const ok = await post(app, q, '/tsa', { authorization: `Bearer ${key}` });
      expect(ok.statusCode).toBe(200);
      expect(replyText('keyed', ok.rawPayload)).toContain('Status: Granted.');
      // Another tenant's key may not use acme's TSA.
      const other = await svc.apiKey('signer', 'other');
      expect((await post(app, q, '/tsa/acme', { authorization: `Bearer ${other}` })).statusCode).toBe(403);
      const outside = await post(app, q, '/tsa', { authorization: `Bearer ${key}`, 'x-test-address': '203.0.113.5' });
      expect(outside.statusCode).toBe(403);
      expect(outside.json().reason).toContain('203.0.113.5');
    } finally {
      await app.close();
    }
  });
});

describe('clock trust', () => {
  it('an untrusted clock: 503 time_source_unavailable with Retry-After and /readyz not ready; both recover', async () => {
    // A stand-in for the host's timedatectl: the real one answers from systemd, which this machine may not run.
    let synced = 'no';
    const clock = new ClockTrust({ check: 'ntp', maxOffsetMs: 500, intervalMs: 60_000 }, undefined, async (file) =>
      file === 'timedatectl' ? `${synced}\n` : undefined,
    );
    await clock.start();
    const app = await buildApp({ store: svc.store, keyStore: svc.keyStores, tsa: tsaOptions({ clock }) });
    try {
      const q = query('clock', ['-sha256']);
      const refused = await post(app, q);
      expect(refused.statusCode).toBe(503);
      expect(refused.headers['retry-after']).toBe('10');
      expect(refused.json()).toEqual({
        error: 'time_source_unavailable',
        reason: expect.stringContaining('not NTP-synchronised'),
      });
      const ready = await app.inject({ method: 'GET', url: '/readyz' });
      expect(ready.statusCode).toBe(503);
      expect(ready.json()).toMatchObject({ time_source: 'unavailable' });
      synced = 'yes';
      await clock.refresh();
      expect((await post(app, q)).statusCode).toBe(200);
      expect((await app.inject({ method: 'GET', url: '/readyz' })).json()).toMatchObject({
        status: 'ready',
        time_source: 'ok',
      });
    } finally {
      clock.stop();
      await app.close();
    }
  });

  it('a clock stepped back behind a stated time: no token until it is past it, and the step is audited', async () => {
    let now = new Date(Date.now() + 3_600_000);
    const app = await buildApp({ store: svc.store, keyStore: svc.keyStores, tsa: tsaOptions(), now: () => now });
    try {
      const q = query('step', ['-sha256']);
      expect((await post(app, q)).statusCode).toBe(200);
      now = new Date(now.getTime() - 60_000);
      const refused = await post(app, q);
      expect(refused.statusCode).toBe(503);
      expect(refused.json().reason).toContain('went back');
      now = new Date(now.getTime() + 61_000);
      expect((await post(app, q)).statusCode).toBe(200);
      const steps = await svc.run<{ outcome: string }>(
        (await import('kysely')).sql`SELECT outcome FROM audit_log WHERE action = 'tsa_clock_step'`,
      );
      expect(steps.map((s) => s.outcome)).toContain('stepped_back');
    } finally {
      await app.close();
    }
  });
});
