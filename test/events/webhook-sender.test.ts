// Sending one webhook (src/events/webhook-sender.ts) to real receivers on 127.0.0.1: what each answer becomes
// (delivered, retry, gone, failed), the destinations refused before anything is sent, and that the same checks run
// again at send time. Where a name must resolve to a chosen address, the settings' `resolve` stands in for DNS.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  checkSubscriptionUrl,
  type DeliveryResult,
  MAX_RETRY_AFTER_MS,
  retryAfter,
  sendWebhook,
  type WebhookSendSettings,
} from '../../src/events/webhook-sender.js';
import type { Resolver } from '../../src/net/outbound-request.js';
import {
  closedPort,
  endlessBody,
  type LocalServer,
  type SelfSigned,
  selfSignedCert,
  startServer,
} from '../helpers/local-servers.js';
import { waitFor } from '../helpers/wait.js';

const SIGNATURE = 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=';
const BODY = JSON.stringify({ type: 'key.rotated', timestamp: '2026-11-25T10:00:00Z', data: { tenant_id: 'acme' } });
const REQUEST = {
  headers: {
    'webhook-id': 'evt_1',
    'webhook-timestamp': '1764064800',
    'webhook-signature': SIGNATURE,
    // The sender's own user-agent and content-type win over a caller's.
    'User-Agent': 'someone-else',
  },
  body: BODY,
};
const LOCAL: WebhookSendSettings = { allow: ['127.0.0.1'], timeoutMs: 5000 };

let tls: SelfSigned;
let receiver: LocalServer;
/** Answers what the request's path says: /status/NNN, with an optional ?retry-after=... header. */
let statusServer: LocalServer;

beforeAll(async () => {
  tls = selfSignedCert();
  receiver = await startServer((_req, res) => res.writeHead(200).end('ok'));
  statusServer = await startServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const status = Number(url.pathname.split('/')[2]);
    const headers: Record<string, string> = {};
    const after = url.searchParams.get('retry-after');
    if (after !== null) headers['retry-after'] = after;
    res.writeHead(status, headers).end(status === 204 ? undefined : `status ${status} said so`);
  });
});
afterAll(async () => {
  await receiver?.close();
  await statusServer?.close();
});

const status = (code: number, query = '') => `${statusServer.url}/status/${code}${query}`;

function expectOutcome(result: DeliveryResult, outcome: DeliveryResult['outcome']): void {
  expect(result, JSON.stringify(result)).toMatchObject({ outcome });
  // Whatever happened, the result never carries the signature.
  expect(JSON.stringify(result)).not.toContain(SIGNATURE);
}

describe('refused destinations (no allow list)', () => {
  const none: WebhookSendSettings = { allow: [], timeoutMs: 2000 };

  it.each([
    ['https://127.0.0.1/hook', /the address 127\.0\.0\.1 is a loopback, private or other special-use address/],
    ['https://169.254.169.254/latest/meta-data/', /the address 169\.254\.169\.254 is a loopback/],
    ['https://10.1.2.3/hook', /the address 10\.1\.2\.3 is a loopback/],
    ['https://[::1]/hook', /the address \[::1\] is a loopback/],
    ['https://[::ffff:127.0.0.1]/hook', /the address \[::ffff:7f00:1\] is a loopback/],
    ['https://[fd00:ec2::254]/hook', /the address \[fd00:ec2::254\] is a loopback/],
    ['https://localhost/hook', /the host localhost resolves to 127\.0\.0\.1, a loopback/],
  ])('%s', async (url, message) => {
    const checked = await checkSubscriptionUrl(url, none);
    expect(checked.ok).toBe(false);
    const error = (checked as { error: string }).error;
    expect(error).toMatch(message);
    expect(error).toMatch(/webhooks\.allow \(SIGNBRIDGE_WEBHOOK_ALLOW\) lists the host or its range/);
    const sent = await sendWebhook(url, REQUEST, none);
    expectOutcome(sent, 'failed');
    expect(sent).toEqual({ outcome: 'failed', error });
  });

  it('http to a local server, and the server gets nothing', async () => {
    const before = receiver.requests.length;
    const sent = await sendWebhook(`${receiver.url}/hook`, REQUEST, none);
    expectOutcome(sent, 'failed');
    expect((sent as { error: string }).error).toMatch(
      /^http:\/\/127\.0\.0\.1:\d+ is refused: webhooks are sent over https; http only to a host or range webhooks\.allow/,
    );
    expect(receiver.requests.length).toBe(before);
  });

  it('http to a public name is refused too (https only unless listed)', async () => {
    const resolve: Resolver = async () => [{ address: '93.184.215.14', family: 4 }];
    const checked = await checkSubscriptionUrl('http://hooks.example.com/hook', { allow: [], resolve });
    expect(checked).toEqual({
      ok: false,
      error: expect.stringMatching(/^http:\/\/hooks\.example\.com is refused: webhooks are sent over https/),
    });
  });

  it('URLs that are not webhook URLs, without echoing them', async () => {
    const cases: [string, RegExp][] = [
      ['not a url', /not a valid absolute URL/],
      ['ftp://hooks.example.com/x', /scheme is ftp:/],
      ['https://user:hunter2@hooks.example.com/x', /user name or password/],
      ['https://hooks.example.com/x#frag', /fragment/],
      [`https://hooks.example.com/${'a'.repeat(3000)}`, /longer than 2048/],
    ];
    for (const [url, message] of cases) {
      const checked = await checkSubscriptionUrl(url, none);
      expect(checked).toEqual({ ok: false, error: expect.stringMatching(message) });
      const sent = await sendWebhook(url, REQUEST, none);
      expectOutcome(sent, 'failed');
      expect(JSON.stringify(sent)).not.toContain('hunter2');
    }
  });
});

