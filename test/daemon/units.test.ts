// The daemon's parts without sockets or a service: ECDSA conversion, CKA_IDs, status mapping, configuration,
// credentials, certificates, the key cache and the request handler against a scripted upstream.
import { execFileSync } from 'node:child_process';
import { createPrivateKey, generateKeyPairSync, sign as nodeSign, randomBytes } from 'node:crypto';
import { chmodSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { CertificateStore } from '../../daemon/certificate-store.js';
import { DaemonConfigError, resolveDaemonConfig } from '../../daemon/config.js';
import { apiKeyFromEnv, apiKeyFromFile, CredentialError } from '../../daemon/credentials.js';
import { isPlaintextRemote } from '../../daemon/daemon.js';
import { RequestHandler } from '../../daemon/handler.js';
import { KeyCatalog } from '../../daemon/key-catalog.js';
import { ckaIdFor } from '../../daemon/key-id.js';
import { silentLogger } from '../../daemon/logger.js';
import { RemoteUpstream } from '../../daemon/upstream/remote-upstream.js';
import { messageFor, wireStatusFor } from '../../daemon/upstream/status-map.js';
import {
  type CollectInput,
  type PublicKeyInfo,
  type SignInput,
  type SignResult,
  type Upstream,
  UpstreamError,
} from '../../daemon/upstream/upstream.js';
import type { KeySpec } from '../../src/crypto/algorithms.js';
import { ecdsaDerToRaw, ecdsaRawToDer } from '../../src/crypto/der.js';
import type { Response } from '../../wire/messages.js';
import { WireStatus } from '../../wire/wire.js';
import { tempDir } from './helpers.js';

const tmp = () => tempDir('sbd-unit-');

describe('ecdsaDerToRaw', () => {
  it.each([
    [32, 'prime256v1'],
    [48, 'secp384r1'],
    [66, 'secp521r1'],
  ] as const)('%i-byte halves: inverse of ecdsaRawToDer, also with leading zeros', (field, curve) => {
    for (let i = 0; i < 200; i++) {
      const raw = randomBytes(field * 2);
      if (i % 3 === 0) raw.fill(0, 0, 1 + (i % 5)); // short r
      if (i % 4 === 0) raw.fill(0, field, field + 2); // short s
      if (field === 66) {
        raw[0] = (raw[0] as number) & 1; // P-521 values are at most 521 bits
        raw[field] = (raw[field] as number) & 1;
      }
      expect(ecdsaDerToRaw(ecdsaRawToDer(raw), field)).toEqual(raw);
    }
    const { privateKey } = generateKeyPairSync('ec', { namedCurve: curve });
    const der = nodeSign('sha256', Buffer.from('x'), privateKey);
    const p1363 = ecdsaDerToRaw(der, field);
    expect(p1363.length).toBe(field * 2);
    expect(ecdsaRawToDer(p1363)).toEqual(der);
  });

  it('rejects what is not a DER ECDSA signature for the curve', () => {
    const good = ecdsaRawToDer(randomBytes(64));
    expect(() => ecdsaDerToRaw(good, 32)).not.toThrow();
    expect(() => ecdsaDerToRaw(Buffer.concat([good, Buffer.from([0])]), 32)).toThrow();
    expect(() => ecdsaDerToRaw(good.subarray(0, good.length - 1), 32)).toThrow();
    expect(() => ecdsaDerToRaw(Buffer.from('3006020100020100', 'hex').subarray(0, 7), 32)).toThrow();
    expect(() => ecdsaDerToRaw(ecdsaRawToDer(Buffer.alloc(96, 0x11)), 32)).toThrow(/longer than 32/);
    expect(() => ecdsaDerToRaw(Buffer.from('3006020180020101', 'hex'), 32)).toThrow(/negative/);
    expect(() => ecdsaDerToRaw(Buffer.alloc(0), 32)).toThrow();
  });
});

describe('isPlaintextRemote', () => {
  it('warns only for http to another host', () => {
    expect(isPlaintextRemote('http://127.0.0.1:8080')).toBe(false);
    expect(isPlaintextRemote('http://localhost:8080')).toBe(false);
    expect(isPlaintextRemote('http://[::1]:8080')).toBe(false);
    expect(isPlaintextRemote('https://signbridge.example.com')).toBe(false);
    expect(isPlaintextRemote('http://signbridge.example.com')).toBe(true);
    expect(isPlaintextRemote('http://10.0.0.5')).toBe(true);
  });
});

describe('ckaIdFor', () => {
  it('a UUID becomes its 16 bytes; anything else 16 bytes of its SHA-256; stable', () => {
    expect(ckaIdFor('0f8fad5b-d9cb-469f-a165-70867728950e').toString('hex')).toBe('0f8fad5bd9cb469fa16570867728950e');
    const arn = 'arn:aws:kms:us-east-1:123456789012:key/abc';
    expect(ckaIdFor(arn).length).toBe(16);
    expect(ckaIdFor(arn)).toEqual(ckaIdFor(arn));
    expect(ckaIdFor(arn)).not.toEqual(ckaIdFor(`${arn}x`));
  });
});

describe('status mapping', () => {
  it.each([
    [401, 'unauthorized', WireStatus.UNAUTHENTICATED],
    [403, 'policy_denied', WireStatus.POLICY_DENIED],
    [403, 'forbidden', WireStatus.FORBIDDEN],
    [403, 'request_rejected', WireStatus.REJECTED],
    [403, 'request_expired', WireStatus.EXPIRED],
    [404, 'request_not_found', WireStatus.BAD_REQUEST],
    [404, 'tenant_not_found', WireStatus.KEY_NOT_FOUND],
    [404, 'not_found', WireStatus.INTERNAL],
    [409, 'key_changed', WireStatus.KEY_CHANGED],
    [409, 'idempotency_key_in_use', WireStatus.INTERNAL],
    [400, 'invalid_hash', WireStatus.BAD_REQUEST],
    [400, 'algorithm_key_mismatch', WireStatus.ALGORITHM_INVALID],
    [413, 'payload_too_large', WireStatus.BAD_REQUEST],
    [429, 'rate_limited', WireStatus.UNAVAILABLE],
    [503, 'key_store_unavailable', WireStatus.UNAVAILABLE],
    [504, undefined, WireStatus.TIMEOUT],
    [500, 'internal_error', WireStatus.INTERNAL],
    [501, 'not_implemented', WireStatus.INTERNAL],
  ] as const)('%i %s -> %i', (http, code, wire) => expect(wireStatusFor(http, code)).toBe(wire));

  it('names the vulnerability in the message', () => {
    expect(messageFor(403, { error: 'policy_denied', reason: 'r', vuln_id: 'CVE-1', fix_version: '2' })).toBe(
      'policy_denied: r (vuln_id CVE-1, fix_version 2)',
    );
    expect(messageFor(502, undefined)).toBe('http_502: no reason given');
  });
});

describe('credentials', () => {
  it('reads a 0600 key file, re-reads it when it changes, refuses wider modes', async () => {
    const dir = tmp();
    const path = join(dir, 'key');
    writeFileSync(path, 'sbk_first\n', { mode: 0o600 });
    const source = apiKeyFromFile(path);
    expect(source.get()).toBe('sbk_first');
    expect(source.description).toBe(`file ${path}`);
    writeFileSync(path, 'sbk_second_longer\n');
    utimesSync(path, new Date(), new Date(Date.now() + 5000));
    // Seen when the watch on its folder tells (or within a second: daemon/credentials.ts).
    await vi.waitFor(() => expect(source.get()).toBe('sbk_second_longer'), { timeout: 5000 });
    chmodSync(path, 0o640);
    utimesSync(path, new Date(), new Date(Date.now() + 10_000));
    await vi.waitFor(() => expect(() => source.get()).toThrow(/mode 640/), { timeout: 5000 });
    expect(() => apiKeyFromFile(join(dir, 'absent'))).toThrow(CredentialError);
    writeFileSync(join(dir, 'empty'), '\n', { mode: 0o600 });
    expect(() => apiKeyFromFile(join(dir, 'empty'))).toThrow(/empty/);
  });
});

describe('configuration', () => {
  it('file < env < flags; paths relative to the file; per-tenant keys', () => {
    const dir = tmp();
    writeFileSync(join(dir, 'key'), 'sbk_file\n', { mode: 0o600 });
    writeFileSync(join(dir, 'beta.key'), 'sbk_beta\n', { mode: 0o600 });
    const file = join(dir, 'daemon.yaml');
    writeFileSync(
      file,
      'socket: run/d.sock\nservice: { url: "https://svc.example", apiKeyFile: key, timeoutSeconds: 2.5 }\n' +
        'tenants:\n  - { id: acme, label: ACME, certificates: { k1: certs/k1.pem } }\n  - { id: beta, apiKeyFile: beta.key }\n' +
        'cacheSeconds: 10\n',
    );
    const c = resolveDaemonConfig({ configFile: file, env: {} });
    expect(c.socketPath).toBe(join(dir, 'run', 'd.sock'));
    expect(c.tenants).toEqual([
      { tenantId: 'acme', label: 'ACME', certificates: { k1: join(dir, 'certs', 'k1.pem') } },
      { tenantId: 'beta', label: 'beta', certificates: {} },
    ]);
    expect(c.cacheTtlMs).toBe(10_000);
    if (c.upstream.type !== 'remote') throw new Error('expected remote');
    expect(c.upstream.url).toBe('https://svc.example');
    expect(c.upstream.timeoutMs).toBe(2500);
    expect(c.upstream.apiKey?.get()).toBe('sbk_file');
    expect(c.upstream.tenantApiKeys.get('beta')?.get()).toBe('sbk_beta');

    const env = {
      SIGNBRIDGE_API_KEY: 'sbk_env',
      SIGNBRIDGE_SOCKET: '/tmp/x/env.sock',
      SIGNBRIDGE_SERVICE_URL: 'http://e',
    };
    const e = resolveDaemonConfig({ configFile: file, env });
    expect(e.socketPath).toBe('/tmp/x/env.sock');
    if (e.upstream.type !== 'remote') throw new Error('expected remote');
    expect(e.upstream.apiKey?.get()).toBe('sbk_env');
    expect(e.upstream.url).toBe('http://e');

    const f = resolveDaemonConfig({
      configFile: file,
      env,
      socket: '/tmp/y/flag.sock',
      tenants: ['z=Zed'],
      serviceUrl: 'http://f',
    });
    expect(f.socketPath).toBe('/tmp/y/flag.sock');
    expect(f.tenants).toEqual([{ tenantId: 'z', label: 'Zed', certificates: {} }]);
  });

  it('defaults the socket to $XDG_RUNTIME_DIR/signbridge, else /tmp/signbridge-<uid>', () => {
    const base = { tenants: ['t'], serviceUrl: 'http://s' };
    const xdg = resolveDaemonConfig({ ...base, env: { SIGNBRIDGE_API_KEY: 'k', XDG_RUNTIME_DIR: '/run/user/1000' } });
    expect(xdg.socketPath).toBe('/run/user/1000/signbridge/daemon.sock');
    const none = resolveDaemonConfig({ ...base, env: { SIGNBRIDGE_API_KEY: 'k' } });
    expect(none.socketPath).toBe(`/tmp/signbridge-${process.getuid?.()}/daemon.sock`);
  });

  it('says what is missing or wrong', () => {
    const dir = tmp();
    const bad = (text: string, pattern: RegExp, env: NodeJS.ProcessEnv = { SIGNBRIDGE_API_KEY: 'k' }) => {
      const file = join(dir, `c${Math.random()}.yaml`);
      writeFileSync(file, text);
      expect(() => resolveDaemonConfig({ configFile: file, env })).toThrow(pattern);
    };
    bad('service: { url: http://s }\n', /no tenants/);
    bad('tenants: [{ id: a }]\n', /no service/);
    bad('service: { url: http://s }\ntenants: [{ id: a }]\n', /no credentials for a/, {});
    bad(
      'service: { url: http://s }\ntenants: [{ id: a, label: "0123456789012345678901234567890123" }]\n',
      /longer than 32 bytes/,
    );
    bad('service: { url: http://s }\ntenants: [{ id: a }, { id: a }]\n', /listed twice/);
    bad('tenants: [{ id: a, colour: red }]\n', /colour|additional/i);
    bad('tenants: [\n', /not valid YAML/);
    expect(() => resolveDaemonConfig({ configFile: join(dir, 'nope.yaml'), env: {} })).toThrow(DaemonConfigError);
  });
});

// ---- a scripted upstream for the catalog and the handler ----

function ecKey(curve = 'prime256v1') {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: curve });
  return { privateKey, pem: publicKey.export({ type: 'spki', format: 'pem' }).toString() };
}

