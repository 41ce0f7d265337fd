// Requests and answers follow HTTP and the document exactly: fields an action does not use, content types,
// methods, prototype-poisoning keys, oversized headers and shutdown all get an ErrorResponse with the right status.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { packagePath } from '../../src/paths.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

let svc: TestService;
let signer: string;
const hash = createHash('sha256').update('strict').digest('base64');

beforeAll(async () => {
  svc = await startTestService();
  await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'rsa', key_spec: 'RSA_2048' });
  signer = await svc.apiKey('signer', 'rsa');
});
afterAll(async () => svc?.close());

const signatures = async () => (await svc.store.signatures.list('rsa', 1000)).length;

describe('a field the action does not use', () => {
  it.each([
    ['sign', { pss_padding: true }, 'body.pss_padding does not apply to sign'],
    ['sign', { key_spec: 'RSA_2048' }, 'body.key_spec does not apply to sign'],
    ['sign', { kms_key_id: 'k' }, 'body.kms_key_id does not apply to sign'],
    ['pkcs11_sign', { algorithm: 'RSASSA_PSS_SHA_256' }, 'body.algorithm does not apply to pkcs11_sign'],
    ['sign', { colour: 'blue' }, 'body.colour is not a known field'],
  ])('%s with %j is a 400 naming it, and nothing is signed', async (action, extra, reason) => {
    const before = await signatures();
    const res = await callAction(svc.app, signer, action, { tenant_id: 'rsa', hash, ...extra });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: 'invalid_request', reason });
    expect(await signatures()).toBe(before);
  });

  it('the same requests without the field are signed (the refusal is the field, not the request)', async () => {
    expect((await callAction(svc.app, signer, 'sign', { tenant_id: 'rsa', hash })).status).toBe(200);
    const res = await callAction(svc.app, signer, 'pkcs11_sign', { tenant_id: 'rsa', hash, pss_padding: true });
    expect(res.status).toBe(200);
    expect(res.body.signing_algorithm).toBe('RSASSA_PSS_SHA_256');
  });

  it('a hash no digest can be is refused by the schema with invalid_hash', async () => {
    const res = await callAction(svc.app, signer, 'sign', {
      tenant_id: 'rsa',
      hash: Buffer.alloc(20).toString('base64'),
    });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({
      error: 'invalid_hash',
      reason: 'body.hash must be a 32-, 48- or 64-byte digest, got 20 bytes',
    });
  });
});