describe('accepted when the allow list names the host or a CIDR', () => {
  it('http to a listed address, host name, or CIDR', async () => {
    for (const [allow, url] of [
      [['127.0.0.1'], `${receiver.url}/a`],
      [['127.0.0.0/8'], `${receiver.url}/b`],
      [['localhost'], `http://localhost:${receiver.port}/c`],
    ] as const) {
      const settings = { allow, timeoutMs: 5000 };
      expect(await checkSubscriptionUrl(url, settings)).toMatchObject({ ok: true });
      expectOutcome(await sendWebhook(url, REQUEST, settings), 'delivered');
      expect(receiver.requests.at(-1)?.url).toBe(new URL(url).pathname);
    }
  });

  it('https with the extra CA; the request is a POST of the body with our headers', async () => {
    const secure = await startServer((_req, res) => res.writeHead(204).end(), tls);
    try {
      const settings = { allow: ['127.0.0.0/8'], extraCaPem: tls.cert, timeoutMs: 5000 };
      const sent = await sendWebhook(`${secure.url}/hook`, REQUEST, settings);
      expect(sent).toEqual({ outcome: 'delivered', status: 204 });
      const seen = secure.requests.at(-1);
      expect(seen).toMatchObject({
        method: 'POST',
        url: '/hook',
        body: BODY,
        headers: {
          'content-type': 'application/json',
          'user-agent': 'signbridge-webhooks',
          'webhook-id': 'evt_1',
          'webhook-signature': SIGNATURE,
        },
      });
      // Without the CA the receiver's certificate is not trusted: a retry that says what to set.
      const untrusted = await sendWebhook(`${secure.url}/hook`, REQUEST, { allow: ['127.0.0.0/8'] });
      expectOutcome(untrusted, 'retry');
      expect((untrusted as { error: string }).error).toMatch(/TLS failed .*webhooks\.caFile/);
    } finally {
      await secure.close();
    }
  });

  it('a name resolved (once) to a listed range: connects there with the name as Host and TLS server name', async () => {
    const secure = await startServer((_req, res) => res.writeHead(200).end(), tls);
    let lookups = 0;
    const resolve: Resolver = async () => {
      lookups++;
      return [{ address: '127.0.0.1', family: 4 }];
    };
    try {
      const settings = { allow: ['127.0.0.0/8'], extraCaPem: tls.cert, resolve };
      expectOutcome(await sendWebhook(`https://hooks.example.com:${secure.port}/h`, REQUEST, settings), 'delivered');
      expect(lookups).toBe(1);
      expect(secure.requests.at(-1)).toMatchObject({
        servername: 'hooks.example.com',
        headers: { host: `hooks.example.com:${secure.port}` },
      });
    } finally {
      await secure.close();
    }
  });
});