class FakeUpstream implements Upstream {
  readonly description = 'fake';
  keys = new Map<string, PublicKeyInfo>();
  lookups = 0;
  next: ((input: SignInput) => SignResult | Promise<SignResult>) | undefined;
  signed: SignInput[] = [];
  async getPublicKey(tenantId: string): Promise<PublicKeyInfo> {
    this.lookups++;
    const key = this.keys.get(tenantId);
    if (!key) throw new UpstreamError(WireStatus.KEY_NOT_FOUND, `tenant_not_found: ${tenantId}`);
    return key;
  }
  async pkcs11Sign(input: SignInput): Promise<SignResult> {
    this.signed.push(input);
    if (!this.next) throw new UpstreamError(WireStatus.UNAVAILABLE, 'no script');
    return this.next(input);
  }
  collected = 0;
  collectNext: (() => SignResult | Promise<SignResult>) | undefined;
  async collect(_input: CollectInput): Promise<SignResult> {
    this.collected++;
    if (!this.collectNext) throw new UpstreamError(WireStatus.UNAVAILABLE, 'no script');
    return this.collectNext();
  }
  async close(): Promise<void> {}
}

function setKey(up: FakeUpstream, tenant: string, keyId: string, keySpec: KeySpec, pem: string) {
  up.keys.set(tenant, { keyId, keySpec, publicKeyPem: pem, signingAlgorithms: [] });
}

