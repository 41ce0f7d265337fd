// Headers every answer carries: X-Content-Type-Options: nosniff always, Strict-Transport-Security when the public
// URL is https. Every kind of answer is asked for: API answers and their errors, 404 and 405, the console and the
// sign-in pages, the OpenAPI document, and the answers written raw on the socket before any route runs.
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AppOptions, buildApp } from '../../src/app.js';
import { startTestService, type TestService } from '../helpers/service.js';

let svc: TestService;
beforeAll(async () => {
  svc = await startTestService();
});
afterAll(async () => svc?.close());

const REQUESTS: Array<{ method: 'GET' | 'POST' | 'DELETE'; url: string; status: number; body?: string }> = [
  { method: 'GET', url: '/healthz', status: 200 },
  { method: 'GET', url: '/api/openapi.json', status: 200 },
  { method: 'POST', url: '/v1/sign', status: 401, body: '{}' },
  { method: 'POST', url: '/trial/sign', status: 400, body: '{"broken' },
  { method: 'GET', url: '/no/such/page', status: 404 },
  { method: 'DELETE', url: '/healthz', status: 405 },
  { method: 'GET', url: '/console', status: 503 },
  { method: 'GET', url: '/oauth/start', status: 503 },
  { method: 'GET', url: '/oauth/whoami', status: 401 },
];

async function answers(options: Partial<AppOptions>) {
  const app = await buildApp({ store: svc.store, keyStore: svc.keyStore, ...options });
  try {
    return await Promise.all(
      REQUESTS.map(async (r) => {
        const res = await app.inject({
          method: r.method,
          url: r.url,
          ...(r.body !== undefined && { payload: r.body, headers: { 'content-type': 'application/json' } }),
        });
        return { ...r, got: res.statusCode, headers: res.headers };
      }),
    );
  } finally {
    await app.close();
  }
}

describe('security headers on every answer', () => {
  it('public URL on https: nosniff and HSTS on API answers, errors, 404, 405, console and sign-in pages', async () => {
    for (const a of await answers({ publicUrl: 'https://signbridge.example.com' })) {
      const what = `${a.method} ${a.url}`;
      expect(a.got, what).toBe(a.status);
      expect(a.headers['x-content-type-options'], what).toBe('nosniff');
      expect(a.headers['strict-transport-security'], what).toBe('max-age=31536000');
    }
  });

  it('public URL on http (or none): nosniff, and no HSTS (a browser would ignore it, and it must not pin http)', async () => {
    for (const options of [{ publicUrl: 'http://127.0.0.1:8080' }, {}]) {
      for (const a of await answers(options)) {
        const what = `${a.method} ${a.url} with ${JSON.stringify(options)}`;
        expect(a.got, what).toBe(a.status);
        expect(a.headers['x-content-type-options'], what).toBe('nosniff');
        expect(a.headers['strict-transport-security'], what).toBeUndefined();
      }
    }
  });

  it('the answers written raw on the socket (oversized headers, not HTTP) carry them too', async () => {
    const app = await buildApp({
      store: svc.store,
      keyStore: svc.keyStore,
      publicUrl: 'https://signbridge.example.com',
    });
    const url = await app.listen({ host: '127.0.0.1', port: 0 });
    try {
      for (const request of [
        `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20 * 1024)}\r\n\r\n`,
        'HELLO\r\n\r\n',
      ]) {
        const head = (await rawExchange(Number(new URL(url).port), request)).split('\r\n\r\n')[0]?.toLowerCase() ?? '';
        expect(head).toMatch(/^http\/1\.1 4\d\d /);
        expect(head).toContain('x-content-type-options: nosniff');
        expect(head).toContain('strict-transport-security: max-age=31536000');
      }
    } finally {
      await app.close();
    }
  });
});

function rawExchange(port: number, request: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let answer = '';
    socket.on('data', (chunk) => {
      answer += chunk.toString('latin1');
    });
    socket.on('error', (err: NodeJS.ErrnoException) => (err.code === 'ECONNRESET' ? resolve(answer) : reject(err)));
    socket.on('close', () => resolve(answer));
    socket.write(request);
  });
}