describe('outcomes', () => {
  it('200 and 204 are delivered', async () => {
    expect(await sendWebhook(status(200), REQUEST, LOCAL)).toEqual({ outcome: 'delivered', status: 200 });
    expect(await sendWebhook(status(204), REQUEST, LOCAL)).toEqual({ outcome: 'delivered', status: 204 });
  });

  it('500 is a retry, with what the receiver said', async () => {
    const sent = await sendWebhook(status(500), REQUEST, LOCAL);
    expect(sent).toEqual({
      outcome: 'retry',
      status: 500,
      error: `http://127.0.0.1:${statusServer.port} answered HTTP 500: status 500 said so`,
    });
  });

  it('503 with Retry-After: 7 is a retry after 7000 ms', async () => {
    expect(await sendWebhook(status(503, '?retry-after=7'), REQUEST, LOCAL)).toMatchObject({
      outcome: 'retry',
      status: 503,
      retryAfterMs: 7000,
    });
  });

  it('429 with an HTTP-date Retry-After is a retry after about that long', async () => {
    const at = new Date(Date.now() + 120_000).toUTCString();
    const sent = await sendWebhook(status(429, `?retry-after=${encodeURIComponent(at)}`), REQUEST, LOCAL);
    expectOutcome(sent, 'retry');
    const { retryAfterMs } = sent as { retryAfterMs: number };
    // The date has whole seconds and some time passes between making it and reading the answer.
    expect(retryAfterMs).toBeGreaterThan(110_000);
    expect(retryAfterMs).toBeLessThanOrEqual(120_000);
  });

  it('410 is gone', async () => {
    expect(await sendWebhook(status(410), REQUEST, LOCAL)).toMatchObject({ outcome: 'gone', status: 410 });
  });

  it('400 and 404 failed', async () => {
    for (const code of [400, 404]) {
      const sent = await sendWebhook(status(code), REQUEST, LOCAL);
      expect(sent).toMatchObject({ outcome: 'failed', status: code, error: expect.stringContaining(`HTTP ${code}`) });
    }
  });

  it('302 with a Location failed, and the Location gets no request', async () => {
    const target = await startServer((_req, res) => res.writeHead(200).end());
    const redirecting = await startServer((_req, res) => {
      res.writeHead(302, { location: `${target.url}/secret-path?token=abc` }).end();
    });
    try {
      const sent = await sendWebhook(`${redirecting.url}/hook`, REQUEST, LOCAL);
      expectOutcome(sent, 'failed');
      expect(sent).toMatchObject({ status: 302, error: expect.stringMatching(/redirects are not followed/) });
      expect((sent as { error: string }).error).toContain(`to ${target.url}`);
      expect((sent as { error: string }).error).not.toContain('token=abc');
      expect(redirecting.requests).toHaveLength(1);
      expect(target.requests).toHaveLength(0);
    } finally {
      await target.close();
      await redirecting.close();
    }
  });

  it('a receiver that accepts and never answers is a retry after the time-out', async () => {
    const silent = await startServer(() => {});
    try {
      const sent = await sendWebhook(`${silent.url}/hook`, REQUEST, { allow: ['127.0.0.1'], timeoutMs: 300 });
      expectOutcome(sent, 'retry');
      expect(sent).toEqual({
        outcome: 'retry',
        error: `http://127.0.0.1:${silent.port} did not answer within 0.3 s`,
      });
      expect(silent.requests).toHaveLength(1);
    } finally {
      await silent.close();
    }
  });

  it('a closed port is a retry', async () => {
    const sent = await sendWebhook(`http://127.0.0.1:${await closedPort()}/hook`, REQUEST, LOCAL);
    expectOutcome(sent, 'retry');
    expect((sent as { error: string }).error).toMatch(/cannot be reached \(ECONNREFUSED\)/);
  });

  it('a name that does not resolve is a retry', async () => {
    const resolve: Resolver = async () => {
      throw Object.assign(new Error('getaddrinfo ENOTFOUND'), { code: 'ENOTFOUND' });
    };
    const sent = await sendWebhook('https://gone.example.com/hook', REQUEST, { allow: [], resolve });
    expect(sent).toEqual({ outcome: 'retry', error: 'the host gone.example.com does not resolve (ENOTFOUND)' });
  });

  it('a resolver that never answers is a retry after the time-out (resolving counts against it)', async () => {
    const resolve: Resolver = () => new Promise(() => {});
    const sent = await sendWebhook('https://slow.example.com/hook', REQUEST, { allow: [], resolve, timeoutMs: 300 });
    expect(sent).toEqual({
      outcome: 'retry',
      error: 'the host slow.example.com does not resolve (no answer within 0.3 s)',
    });
  });

  it('huge or endless answers are not waited for: 2xx at the status line, others after 4 KiB or the time-out', async () => {
    const endless = await startServer((req, res) => {
      const code = Number(req.url?.split('/')[1]);
      res.writeHead(code);
      // /500/slow trickles a few bytes at a time and never reaches 4 KiB; the others pour as fast as they can.
      if (req.url?.endsWith('/slow')) endlessBody(res, Buffer.from('tick '), 50);
      else endlessBody(res, Buffer.alloc(64 * 1024, 'x'), 0);
    });
    const settings = { allow: ['127.0.0.1'], timeoutMs: 400 };
    try {
      expect(await sendWebhook(`${endless.url}/200`, REQUEST, settings)).toEqual({ outcome: 'delivered', status: 200 });
      const fast = await sendWebhook(`${endless.url}/500`, REQUEST, settings);
      expect(fast).toMatchObject({ outcome: 'retry', status: 500 });
      // 4 KiB of the answer are kept for the error text, and it says it was cut.
      expect((fast as { error: string }).error).toMatch(/: x{4096} …$/);
      const slow = await sendWebhook(`${endless.url}/500/slow`, REQUEST, settings);
      expect(slow).toMatchObject({ outcome: 'retry', status: 500, error: expect.stringMatching(/HTTP 500: tick/) });
      // The sender hung up on all three; none was left streaming.
      await waitFor('the receiver to see all three hang-ups', () => endless.hungUp === 3, 10_000);
    } finally {
      await endless.close();
    }
  });

  it('errors name scheme, host and port only (the path may hold a secret)', async () => {
    const sent = await sendWebhook(`${statusServer.url}/status/400/T000/B000/XXXXSECRET`, REQUEST, LOCAL);
    expectOutcome(sent, 'failed');
    expect(JSON.stringify(sent)).not.toContain('XXXXSECRET');
  });
});