describe('KeyCatalog', () => {
  it('caches for its lifetime, then picks up a rotation; concurrent look-ups share one request', async () => {
    const up = new FakeUpstream();
    let now = 1000;
    const a = ecKey();
    setKey(up, 't', 'key-1', 'ECC_NIST_P256', a.pem);
    const catalog = new KeyCatalog({
      upstream: up,
      tenants: [{ tenantId: 't', label: 't', certificates: {} }],
      ttlMs: 60_000,
      log: silentLogger(),
      now: () => now,
    });
    const [x, y] = await Promise.all([catalog.current('t'), catalog.current('t')]);
    expect(x).toBe(y);
    expect(up.lookups).toBe(1);
    setKey(up, 't', 'key-2', 'ECC_NIST_P256', ecKey().pem);
    now += 59_000;
    expect((await catalog.current('t')).key.keyId).toBe('key-1');
    now += 2_000;
    expect((await catalog.current('t')).key.keyId).toBe('key-2');
    expect(up.lookups).toBe(2);
    expect((await catalog.current('t')).ckaId).toEqual(ckaIdFor('key-2'));
    await expect(catalog.current('other')).rejects.toThrow(/not exposed/);
  });

  it('publishes a matching certificate chain; leaves out a certificate for another key', async () => {
    const dir = tmp();
    const a = ecKey();
    writeFileSync(join(dir, 'a.key'), a.privateKey.export({ type: 'pkcs8', format: 'pem' }));
    const cert = (name: string, key: string) => {
      execFileSync(
        'openssl',
        [
          'req',
          '-x509',
          '-new',
          '-key',
          join(dir, key),
          '-subj',
          `/CN=${name}`,
          '-days',
          '1',
          '-out',
          join(dir, `${name}.pem`),
        ],
        { stdio: 'ignore' },
      );
      return join(dir, `${name}.pem`);
    };
    const other = ecKey();
    writeFileSync(
      join(dir, 'b.key'),
      createPrivateKey(other.privateKey.export({ type: 'pkcs8', format: 'pem' })).export({
        type: 'pkcs8',
        format: 'pem',
      }),
    );
    const leaf = cert('leaf', 'a.key');
    const inter = cert('intermediate', 'b.key');
    const chainFile = join(dir, 'chain.pem');
    writeFileSync(
      chainFile,
      (await import('node:fs')).readFileSync(leaf, 'utf8') + (await import('node:fs')).readFileSync(inter, 'utf8'),
    );
    const up = new FakeUpstream();
    setKey(up, 'good', 'k-good', 'ECC_NIST_P256', a.pem);
    setKey(up, 'bad', 'k-bad', 'ECC_NIST_P256', other.pem);
    const catalog = new KeyCatalog({
      upstream: up,
      tenants: [
        { tenantId: 'good', label: 'good', certificates: { 'k-good': chainFile } },
        { tenantId: 'bad', label: 'bad', certificates: { 'k-bad': leaf } },
      ],
      ttlMs: 60_000,
      log: silentLogger(),
    });
    const good = await catalog.current('good');
    expect(good.certs.certificate?.length).toBeGreaterThan(100);
    expect(good.certs.chain).toHaveLength(1);
    const bad = await catalog.current('bad');
    expect(bad.certs).toEqual({ chain: [] });
    // ... and LIST carries them as CERTIFICATE and CHAIN_CERTIFICATE.
    const handler = new RequestHandler({ catalog, upstream: up, log: silentLogger(), sbomMaxBytes: 1 });
    const list = await handler.list();
    if (list.type !== 'LIST_OK') throw new Error(JSON.stringify(list));
    const [goodKey] = list.tokens.find((t) => t.tenant === 'good')?.keys ?? [];
    expect(goodKey?.certificate).toEqual(good.certs.certificate);
    expect(goodKey?.chain).toEqual(good.certs.chain);
    const [badKey] = list.tokens.find((t) => t.tenant === 'bad')?.keys ?? [];
    expect(badKey?.certificate).toBeUndefined();
    expect(badKey?.chain).toEqual([]);
  });
});

