// The outbound rules every request to a URL someone else chose goes through (src/net/outbound-request.ts): the
// special-use ranges, the allow list, resolve-once and connecting to the checked address, no redirects, the
// deadline and the size limit. Real servers on 127.0.0.1; a `resolve` function stands in for DNS where a test needs
// a name to resolve to a chosen address.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  AnswerTooLarge,
  DestinationRefused,
  DestinationUnreachable,
  invalidAllowEntries,
  OutboundPolicy,
  RequestNotSendable,
  type Resolver,
  TlsFailed,
} from '../../src/net/outbound-request.js';
import { isSpecialUse } from '../../src/net/special-addresses.js';
import {
  closedPort,
  endlessBody,
  type LocalServer,
  type SelfSigned,
  selfSignedCert,
  startServer,
} from '../helpers/local-servers.js';

const OPTS = { timeoutMs: 5000, maxBytes: 64 * 1024 };

let tls: SelfSigned;
let plain: LocalServer;
let secure: LocalServer;

beforeAll(async () => {
  tls = selfSignedCert();
  plain = await startServer((_req, res) => res.end('hello'));
  secure = await startServer((_req, res) => res.end('hello over tls'), tls);
});
afterAll(async () => {
  await plain?.close();
  await secure?.close();
});

async function refusal(promise: Promise<unknown>): Promise<DestinationRefused> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(DestinationRefused);
  return err as DestinationRefused;
}

describe('special-use addresses', () => {
  it.each([
    '127.0.0.1',
    '10.1.2.3',
    '169.254.169.254',
    '169.254.170.2',
    '172.16.0.1',
    '192.168.1.1',
    '100.64.0.1',
    '0.0.0.0',
    '224.0.0.1',
    '255.255.255.255',
    '::',
    '::1',
    'fd00:ec2::254',
    'fe80::1',
    'ff02::1',
    '::ffff:127.0.0.1',
    '::ffff:7f00:1',
    '::ffff:a9fe:a9fe',
    '64:ff9b::7f00:1',
    '2002:808:808::1',
    '2001:db8::1',
  ])('%s is special-use', (address) => {
    expect(isSpecialUse(address)).toBe(true);
  });

  it.each([
    '8.8.8.8',
    '93.184.215.14',
    '::ffff:8.8.8.8',
    '::ffff:808:808',
    // NAT64 of a public address: what DNS64 answers for an IPv4-only host on an IPv6-only network.
    '64:ff9b::808:808',
    '2606:4700:4700::1111',
  ])('%s is not', (address) => {
    expect(isSpecialUse(address)).toBe(false);
  });

  it('allow entries that are not a host, an address or a CIDR are named', () => {
    expect(
      invalidAllowEntries(['hooks.internal', '10.0.0.0/8', '::1', 'fd00::/8', '10.0.0.0/33', 'a b', 'x/y']),
    ).toEqual(['10.0.0.0/33', 'a b', 'x/y']);
  });
});

