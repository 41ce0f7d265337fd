// The daemon's side of CKM_EDDSA (wire protocol version 2): HELLO picks the highest common version, LIST shows an
// Ed25519 key only to a module that speaks version 2, and SIGN's DATA (the message, DIGEST its SHA-512) goes to the
// upstream as a message; everything inconsistent is a BAD_REQUEST with nothing sent upstream.
import { createHash, createPublicKey, generateKeyPairSync, sign as nodeSign, verify } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { RequestHandler } from '../../daemon/handler.js';
import { KeyCatalog } from '../../daemon/key-catalog.js';
import { silentLogger } from '../../daemon/logger.js';
import {
  type CollectInput,
  type PublicKeyInfo,
  type SignInput,
  type SignResult,
  type Upstream,
  UpstreamError,
} from '../../daemon/upstream/upstream.js';
import { ED25519_MAX_MESSAGE_BYTES } from '../../src/crypto/algorithms.js';
import { decodeFrame } from '../../wire/codec.js';
import type { Response, Sign } from '../../wire/messages.js';
import { WireStatus } from '../../wire/wire.js';

const ed = generateKeyPairSync('ed25519');
const peer = { pid: process.pid, uid: process.getuid?.() ?? 0 };
const sha512 = (b: Buffer) => createHash('sha512').update(b).digest();

/** Signs for real with the Ed25519 key, and keeps what it was asked. */
class Ed25519Upstream implements Upstream {
  readonly description = 'ed25519 fake';
  signed: SignInput[] = [];
  async getPublicKey(tenantId: string): Promise<PublicKeyInfo> {
    if (tenantId !== 'ed') throw new UpstreamError(WireStatus.KEY_NOT_FOUND, 'no such tenant');
    return {
      keyId: 'k-ed',
      keySpec: 'ECC_NIST_EDWARDS25519',
      publicKeyPem: ed.publicKey.export({ type: 'spki', format: 'pem' }).toString(),
      signingAlgorithms: ['ED25519_SHA_512', 'ED25519_PH_SHA_512'],
    };
  }
  async pkcs11Sign(input: SignInput): Promise<SignResult> {
    this.signed.push(input);
    if (!input.message) throw new UpstreamError(WireStatus.BAD_REQUEST, 'a digest for an Ed25519 key');
    return {
      kind: 'signed',
      signature: nodeSign(null, input.message, ed.privateKey),
      keyId: 'k-ed',
      algorithm: 'ED25519_SHA_512',
    };
  }
  async collect(_input: CollectInput): Promise<SignResult> {
    throw new UpstreamError(WireStatus.BAD_REQUEST, 'nothing held');
  }
  async close(): Promise<void> {}
}

function setup() {
  const upstream = new Ed25519Upstream();
  const tenants = [{ tenantId: 'ed', label: 'ed', certificates: {} }];
  const catalog = new KeyCatalog({ upstream, tenants, ttlMs: 60_000, log: silentLogger() });
  const handler = new RequestHandler({ catalog, upstream, log: silentLogger(), sbomMaxBytes: 1 });
  return { upstream, catalog, handler };
}

function expectError(res: Response, status: number, message: RegExp) {
  expect(res.type).toBe('ERROR');
  if (res.type !== 'ERROR') return;
  expect(res.status).toBe(status);
  expect(res.message).toMatch(message);
}

describe('HELLO: the highest version both sides speak', () => {
  const { handler } = setup();
  it.each([
    [1, 2, 2],
    [1, 1, 1],
    [2, 3, 2],
    [2, 2, 2],
  ])('%i..%i -> %i', (versionMin, versionMax, version) => {
    expect(handler.hello({ type: 'HELLO', versionMin, versionMax, client: 't', pid: 1 })).toMatchObject({
      type: 'HELLO_OK',
      version,
    });
  });
  it('3..4 and an inverted range: VERSION_UNSUPPORTED', () => {
    expectError(handler.hello({ type: 'HELLO', versionMin: 3, versionMax: 4, client: 't', pid: 1 }), 11, /1\.\.2/);
    expectError(handler.hello({ type: 'HELLO', versionMin: 2, versionMax: 1, client: 't', pid: 1 }), 11, /2\.\.1/);
  });
});