describe('RequestHandler LIST: one tenant failure stays in its own token', () => {
  it('a tenant whose call times out is a token without keys that says why; all failing fails the LIST', async () => {
    const up = new FakeUpstream();
    setKey(up, 'ok', 'k-ok', 'ECC_NIST_P384', ecKey().pem);
    const slow = new Set(['slow']);
    const lookup = up.getPublicKey.bind(up);
    up.getPublicKey = async (tenantId: string) => {
      if (slow.has(tenantId)) throw new UpstreamError(WireStatus.TIMEOUT, 'the service did not answer within 300 ms');
      return lookup(tenantId);
    };
    const tenants = ['ok', 'slow', 'gone'].map((tenantId) => ({ tenantId, label: tenantId, certificates: {} }));
    const catalog = new KeyCatalog({ upstream: up, tenants, ttlMs: 60_000, log: silentLogger() });
    const handler = new RequestHandler({ catalog, upstream: up, log: silentLogger(), sbomMaxBytes: 1 });
    const list = await handler.list();
    if (list.type !== 'LIST_OK') throw new Error(JSON.stringify(list));
    expect(list.tokens.map((t) => [t.tenant, t.keys.length, t.status])).toEqual([
      ['ok', 1, undefined],
      ['slow', 0, WireStatus.TIMEOUT],
      ['gone', 0, WireStatus.KEY_NOT_FOUND],
    ]);
    expect(list.tokens[1]?.message).toMatch(/300 ms/);
    // Once the fault ends, the next LIST shows the tenant's key (failures are not cached).
    slow.clear();
    setKey(up, 'slow', 'k-slow', 'ECC_NIST_P256', ecKey().pem);
    const again = await handler.list();
    if (again.type !== 'LIST_OK') throw new Error(JSON.stringify(again));
    expect(again.tokens[1]).toMatchObject({ tenant: 'slow', keys: [{ keySpec: 'ECC_NIST_P256' }] });
    expect(again.tokens[1]?.status).toBeUndefined();
    // Every tenant failing (the service down for all) fails the whole LIST with that status, as before.
    const down = new KeyCatalog({ upstream: up, tenants: tenants.slice(1), ttlMs: 0, log: silentLogger() });
    slow.add('slow');
    const failed = await new RequestHandler({
      catalog: down,
      upstream: up,
      log: silentLogger(),
      sbomMaxBytes: 1,
    }).handle({ type: 'LIST' }, { pid: process.pid, uid: 0 });
    expect(failed).toMatchObject({ type: 'ERROR', status: WireStatus.TIMEOUT });
  });
});

