// The trial limit: counted per client address in the store (a restart or another instance keeps counting), and
// the client address is the peer's unless the peer is a listed proxy (trustProxy), so X-Forwarded-For cannot be
// used to pick a fresh address.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { startTestService, type TestService } from '../helpers/service.js';

let svc: TestService;
beforeAll(async () => {
  svc = await startTestService({ trial: { enabled: true, max: 3, windowMs: 3_600_000 } });
});
afterAll(async () => svc?.close());

const payload = { hash: Buffer.alloc(32, 7).toString('base64') };

describe('trial counters in the store', () => {
  it('a new app instance on the same database keeps counting (a restart gives no fresh allowance)', async () => {
    const post = (app: typeof svc.app) =>
      app.inject({ method: 'POST', url: '/trial/sign', remoteAddress: '192.0.2.50', payload });
    for (let i = 0; i < 2; i++) expect((await post(svc.app)).statusCode).toBe(200);

    // Another process: its own connection to the same database, its own app.
    const store = await svc.openSameStore();
    const other = await buildApp({
      store,
      keyStore: svc.keyStore,
      trial: { enabled: true, max: 3, windowMs: 3_600_000 },
    });
    try {
      const third = await post(other);
      expect(third.statusCode).toBe(200);
      expect(third.headers['x-ratelimit-remaining']).toBe('0');
      const fourth = await post(other);
      expect(fourth.statusCode).toBe(429);
      expect(Number(fourth.headers['retry-after'])).toBeGreaterThan(3000);
      expect(fourth.json()).toEqual({ error: 'rate_limited', reason: expect.stringContaining('3 requests per 1 h') });
      // And the first instance sees the other's count.
      expect((await post(svc.app)).statusCode).toBe(429);
    } finally {
      await other.close();
      await store.close();
    }
  });

  it('a window that has ended starts again', async () => {
    let now = new Date('2030-01-01T00:00:00Z');
    const app = await buildApp({
      store: svc.store,
      keyStore: svc.keyStore,
      trial: { enabled: true, max: 1, windowMs: 60_000 },
      now: () => now,
    });
    try {
      const post = () => app.inject({ method: 'POST', url: '/trial/sign', remoteAddress: '192.0.2.60', payload });
      expect((await post()).statusCode).toBe(200);
      now = new Date(now.getTime() + 30_000);
      const limited = await post();
      expect(limited.statusCode).toBe(429);
      expect(limited.headers['retry-after']).toBe('30');
      now = new Date(now.getTime() + 30_000);
      expect((await post()).statusCode).toBe(200);
    } finally {
      await app.close();
    }
  });
});

describe('trustProxy: a list of proxies, never every hop', () => {
  const proxied = (app: typeof svc.app, peer: string, forwardedFor: string) =>
    app.inject({
      method: 'POST',
      url: '/trial/sign',
      remoteAddress: peer,
      headers: { 'x-forwarded-for': forwardedFor },
      payload,
    });

  it('behind a listed proxy, a client that forges X-Forwarded-For is still counted by its real address', async () => {
    const app = await buildApp({
      store: svc.store,
      keyStore: svc.keyStore,
      trial: { enabled: true, max: 3, windowMs: 3_600_000 },
      trustProxy: ['10.0.0.0/8'],
    });
    try {
      // The proxy (10.1.2.3) appends the address it saw (203.0.113.9) to whatever the client wrote.
      const answers = [];
      for (let i = 0; i < 5; i++)
        answers.push((await proxied(app, '10.1.2.3', `198.51.100.${i}, 203.0.113.9`)).statusCode);
      expect(answers).toEqual([200, 200, 200, 429, 429]);
      // Another real client behind the same proxy has its own count.
      expect((await proxied(app, '10.1.2.3', '203.0.113.10')).statusCode).toBe(200);
    } finally {
      await app.close();
    }
  });

  it('X-Forwarded-For from a peer that is not a listed proxy is ignored', async () => {
    const app = await buildApp({
      store: svc.store,
      keyStore: svc.keyStore,
      trial: { enabled: true, max: 3, windowMs: 3_600_000 },
      trustProxy: ['10.0.0.0/8'],
    });
    try {
      const answers = [];
      for (let i = 0; i < 5; i++) answers.push((await proxied(app, '192.0.2.77', `198.51.100.${i}`)).statusCode);
      expect(answers).toEqual([200, 200, 200, 429, 429]);
    } finally {
      await app.close();
    }
  });
});