describe('HTTP', () => {
  it('a content type other than JSON is 415 unsupported_media_type', async () => {
    for (const type of ['text/plain', 'application/x-www-form-urlencoded']) {
      const res = await svc.app.inject({
        method: 'POST',
        url: '/v1/sign',
        headers: { authorization: `Bearer ${signer}`, 'content-type': type },
        payload: JSON.stringify({ action: 'sign', tenant_id: 'rsa', hash }),
      });
      expect(res.statusCode, type).toBe(415);
      expect(res.json()).toEqual({
        error: 'unsupported_media_type',
        reason: expect.stringContaining('application/json'),
      });
    }
  });

  it.each([
    ['GET', '/v1/sign', 'POST'],
    ['PUT', '/v1/no_such_action', 'POST'],
    ['GET', '/trial/sign', 'POST'],
    ['DELETE', '/healthz', 'GET, HEAD'],
    ['POST', '/api/openapi.json', 'GET, HEAD'],
  ])('%s %s is 405 with Allow: %s', async (method, url, allow) => {
    const res = await svc.app.inject({ method: method as 'GET', url });
    expect(res.statusCode).toBe(405);
    expect(res.headers.allow).toBe(allow);
    expect(res.json()).toEqual({ error: 'method_not_allowed', reason: expect.stringContaining(allow) });
  });

  it('a URL the router cannot decode is 400 with an ErrorResponse', async () => {
    const res = await svc.app.inject({ method: 'GET', url: '/v1/%zz' });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toEqual({ error: 'invalid_request', reason: expect.stringContaining('not a valid URL') });
  });

  it('an unknown path is still 404 not_found', async () => {
    const res = await svc.app.inject({ method: 'GET', url: '/nothing/here' });
    expect(res.statusCode).toBe(404);
    expect(res.json()).toEqual({ error: 'not_found', reason: 'no route GET /nothing/here' });
  });

  it.each([
    ['__proto__', `{"action":"sign","tenant_id":"rsa","hash":"${hash}","__proto__":{"admin":true}}`, '"__proto__"'],
    [
      'constructor.prototype',
      `{"action":"sign","tenant_id":"rsa","hash":"${hash}","constructor":{"prototype":{}}}`,
      '"constructor"',
    ],
  ])('a body with a %s key is valid JSON, refused as such with a reason that says why', async (_name, payload, key) => {
    const before = await signatures();
    const res = await svc.app.inject({
      method: 'POST',
      url: '/v1/sign',
      headers: { authorization: `Bearer ${signer}`, 'content-type': 'application/json' },
      payload,
    });
    expect(res.statusCode).toBe(400);
    const body = res.json();
    expect(body.error).toBe('invalid_request');
    expect(body.reason).toContain(key);
    expect(body.reason).toContain('prototype-poisoning protection');
    expect(await signatures()).toBe(before);
  });

  it('a string holding U+0000 (NUL) is refused before anything is signed or stored, and a request beside it signs', async () => {
    // PostgreSQL cannot store NUL in text or jsonb: a string that reaches a record (an approval's reason, a held
    // request's policy inputs, an audit entry) would fail its write, and in a group commit every other request's
    // write in the same batch. The parser refuses it for every action, on both stores alike.
    const before = await signatures();
    const [nul, beside] = await Promise.all([
      svc.app.inject({
        method: 'POST',
        url: '/v1/sign',
        headers: { authorization: `Bearer ${signer}`, 'content-type': 'application/json' },
        payload: `{"action":"sign","tenant_id":"rsa","hash":"${hash}","project":"a\\u0000b"}`,
      }),
      callAction(svc.app, signer, 'sign', { tenant_id: 'rsa', hash, project: 'ok' }),
    ]);
    expect(nul.statusCode).toBe(400);
    expect(nul.json()).toMatchObject({ error: 'invalid_request' });
    expect(nul.json().reason).toContain('U+0000');
    expect(beside.status).toBe(200);
    expect(await signatures()).toBe(before + 1);
    // An escaped backslash followed by "u0000" is six ordinary characters, not NUL.
    const text = await callAction(svc.app, signer, 'sign', { tenant_id: 'rsa', hash, project: '\\u0000' });
    expect(text.status).toBe(200);
  });

  it('"__proto__" inside a string value (an SBOM, say) is no key and passes the parser', async () => {
    const res = await callAction(svc.app, signer, 'sign', { tenant_id: 'rsa', hash, project: '"__proto__": 1' });
    expect(res.status).toBe(200);
  });
});

/** Sends raw bytes to a listening server and returns everything it answers before closing. */
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

describe('answers fastify and node would write themselves', () => {
  it('oversized headers are 431 with an ErrorResponse body', async () => {
    const app = await buildApp({ store: svc.store, keyStore: svc.keyStore });
    const url = await app.listen({ host: '127.0.0.1', port: 0 });
    try {
      const answer = await rawExchange(
        Number(new URL(url).port),
        `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20 * 1024)}\r\n\r\n`,
      );
      const [head = '', body = ''] = answer.split('\r\n\r\n');
      expect(head).toMatch(/^HTTP\/1\.1 431 /);
      expect(head.toLowerCase()).toContain('content-type: application/json');
      expect(JSON.parse(body)).toEqual({ error: 'headers_too_large', reason: expect.stringContaining('headers') });
      // Garbage that is no HTTP at all: 400 with an ErrorResponse, too.
      const garbage = await rawExchange(Number(new URL(url).port), 'HELLO\r\n\r\n');
      expect(garbage).toMatch(/^HTTP\/1\.1 400 /);
      expect(JSON.parse(garbage.split('\r\n\r\n')[1] as string)).toEqual({
        error: 'invalid_request',
        reason: expect.any(String),
      });
    } finally {
      await app.close();
    }
  });

  it('a request that arrives while the service shuts down is 503 shutting_down with Retry-After', async () => {
    const app = await buildApp({ store: svc.store, keyStore: svc.keyStore });
    let during: Response | undefined;
    // Runs after buildApp's own preClose hook has marked the app closing, while the server still accepts.
    app.addHook('preClose', async () => {
      during = await fetch(`${url}/healthz`);
    });
    const url = await app.listen({ host: '127.0.0.1', port: 0 });
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
    await app.close();
    expect(during?.status).toBe(503);
    expect(during?.headers.get('retry-after')).toBe('1');
    expect(await during?.json()).toEqual({ error: 'shutting_down', reason: expect.stringContaining('retry') });
  });
});