describe('an Ed25519 key through the module', () => {
  it('LIST shows it to a version 2 module (its SPKI); a version 1 module gets a token without keys that says why', async () => {
    const { handler } = setup();
    const v2 = await handler.list(2);
    if (v2.type !== 'LIST_OK') throw new Error(JSON.stringify(v2));
    expect(v2.tokens[0]?.keys[0]).toMatchObject({ keySpec: 'ECC_NIST_EDWARDS25519', label: 'k-ed' });
    expect(v2.tokens[0]?.keys[0]?.publicKey).toEqual(ed.publicKey.export({ type: 'spki', format: 'der' }));
    expect(v2.tokens[0]?.message).toBeUndefined();
    const v1 = await handler.list(1);
    if (v1.type !== 'LIST_OK') throw new Error(JSON.stringify(v1));
    expect(v1.tokens[0]?.keys).toEqual([]);
    expect(v1.tokens[0]?.status).toBeUndefined();
    expect(v1.tokens[0]?.message).toMatch(/wire protocol version 1, and CKM_EDDSA needs version 2/);
  });

  async function signRequest(handler: RequestHandler, data: Buffer | undefined, extra: Partial<Sign> = {}) {
    const list = await handler.list(2);
    if (list.type !== 'LIST_OK') throw new Error(JSON.stringify(list));
    const keyId = list.tokens[0]?.keys[0]?.keyId as Buffer;
    const sign: Sign = {
      type: 'SIGN',
      tenant: 'ed',
      keyId,
      algorithm: 'ED25519_SHA_512',
      digest: sha512(data ?? Buffer.from('x')),
      ...(data !== undefined && { data }),
      ...extra,
    };
    return sign;
  }

  it('SIGN with DATA on a version 2 connection: the message goes upstream, 64 bytes come back', async () => {
    const { handler, upstream } = setup();
    const message = Buffer.from('a TBSCertificate');
    const res = await handler.handle(await signRequest(handler, message), peer, 2);
    if (res.type !== 'SIGN_OK') throw new Error(JSON.stringify(res));
    expect(res.signature).toHaveLength(64);
    expect(upstream.signed[0]?.message).toEqual(message);
    expect(upstream.signed[0]?.digest).toEqual(sha512(message));
  });

  const refused: [string, Buffer | undefined, Partial<Sign>, number, RegExp][] = [
    ['DATA on a version 1 connection', Buffer.from('m'), {}, 1, /protocol version 1 .* does not have/],
    [
      `DATA past ${ED25519_MAX_MESSAGE_BYTES} bytes`,
      Buffer.alloc(ED25519_MAX_MESSAGE_BYTES + 1),
      {},
      2,
      /at most 4096 bytes of message, got 4097/,
    ],
    [
      'a DIGEST that is not the SHA-512 of DATA',
      Buffer.from('m'),
      { digest: sha512(Buffer.from('n')) },
      2,
      /SHA-512 of DATA/,
    ],
    ['ED25519_SHA_512 without DATA', undefined, {}, 2, /does not carry \(DATA\)/],
    ['DATA with a digest algorithm', Buffer.from('m'), { algorithm: 'ED25519_PH_SHA_512' }, 2, /signs a digest/],
  ];
  it.each(refused)('%s: BAD_REQUEST, nothing sent upstream', async (_name, data, extra, version, message) => {
    const { handler, upstream } = setup();
    const res = await handler.handle(await signRequest(handler, data, extra), peer, version);
    expectError(res, WireStatus.BAD_REQUEST, message);
    expect(upstream.signed).toEqual([]);
  });
});

describe('the Ed25519 golden frames', () => {
  const golden = (name: string) =>
    decodeFrame(
      Buffer.from(
        readFileSync(join(import.meta.dirname, '../golden/wire', `${name}.hex`), 'utf8')
          .replace(/#.*$/gm, '')
          .replace(/\s+/g, ''),
        'hex',
      ),
    );
  it("sign-ok-ed25519's signature verifies over sign-ed25519's DATA under list-ok-ed25519's key; DIGEST is its SHA-512", () => {
    const list = golden('list-ok-ed25519');
    const sign = golden('sign-ed25519');
    const ok = golden('sign-ok-ed25519');
    if (list.type !== 'LIST_OK' || sign.type !== 'SIGN' || ok.type !== 'SIGN_OK') throw new Error('golden frame types');
    const spki = list.tokens[0]?.keys[0]?.publicKey as Buffer;
    const key = createPublicKey({ key: spki, format: 'der', type: 'spki' });
    expect(sign.data && verify(null, sign.data, key, ok.signature)).toBe(true);
    expect(sign.digest).toEqual(sha512(sign.data as Buffer));
  });
});