describe('checkUrl', () => {
  const none = new OutboundPolicy({ allow: [] });

  it.each([
    ['https://127.0.0.1/', '127.0.0.1'],
    ['https://169.254.169.254/latest/meta-data/', '169.254.169.254'],
    ['https://10.1.2.3/', '10.1.2.3'],
    ['https://[::1]/', '::1'],
    ['https://[::ffff:127.0.0.1]/', '::ffff:7f00:1'],
    ['https://[fd00:ec2::254]/', 'fd00:ec2::254'],
    ['https://localhost/', '127.0.0.1'],
  ])('refuses %s without the allow list', async (url, address) => {
    const err = await refusal(none.checkUrl(url));
    expect(err.reason).toBe('special-use');
    expect(err.address).toBe(address);
    expect(err.message).toMatch(/resolves to .*, a loopback, private or other special-use address/);
  });

  it('checks every address a name resolves to, not just the first', async () => {
    const resolve: Resolver = async () => [
      { address: '93.184.215.14', family: 4 },
      { address: '10.0.0.5', family: 4 },
    ];
    const err = await refusal(new OutboundPolicy({ allow: [], resolve }).checkUrl('https://mixed.example.com/'));
    expect(err.address).toBe('10.0.0.5');
  });

  it('http is refused unless allowHttp and the allow list names the host or every address', async () => {
    const resolve: Resolver = async () => [{ address: '93.184.215.14', family: 4 }];
    const open = new OutboundPolicy({ allow: [], resolve });
    expect((await refusal(open.checkUrl('http://hooks.example.com/'))).reason).toBe('scheme');
    expect((await refusal(open.checkUrl('http://hooks.example.com/', { allowHttp: true }))).reason).toBe('scheme');
    const byName = new OutboundPolicy({ allow: ['hooks.example.com'], resolve });
    // Without allowHttp (the issuer keys) http stays refused, listed or not.
    expect((await refusal(byName.checkUrl('http://hooks.example.com/'))).message).toBe(
      'http://hooks.example.com is not https',
    );
    expect((await byName.checkUrl('http://hooks.example.com/', { allowHttp: true })).listed).toBe(true);
    const byRange = new OutboundPolicy({ allow: ['93.184.0.0/16'], resolve });
    expect((await byRange.checkUrl('http://hooks.example.com/', { allowHttp: true })).listed).toBe(true);
    const otherRange = new OutboundPolicy({ allow: ['10.0.0.0/8'], resolve });
    expect((await refusal(otherRange.checkUrl('http://hooks.example.com/', { allowHttp: true }))).reason).toBe(
      'scheme',
    );
    expect((await refusal(open.checkUrl('ftp://hooks.example.com/', { allowHttp: true }))).reason).toBe('scheme');
  });

  it('a listed host or a CIDR holding the address makes a special-use address acceptable', async () => {
    for (const allow of [['127.0.0.1'], ['127.0.0.0/8'], ['localhost']]) {
      const checked = await new OutboundPolicy({ allow }).checkUrl(
        allow[0] === 'localhost' ? 'https://localhost/' : 'https://127.0.0.1/',
      );
      expect(checked.addresses.map((a) => a.address)).toContain('127.0.0.1');
    }
    // A CIDR that holds an IPv4 address also covers its IPv4-mapped spelling.
    await new OutboundPolicy({ allow: ['127.0.0.0/8'] }).checkUrl('https://[::ffff:127.0.0.1]/');
  });

  it('a name that does not resolve, or resolves to nothing, is unreachable (retryable), not refused', async () => {
    const failing: Resolver = async () => {
      throw Object.assign(new Error('queryA ENOTFOUND'), { code: 'ENOTFOUND' });
    };
    const err = await new OutboundPolicy({ allow: [], resolve: failing })
      .checkUrl('https://nx.example.com/')
      .catch((e) => e);
    expect(err).toBeInstanceOf(DestinationUnreachable);
    expect(err).toMatchObject({
      reason: 'dns',
      retryable: true,
      message: 'the host nx.example.com does not resolve (ENOTFOUND)',
    });
    const empty = await new OutboundPolicy({ allow: [], resolve: async () => [] })
      .checkUrl('https://empty.example.com/')
      .catch((e) => e);
    expect(empty).toMatchObject({ reason: 'no-address', retryable: true });
  });
});