describe('RequestHandler with a scripted upstream', () => {
  async function setup(spec: KeySpec = 'ECC_NIST_P256') {
    const up = new FakeUpstream();
    const a = spec.startsWith('RSA')
      ? {
          pem: generateKeyPairSync('rsa', { modulusLength: 2048 })
            .publicKey.export({ type: 'spki', format: 'pem' })
            .toString(),
        }
      : ecKey();
    setKey(up, 't', '0f8fad5b-d9cb-469f-a165-70867728950e', spec, a.pem);
    const catalog = new KeyCatalog({
      upstream: up,
      tenants: [{ tenantId: 't', label: 't', certificates: {} }],
      ttlMs: 60_000,
      log: silentLogger(),
    });
    const handler = new RequestHandler({
      catalog,
      upstream: up,
      log: silentLogger(),
      sbomMaxBytes: 100,
      // Long beside the interval: a POLL re-asks many times within its wait even when a loaded machine stalls.
      approvalWaitMs: 1_000,
      pollIntervalMs: 20,
    });
    const sign = (algorithm: string, digest = Buffer.alloc(32)): Promise<Response> =>
      handler.handle(
        { type: 'SIGN', tenant: 't', keyId: ckaIdFor('0f8fad5b-d9cb-469f-a165-70867728950e'), algorithm, digest },
        { pid: process.pid, uid: 0 },
      );
    return { up, handler, sign };
  }

  it('a 202 from the service becomes SIGN_PENDING; POLL waits, re-asks, then delivers or reports the end', async () => {
    const { up, sign, handler } = await setup();
    const peer = { pid: process.pid, uid: 0 };
    const poll = (requestId: string, tenant = 't', digest = Buffer.alloc(32)) =>
      handler.handle({ type: 'POLL', tenant, requestId, digest }, peer);
    up.next = () => ({ kind: 'pending', requestId: 'r-9', status: 'pending_approval', message: 'needs approval' });
    expect(await sign('ECDSA_SHA_256')).toEqual({
      type: 'SIGN_PENDING',
      requestId: 'r-9',
      status: 'pending_approval',
      message: 'needs approval',
    });
    up.collectNext = () => ({
      kind: 'pending',
      requestId: 'r-9',
      status: 'pending_security_review',
      message: 'review',
    });
    const t0 = Date.now();
    expect(await poll('r-9')).toMatchObject({ type: 'SIGN_PENDING', status: 'pending_security_review' });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(990);
    expect(up.collected).toBeGreaterThan(2);
    // Another tenant or another digest than the SIGN's: refused without asking the service.
    const asked = up.collected;
    expect(await poll('r-9', 'x')).toMatchObject({ type: 'ERROR', status: WireStatus.BAD_REQUEST });
    expect(await poll('r-9', 't', Buffer.alloc(32, 1))).toMatchObject({
      type: 'ERROR',
      status: WireStatus.BAD_REQUEST,
    });
    expect(up.collected).toBe(asked);
    // A network failure keeps it; an approval delivers it in PKCS#11 form.
    up.collectNext = () => {
      throw new UpstreamError(WireStatus.UNAVAILABLE, 'down');
    };
    expect(await poll('r-9')).toMatchObject({ type: 'ERROR', status: WireStatus.UNAVAILABLE });
    const raw = randomBytes(64);
    const keyId = '0f8fad5b-d9cb-469f-a165-70867728950e';
    up.collectNext = () => ({ kind: 'signed', signature: ecdsaRawToDer(raw), keyId, algorithm: 'ECDSA_SHA_256' });
    expect(await poll('r-9')).toEqual({ type: 'SIGN_OK', signature: raw, requestId: 'r-9' });
    // Unknown to this daemon (restarted): collected all the same, r||s as wide as the signing key's curve (P-256),
    // not the algorithm's hash (an EC key signs every SHA-2 digest).
    const raw256 = Buffer.concat([Buffer.alloc(1), randomBytes(31), Buffer.alloc(1), randomBytes(31)]);
    up.collectNext = () => ({ kind: 'signed', signature: ecdsaRawToDer(raw256), keyId, algorithm: 'ECDSA_SHA_512' });
    expect(await poll('r-unknown')).toEqual({ type: 'SIGN_OK', signature: raw256, requestId: 'r-unknown' });
    // Signed by a key that is no longer current: no module holds it, so it cannot be given out.
    up.collectNext = () => ({
      kind: 'signed',
      signature: ecdsaRawToDer(raw256),
      keyId: '7c9e6679-7425-40de-944b-e07fc1f90ae7',
      algorithm: 'ECDSA_SHA_256',
    });
    expect(await poll('r-old')).toMatchObject({ type: 'ERROR', status: WireStatus.KEY_NOT_FOUND, requestId: 'r-old' });
    expect(await poll('r-unknown', 'not-exposed')).toMatchObject({ type: 'ERROR', status: WireStatus.KEY_NOT_FOUND });
    // An expiry is final and names the request.
    up.next = () => ({ kind: 'pending', requestId: 'r-10', status: 'pending_approval', message: '' });
    await sign('ECDSA_SHA_256');
    up.collectNext = () => {
      throw new UpstreamError(WireStatus.EXPIRED, 'request_expired: too late', 'http-id');
    };
    expect(await poll('r-10')).toMatchObject({ type: 'ERROR', status: WireStatus.EXPIRED, requestId: 'r-10' });
  });

  it('derives pss_padding from the algorithm and left-pads a short RSA signature to the modulus size', async () => {
    const { up, sign } = await setup('RSA_2048');
    up.next = (input) => ({
      kind: 'signed',
      signature: Buffer.alloc(255, 1),
      keyId: '0f8fad5b-d9cb-469f-a165-70867728950e',
      algorithm: input.pss ? 'RSASSA_PSS_SHA_256' : 'RSASSA_PKCS1_V1_5_SHA_256',
    });
    const res = await sign('RSASSA_PSS_SHA_256');
    expect(up.signed.at(-1)?.pss).toBe(true);
    expect(res.type === 'SIGN_OK' && res.signature.length).toBe(256);
    expect(res.type === 'SIGN_OK' && res.signature[0]).toBe(0);
    await sign('RSASSA_PKCS1_V1_5_SHA_256');
    expect(up.signed.at(-1)?.pss).toBe(false);
  });

  it('refuses a signature made with another algorithm, or one that is not valid DER', async () => {
    const { up, sign } = await setup();
    const keyId = '0f8fad5b-d9cb-469f-a165-70867728950e';
    up.next = () => ({ kind: 'signed', signature: Buffer.alloc(70), keyId, algorithm: 'ECDSA_SHA_384' });
    expect(await sign('ECDSA_SHA_256')).toMatchObject({
      type: 'ERROR',
      status: WireStatus.INTERNAL,
      message: /not the requested/,
    });
    up.next = () => ({ kind: 'signed', signature: Buffer.from('3000', 'hex'), keyId, algorithm: 'ECDSA_SHA_256' });
    expect(await sign('ECDSA_SHA_256')).toMatchObject({
      type: 'ERROR',
      status: WireStatus.INTERNAL,
      message: /unusable/,
    });
  });

  it('an unexpected exception is INTERNAL without details; SBOM over the limit is BAD_REQUEST before any call', async () => {
    const { up, handler, sign } = await setup();
    up.next = () => {
      throw new Error('secret detail');
    };
    const res = await sign('ECDSA_SHA_256');
    expect(res).toMatchObject({ type: 'ERROR', status: WireStatus.INTERNAL });
    expect(res.type === 'ERROR' && res.message).not.toMatch(/secret/);
    const dir = tmp();
    writeFileSync(join(dir, 'sbom.json'), 'x'.repeat(101));
    const calls = up.signed.length;
    const big = await handler.handle(
      {
        type: 'SIGN',
        tenant: 't',
        keyId: ckaIdFor('0f8fad5b-d9cb-469f-a165-70867728950e'),
        algorithm: 'ECDSA_SHA_256',
        digest: Buffer.alloc(32),
        sbomPath: join(dir, 'sbom.json'),
      },
      { pid: process.pid, uid: 0 },
    );
    expect(big).toMatchObject({ type: 'ERROR', status: WireStatus.BAD_REQUEST, message: /limit of 100/ });
    expect(up.signed.length).toBe(calls);
    // A relative path is the client's: resolved against its working directory.
    writeFileSync(join(dir, 'small.json'), '{}');
    up.next = (input) => {
      expect(input.context.sbom).toBe('{}');
      throw new UpstreamError(WireStatus.POLICY_DENIED, 'checked');
    };
    const cwd = process.cwd();
    process.chdir(dir);
    try {
      const rel = await handler.handle(
        {
          type: 'SIGN',
          tenant: 't',
          keyId: ckaIdFor('0f8fad5b-d9cb-469f-a165-70867728950e'),
          algorithm: 'ECDSA_SHA_256',
          digest: Buffer.alloc(32),
          sbomPath: 'small.json',
        },
        { pid: process.pid, uid: 0 },
      );
      expect(rel).toMatchObject({ type: 'ERROR', status: WireStatus.POLICY_DENIED, message: 'checked' });
    } finally {
      process.chdir(cwd);
    }
  });
});