describe('send time checks again (DNS rebinding)', () => {
  it('a name that resolved to a public address when subscribed and to loopback when sent is refused then', async () => {
    // The resolver stands in for DNS answering differently over time: public when the subscription is made,
    // 127.0.0.1 (where a real server listens) when the webhook is sent.
    const answers = ['93.184.215.14', '127.0.0.1'];
    let lookups = 0;
    const resolve: Resolver = async () => [{ address: answers[Math.min(lookups++, 1)] as string, family: 4 }];
    const settings: WebhookSendSettings = { allow: [], timeoutMs: 2000, resolve };
    const url = `https://hooks.example.com:${receiver.port}/hook`;
    expect(await checkSubscriptionUrl(url, settings)).toMatchObject({ ok: true });
    const before = receiver.requests.length;
    const sent = await sendWebhook(url, REQUEST, settings);
    expect(sent).toEqual({
      outcome: 'failed',
      error: expect.stringMatching(/the host hooks\.example\.com resolves to 127\.0\.0\.1, a loopback, private/),
    });
    expect(lookups).toBe(2);
    expect(receiver.requests.length).toBe(before);
  });
});

describe('Retry-After', () => {
  const now = Date.parse('2026-11-25T10:00:00Z');
  it.each([
    ['7', 7000],
    [' 0 ', 0],
    ['86400', MAX_RETRY_AFTER_MS],
    ['Wed, 25 Nov 2026 10:01:30 GMT', 90_000],
    ['Wed, 25 Nov 2026 09:00:00 GMT', 0],
    ['Sun, 25 Nov 2029 10:00:00 GMT', MAX_RETRY_AFTER_MS],
    ['-5', undefined],
    ['7.5', undefined],
    ['soon', undefined],
    [undefined, undefined],
  ])('%s → %s', (value, expected) => {
    expect(retryAfter(value, now)).toBe(expected);
  });
});