describe('request', () => {
  it('reaches an allowed local server over http and https (extra CA), with the URL host as Host and TLS name', async () => {
    const http = await new OutboundPolicy({ allow: ['127.0.0.1'] }).request(`${plain.url}/x`, {
      ...OPTS,
      allowHttp: true,
    });
    expect(http).toMatchObject({ status: 200, truncated: false });
    expect(http.body.toString()).toBe('hello');

    // A name resolved by the stand-in resolver to 127.0.0.1: the connection goes to that address, and the Host
    // header and the TLS server name are still the name (the certificate is checked against it).
    let lookups = 0;
    const resolve: Resolver = async (host) => {
      lookups++;
      expect(host).toBe('hooks.example.com');
      return [{ address: '127.0.0.1', family: 4 }];
    };
    const policy = new OutboundPolicy({ allow: ['127.0.0.0/8'], extraCaPem: tls.cert, resolve });
    const answer = await policy.request(`https://hooks.example.com:${secure.port}/y`, OPTS);
    expect(answer.status).toBe(200);
    expect(answer.body.toString()).toBe('hello over tls');
    expect(lookups).toBe(1);
    expect(secure.requests.at(-1)).toMatchObject({
      url: '/y',
      servername: 'hooks.example.com',
      headers: { host: `hooks.example.com:${secure.port}` },
    });
  });

  it('a certificate the policy does not trust is a TLS failure', async () => {
    const err = await new OutboundPolicy({ allow: ['127.0.0.1'] }).request(secure.url, OPTS).catch((e) => e);
    expect(err).toBeInstanceOf(TlsFailed);
    expect(err.message).toMatch(/^https:\/\/127\.0\.0\.1:\d+: TLS failed \(/);
  });

  it('a redirect is handed back, not followed', async () => {
    const target = await startServer((_req, res) => res.end('should not be asked'));
    const redirecting = await startServer((_req, res) => {
      res.writeHead(302, { location: `${target.url}/elsewhere` }).end();
    });
    try {
      const answer = await new OutboundPolicy({ allow: ['127.0.0.1'] }).request(redirecting.url, {
        ...OPTS,
        allowHttp: true,
      });
      expect(answer.status).toBe(302);
      expect(target.requests).toHaveLength(0);
    } finally {
      await target.close();
      await redirecting.close();
    }
  });

  it('a long answer fails with AnswerTooLarge, or is cut at maxBytes with truncate; readBody false reads nothing', async () => {
    const endless = await startServer((_req, res) => {
      res.writeHead(200);
      endlessBody(res, Buffer.alloc(16 * 1024, 'a'), 0);
    });
    const policy = new OutboundPolicy({ allow: ['127.0.0.1'] });
    const base = { ...OPTS, allowHttp: true, maxBytes: 4096 };
    try {
      const tooLarge = await policy.request(endless.url, base).catch((e) => e);
      expect(tooLarge).toBeInstanceOf(AnswerTooLarge);
      const cut = await policy.request(endless.url, { ...base, truncate: true });
      expect(cut.truncated).toBe(true);
      expect(cut.body.length).toBe(4096);
      const unread = await policy.request(endless.url, { ...base, readBody: () => false });
      expect(unread).toMatchObject({ status: 200, truncated: false });
      expect(unread.body.length).toBe(0);
    } finally {
      await endless.close();
    }
  });

  it('no answer within the time-out, and a refused connection, are unreachable', async () => {
    const silent = await startServer(() => {});
    const policy = new OutboundPolicy({ allow: ['127.0.0.1'] });
    try {
      const timedOut = await policy.request(silent.url, { ...OPTS, timeoutMs: 300, allowHttp: true }).catch((e) => e);
      expect(timedOut).toBeInstanceOf(DestinationUnreachable);
      expect(timedOut).toMatchObject({ reason: 'timeout', why: 'no answer within 0.3 s', retryable: true });
    } finally {
      await silent.close();
    }
    const refused = await policy
      .request(`http://127.0.0.1:${await closedPort()}/`, { ...OPTS, allowHttp: true })
      .catch((e) => e);
    expect(refused).toMatchObject({ reason: 'connect', why: 'ECONNREFUSED', retryable: true });
  });

  it('a header value Node will not send is refused without naming the value', async () => {
    const err = await new OutboundPolicy({ allow: ['127.0.0.1'] })
      .request(plain.url, { ...OPTS, allowHttp: true, headers: { 'x-secret': 'abc\r\nInjected: 1' } })
      .catch((e) => e);
    expect(err).toBeInstanceOf(RequestNotSendable);
    expect(err.message).not.toContain('abc');
  });
});