describe('RemoteUpstream against a scripted HTTP server', () => {
  // A time-out far beyond a local answer on a loaded machine; the tests of the time-out itself pass their own.
  async function serve(handler: (n: number, req: IncomingMessage, res: ServerResponse) => void, timeoutMs = 15_000) {
    let n = 0;
    const server = createHttpServer((req, res) => handler(++n, req, res));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
    const { port } = server.address() as { port: number };
    const upstream = new RemoteUpstream({
      url: `http://127.0.0.1:${port}/base`,
      apiKey: apiKeyFromEnv('sbk_test'),
      timeoutMs,
    });
    const close = async () => {
      await upstream.close();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    };
    return { upstream, port, count: () => n, close };
  }
  /** A pkcs11_sign of a P-256 digest for tenant t. */
  const signOnce = (upstream: RemoteUpstream) =>
    upstream.pkcs11Sign({ tenantId: 't', digest: Buffer.alloc(32), keySpec: 'ECC_NIST_P256', pss: false, context: {} });
  const { publicKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  const pem = publicKey.export({ type: 'spki', format: 'pem' }).toString();

  it('reads again once when a connection dies under a get_public_key', async () => {
    const seen: string[] = [];
    const srv = await serve((n, req, res) => {
      seen.push(`${req.url} ${req.headers.authorization}`);
      if (n === 1) {
        req.socket.destroy();
        return;
      }
      res.setHeader('content-type', 'application/json');
      res.end(
        JSON.stringify({
          key_id: 'k',
          key_spec: 'ECC_NIST_P256',
          public_key_pem: pem,
          signing_algorithms: ['ECDSA_SHA_256', 'BOGUS'],
        }),
      );
    });
    try {
      const key = await srv.upstream.getPublicKey('t');
      expect(key).toEqual({
        keyId: 'k',
        keySpec: 'ECC_NIST_P256',
        publicKeyPem: pem,
        signingAlgorithms: ['ECDSA_SHA_256'],
      });
      expect(srv.count()).toBe(2);
      expect(seen[0]).toBe('/base/v1/get_public_key Bearer sbk_test');
    } finally {
      await srv.close();
    }
  });

  it('sends a signature again after a dropped connection only with the same Idempotency-Key, once by default', async () => {
    const keys: (string | undefined)[] = [];
    const signed = JSON.stringify({ signature: 'c2ln', key_id: 'k', signing_algorithm: 'ECDSA_SHA_256' });
    const srv = await serve((n, req, res) => {
      keys.push(req.headers['idempotency-key'] as string | undefined);
      // The first signature: its answer is lost once. The second: every answer is lost.
      if (n === 1 || n >= 3) {
        req.socket.destroy();
        return;
      }
      res.setHeader('content-type', 'application/json');
      res.end(signed);
    });
    try {
      expect(await signOnce(srv.upstream)).toMatchObject({ kind: 'signed', keyId: 'k' });
      expect(keys).toHaveLength(2);
      expect(keys[0]).toMatch(/^[0-9a-f-]{36}$/);
      expect(keys[1]).toBe(keys[0]);
      // Without retryWithinMs (signbridge sign/digest): the one resend at once on a new connection, then the error.
      await expect(signOnce(srv.upstream)).rejects.toMatchObject({ status: WireStatus.UNAVAILABLE });
      expect(keys).toHaveLength(4);
      expect(keys[3]).toBe(keys[2]);
      expect(keys[2]).not.toBe(keys[0]);
      // Collecting an approved request carries no key (it is idempotent by itself).
      await expect(
        srv.upstream.collect({ tenantId: 't', requestId: 'r', digest: Buffer.alloc(32) }),
      ).rejects.toMatchObject({ status: WireStatus.UNAVAILABLE });
      expect(keys.slice(4)).toEqual([undefined, undefined]);
    } finally {
      await srv.close();
    }
  });

  it('waits for an earlier attempt the service is still answering (409 idempotency_key_in_use), even without retryWithinMs', async () => {
    const keys: (string | undefined)[] = [];
    const srv = await serve((n, req, res) => {
      keys.push(req.headers['idempotency-key'] as string | undefined);
      res.setHeader('content-type', 'application/json');
      if (n === 1) {
        req.socket.destroy(); // the answer to the first attempt is lost
      } else if (n === 2) {
        res.statusCode = 409;
        res.end(JSON.stringify({ error: 'idempotency_key_in_use', reason: 'still being answered' }));
      } else {
        res.end(JSON.stringify({ signature: 'c2ln', key_id: 'k', signing_algorithm: 'ECDSA_SHA_256' }));
      }
    }, 60_000);
    try {
      expect(await signOnce(srv.upstream)).toMatchObject({ kind: 'signed', keyId: 'k' });
      expect(keys).toHaveLength(3);
      expect(new Set(keys).size).toBe(1);
    } finally {
      await srv.close();
    }
  });

  it('within retryWithinMs sends a signature again on 502, 503, 408, 429 and refused connections, never a final answer', async () => {
    const keys: (string | undefined)[] = [];
    const signed = JSON.stringify({ signature: 'c2ln', key_id: 'k', signing_algorithm: 'ECDSA_SHA_256' });
    // Each transient answer once, in turn, then the signature; then a denial, which is final.
    const transient: [number, string][] = [
      [502, '<html>bad gateway</html>'],
      [503, JSON.stringify({ error: 'shutting_down', reason: 'the service is shutting down' })],
      [503, JSON.stringify({ error: 'store_unavailable', reason: 'SQLITE_BUSY' })],
      [503, JSON.stringify({ error: 'key_store_unavailable', reason: 'token gone' })],
      [408, JSON.stringify({ error: 'request_timeout', reason: 'slow body' })],
      [429, JSON.stringify({ error: 'rate_limited', reason: 'slow down' })],
    ];
    const srv = await serve((n, req, res) => {
      keys.push(req.headers['idempotency-key'] as string | undefined);
      res.setHeader('content-type', 'application/json');
      const step = transient[n - 1];
      if (step) {
        res.statusCode = step[0];
        res.end(step[1]);
      } else if (n === transient.length + 1) {
        res.end(signed);
      } else {
        res.statusCode = 403;
        res.end(JSON.stringify({ error: 'policy_denied', reason: 'no' }));
      }
    });
    const patient = new RemoteUpstream({
      url: `http://127.0.0.1:${srv.port}/base`,
      apiKey: apiKeyFromEnv('sbk_test'),
      timeoutMs: 2000,
      retryWithinMs: 600_000,
    });
    try {
      expect(await signOnce(patient)).toMatchObject({ kind: 'signed', keyId: 'k' });
      expect(keys).toHaveLength(transient.length + 1);
      expect(new Set(keys).size).toBe(1);
      await expect(signOnce(patient)).rejects.toMatchObject({ status: WireStatus.POLICY_DENIED });
      expect(keys).toHaveLength(transient.length + 2);
      // A 503 that stays so (no sign-in configured) is not waited out either.
      const oauth = await serve((_n, _req, res) => {
        res.statusCode = 503;
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ error: 'oauth_not_configured', reason: 'no IdP' }));
      });
      const patientToo = new RemoteUpstream({
        url: `http://127.0.0.1:${oauth.port}/base`,
        apiKey: apiKeyFromEnv('sbk_test'),
        timeoutMs: 2000,
        retryWithinMs: 600_000,
      });
      try {
        await expect(signOnce(patientToo)).rejects.toMatchObject({ status: WireStatus.UNAVAILABLE });
        expect(oauth.count()).toBe(1);
      } finally {
        await patientToo.close();
        await oauth.close();
      }
    } finally {
      await patient.close();
      await srv.close();
    }
    // Nothing listens on the port now: sent again until the window closes, then UNAVAILABLE saying so.
    const gone = new RemoteUpstream({
      url: `http://127.0.0.1:${srv.port}`,
      apiKey: apiKeyFromEnv('sbk_test'),
      timeoutMs: 2000,
      retryWithinMs: 1000,
    });
    try {
      await expect(signOnce(gone)).rejects.toMatchObject({
        status: WireStatus.UNAVAILABLE,
        message: /ECONNREFUSED \(sent \d+ times over \d+\.\d s\)/,
      });
    } finally {
      await gone.close();
    }
  });

  it('fails a service that does not answer with TIMEOUT after timeoutMs, and an unreachable one with UNAVAILABLE', async () => {
    const slow = await serve(() => undefined, 300); // never answers
    try {
      const started = Date.now();
      await expect(signOnce(slow.upstream)).rejects.toMatchObject({
        status: WireStatus.TIMEOUT,
        message: /did not answer within 300 ms/,
      });
      const waited = Date.now() - started;
      expect(waited).toBeGreaterThanOrEqual(250);
      expect(waited).toBeLessThan(30_000); // ended by the time-out, not by the test's
    } finally {
      await slow.close();
    }
    // The port is closed now: nothing listens there.
    const gone = new RemoteUpstream({
      url: `http://127.0.0.1:${slow.port}`,
      apiKey: apiKeyFromEnv('sbk_test'),
      timeoutMs: 300,
    });
    try {
      await expect(signOnce(gone)).rejects.toMatchObject({
        status: WireStatus.UNAVAILABLE,
        message: /cannot reach the service at http:\/\/127\.0\.0\.1:\d+: ECONNREFUSED/,
      });
    } finally {
      await gone.close();
    }
  });

  it('bounds the whole exchange: a service trickling its answer times out; an answer over 1 MiB is refused', async () => {
    const timers: NodeJS.Timeout[] = [];
    const srv = await serve((_n, req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      if (req.url?.endsWith('get_public_key')) {
        // Headers at once, then a byte every 50 ms: no single wait is long, the whole answer never ends.
        timers.push(setInterval(() => res.write(' '), 50));
      } else {
        res.end(`{"signature":"${'A'.repeat(2 * 1024 * 1024)}"}`);
      }
    }, 400);
    try {
      const started = Date.now();
      await expect(srv.upstream.getPublicKey('t')).rejects.toMatchObject({
        status: WireStatus.TIMEOUT,
        message: /did not answer within 400 ms/,
      });
      expect(Date.now() - started).toBeLessThan(30_000); // the whole answer is bounded, not each wait
      await expect(signOnce(srv.upstream)).rejects.toMatchObject({
        status: WireStatus.INTERNAL,
        message: /more than 1048576 bytes/,
      });
    } finally {
      for (const t of timers) clearInterval(t);
      await srv.close();
    }
  });

  it('maps a proxy error page, a 2xx without JSON and a 202 to their statuses', async () => {
    const srv = await serve((n, _req, res) => {
      if (n === 1) {
        res.statusCode = 502;
        res.end('<html>bad gateway</html>');
      } else if (n === 2) {
        res.end('not json');
      } else {
        res.statusCode = 202;
        res.setHeader('x-request-id', 'http-1');
        res.end(JSON.stringify({ request_id: 'r-1', status: 'pending_security_review', message: 'security review' }));
      }
    });
    try {
      await expect(srv.upstream.getPublicKey('t')).rejects.toMatchObject({
        status: WireStatus.UNAVAILABLE,
        message: /http_502/,
      });
      await expect(srv.upstream.getPublicKey('t')).rejects.toMatchObject({
        status: WireStatus.INTERNAL,
        message: /without a JSON body/,
      });
      const pending = await signOnce(srv.upstream);
      expect(pending).toEqual({
        kind: 'pending',
        requestId: 'r-1',
        status: 'pending_security_review',
        message: 'security review',
      });
    } finally {
      await srv.close();
    }
  });
});