describe('a request that arrives too slowly', () => {
  it('a body trickling in gets 408 request_timeout and the connection closes, never before the time-out', async () => {
    const timeoutMs = 2_000;
    const app = await buildApp({ store: svc.store, keyStore: svc.keyStore, requestTimeoutMs: timeoutMs });
    const url = await app.listen({ host: '127.0.0.1', port: 0 });
    const socket = connect(Number(new URL(url).port), '127.0.0.1');
    let trickle: NodeJS.Timeout | undefined;
    try {
      const startedAt = Date.now();
      // A valid request whose body comes one byte at a time, far slower than any client would send it; it never ends
      // on its own, so only the server can end this exchange.
      socket.write(
        `POST /v1/sign HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${signer}\r\n` +
          'Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{',
      );
      trickle = setInterval(() => socket.writable && socket.write(' '), 100);
      const ended = await new Promise<{ answer: string; afterMs: number } | 'no answer'>((resolve) => {
        let answer = '';
        socket.on('data', (chunk) => {
          answer += chunk.toString('latin1');
        });
        socket.on('error', () => undefined);
        socket.on('close', () => resolve({ answer, afterMs: Date.now() - startedAt }));
        // Only a hang is caught here (the issue waited 95 s for nothing): how soon after the time-out a loaded
        // machine closes it is not the property, so the bound is far beyond the 1-1.25x the server aims at.
        setTimeout(() => resolve('no answer'), 30_000);
      });
      expect(ended).not.toBe('no answer');
      const { answer, afterMs } = ended as { answer: string; afterMs: number };
      expect(afterMs).toBeGreaterThanOrEqual(timeoutMs - 50); // never before the time-out (timer granularity aside)
      const [head = '', body = ''] = answer.split('\r\n\r\n');
      expect(head).toMatch(/^HTTP\/1\.1 408 /);
      expect(head.toLowerCase()).toContain('x-content-type-options: nosniff');
      expect(JSON.parse(body)).toEqual({ error: 'request_timeout', reason: expect.stringContaining('retry') });
    } finally {
      clearInterval(trickle);
      socket.destroy();
      await app.close();
    }
  });
});

describe('the built-in default policy (no policy file)', () => {
  const sbom = readFileSync(join(packagePath('test', 'fixtures', 'sbom'), 'cyclonedx-1.5-service.cdx.json'), 'utf8');

  it('denies an inactive identity', async () => {
    const before = await signatures();
    const res = await callAction(svc.app, signer, 'sign', {
      tenant_id: 'rsa',
      hash,
      identity_id: 'ci-bot',
      identity_status: 'inactive',
    });
    expect(res.status).toBe(403);
    expect(res.body).toEqual({ error: 'policy_denied', reason: expect.stringContaining('ci-bot is inactive') });
    expect(await signatures()).toBe(before);
  });

  it('refuses an SBOM that is neither SPDX nor CycloneDX with 400 invalid_sbom', async () => {
    for (const bad of ['not json', '{"hello":"world"}']) {
      const res = await callAction(svc.app, signer, 'sign', { tenant_id: 'rsa', hash, sbom: bad });
      expect(res.status, bad).toBe(400);
      expect(res.body.error).toBe('invalid_sbom');
    }
  });

  it('signs with a valid SBOM and an active identity (no vulnerability database imported: no gating)', async () => {
    const res = await callAction(svc.app, signer, 'sign', {
      tenant_id: 'rsa',
      hash,
      sbom,
      identity_status: 'active',
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
  });
});