describe('RequestHandler IMPORT_CERTIFICATES', () => {
  /** A self-signed certificate for `key`, DER. */
  function certFor(key: ReturnType<typeof ecKey>, name: string): Buffer {
    const dir = tmp();
    writeFileSync(join(dir, 'k.pem'), key.privateKey.export({ type: 'pkcs8', format: 'pem' }));
    return execFileSync('openssl', [
      'req',
      '-x509',
      '-new',
      '-key',
      join(dir, 'k.pem'),
      '-subj',
      `/CN=${name}`,
      '-days',
      '1',
      '-outform',
      'DER',
    ]);
  }
  const peer = { pid: process.pid, uid: 0 };

  function setup(options: { store?: boolean; configured?: Record<string, string> } = {}) {
    const up = new FakeUpstream();
    const key = ecKey();
    setKey(up, 't', '../k-1', 'ECC_NIST_P256', key.pem);
    const dir = tmp();
    const store = options.store === false ? undefined : new CertificateStore(join(dir, 'certs'));
    const catalog = new KeyCatalog({
      upstream: up,
      tenants: [{ tenantId: 't', label: 't', certificates: options.configured ?? {} }],
      ttlMs: 60_000,
      log: silentLogger(),
      ...(store && { certificateStore: store }),
    });
    const handler = new RequestHandler({
      catalog,
      upstream: up,
      log: silentLogger(),
      sbomMaxBytes: 1,
      ...(store && { certificateStore: store }),
    });
    return { up, key, dir, catalog, handler };
  }

  it('stores a matching leaf privately inside its folder (whatever the key id) and publishes it at once', async () => {
    const { key, dir, catalog, handler } = setup();
    expect((await catalog.current('t')).certs.certificate).toBeUndefined();
    const leaf = certFor(key, 'leaf');
    const res = await handler.handle({ type: 'IMPORT_CERTIFICATES', tenant: 't', certificate: leaf, chain: [] }, peer);
    if (res.type !== 'IMPORT_OK') throw new Error(JSON.stringify(res));
    expect(res.label).toBe('../k-1');
    expect(res.keyId).toEqual(ckaIdFor('../k-1'));
    const file = join(dir, 'certs', 't', '%2e%2e%2fk-1.pem');
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect((await catalog.current('t')).certs.certificate).toEqual(leaf);
  });

  it('refuses another key, an unknown tenant, a configured file and a daemon without a folder', async () => {
    const { handler } = setup();
    const other = certFor(ecKey(), 'other');
    const wrongKey = await handler.handle(
      { type: 'IMPORT_CERTIFICATES', tenant: 't', certificate: other, chain: [] },
      peer,
    );
    expect(wrongKey).toMatchObject({ type: 'ERROR', status: WireStatus.BAD_REQUEST });
    expect((wrongKey as { message: string }).message).toMatch(/does not carry this key's public key/);
    const garbage = await handler.handle(
      { type: 'IMPORT_CERTIFICATES', tenant: 't', certificate: Buffer.from('3003020101', 'hex'), chain: [] },
      peer,
    );
    expect(garbage).toMatchObject({ type: 'ERROR', status: WireStatus.BAD_REQUEST });
    const unknown = await handler.handle(
      { type: 'IMPORT_CERTIFICATES', tenant: 'x', certificate: other, chain: [] },
      peer,
    );
    expect(unknown).toMatchObject({ type: 'ERROR', status: WireStatus.KEY_NOT_FOUND });

    const pinned = setup({ configured: { '../k-1': '/etc/certs/pinned.pem' } });
    const refused = await pinned.handler.handle(
      { type: 'IMPORT_CERTIFICATES', tenant: 't', certificate: certFor(pinned.key, 'leaf'), chain: [] },
      peer,
    );
    expect(refused).toMatchObject({ type: 'ERROR', status: WireStatus.BAD_REQUEST });
    expect((refused as { message: string }).message).toContain('/etc/certs/pinned.pem');

    const noFolder = setup({ store: false });
    const none = await noFolder.handler.handle(
      { type: 'IMPORT_CERTIFICATES', tenant: 't', certificate: certFor(noFolder.key, 'leaf'), chain: [] },
      peer,
    );
    expect(none).toMatchObject({ type: 'ERROR', status: WireStatus.BAD_REQUEST });
  });
});

describe('daemon certificate folder', () => {
  const base = { tenants: ['t'], serviceUrl: 'http://127.0.0.1:1' };
  it('defaults under XDG_DATA_HOME or ~/.local/share; the file, the environment and --cert-dir override it', () => {
    const env = { SIGNBRIDGE_API_KEY: 'sbk_x_y', HOME: '/home/b' };
    expect(resolveDaemonConfig({ ...base, env }).certificateDir).toBe('/home/b/.local/share/signbridge/certificates');
    expect(resolveDaemonConfig({ ...base, env: { ...env, XDG_DATA_HOME: '/xdg' } }).certificateDir).toBe(
      '/xdg/signbridge/certificates',
    );
    const dir = tmp();
    writeFileSync(join(dir, 'd.yaml'), 'certificateDir: certs\n');
    expect(resolveDaemonConfig({ ...base, env, configFile: join(dir, 'd.yaml') }).certificateDir).toBe(
      join(dir, 'certs'),
    );
    expect(
      resolveDaemonConfig({
        ...base,
        env: { ...env, SIGNBRIDGE_CERT_DIR: '/env/certs' },
        configFile: join(dir, 'd.yaml'),
      }).certificateDir,
    ).toBe('/env/certs');
    expect(resolveDaemonConfig({ ...base, env, certificateDir: '/flag' }).certificateDir).toBe('/flag');
  });
});
