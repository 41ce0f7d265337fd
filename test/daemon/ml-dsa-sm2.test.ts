// The daemon with ML-DSA and SM2 keys, against a scripted upstream: LIST carries an ML-DSA key with its raw public
// key (read from the SPKI by src/crypto/spki.ts: Node 20 cannot), leaves an SM2 key out of its token and says why;
// SIGN forwards μ for an ML-DSA key and hands the raw signature back only at the parameter set's exact length.
import { ml_dsa65 } from '@noble/post-quantum/ml-dsa.js';
import smCrypto from 'sm-crypto';
import { describe, expect, it } from 'vitest';
import { RequestHandler } from '../../daemon/handler.js';
import { KeyCatalog } from '../../daemon/key-catalog.js';
import { ckaIdFor } from '../../daemon/key-id.js';
import { silentLogger } from '../../daemon/logger.js';
import type { CollectInput, PublicKeyInfo, SignInput, SignResult, Upstream } from '../../daemon/upstream/upstream.js';
import { UpstreamError } from '../../daemon/upstream/upstream.js';
import type { KeySpec } from '../../src/crypto/algorithms.js';
import { mlDsaSpkiDer, mlDsaSpkiPem, sm2SpkiPem } from '../../src/crypto/spki.js';
import type { ListOk, Response } from '../../wire/messages.js';
import { WireStatus } from '../../wire/wire.js';

class ScriptedUpstream implements Upstream {
  readonly description = 'scripted';
  keys = new Map<string, PublicKeyInfo>();
  signed: SignInput[] = [];
  answer: (input: SignInput) => SignResult = () => {
    throw new UpstreamError(WireStatus.UNAVAILABLE, 'no script');
  };
  async getPublicKey(tenantId: string): Promise<PublicKeyInfo> {
    const key = this.keys.get(tenantId);
    if (!key) throw new UpstreamError(WireStatus.KEY_NOT_FOUND, `tenant_not_found: ${tenantId}`);
    return key;
  }
  async pkcs11Sign(input: SignInput): Promise<SignResult> {
    this.signed.push(input);
    return this.answer(input);
  }
  async collect(_input: CollectInput): Promise<SignResult> {
    throw new UpstreamError(WireStatus.UNAVAILABLE, 'no script');
  }
  async close(): Promise<void> {}
}

const ML_DSA_KEY_ID = '7d444840-9dc0-11d1-b245-5ffdce74fad2';
const SM2_KEY_ID = '9c4e2f10-1111-4222-8333-944455556666';

function setup() {
  const up = new ScriptedUpstream();
  const { publicKey } = ml_dsa65.keygen(new Uint8Array(32).fill(7));
  const pk = Buffer.from(publicKey);
  const key = (keyId: string, keySpec: KeySpec, publicKeyPem: string): PublicKeyInfo => ({
    keyId,
    keySpec,
    publicKeyPem,
    signingAlgorithms: [],
  });
  up.keys.set('pq', key(ML_DSA_KEY_ID, 'ML_DSA_65', mlDsaSpkiPem('ML_DSA_65', pk)));
  const sm2Point = Buffer.from(smCrypto.sm2.generateKeyPairHex().publicKey, 'hex');
  up.keys.set('gm', key(SM2_KEY_ID, 'SM2', sm2SpkiPem(sm2Point)));
  // The service names one parameter set, the key is another: not shown as either.
  up.keys.set('odd', key('odd-key', 'ML_DSA_44', mlDsaSpkiPem('ML_DSA_65', pk)));
  const tenants = ['pq', 'gm', 'odd'].map((id) => ({ tenantId: id, label: id, certificates: {} }));
  const catalog = new KeyCatalog({ upstream: up, tenants, ttlMs: 60_000, log: silentLogger() });
  const handler = new RequestHandler({ catalog, upstream: up, log: silentLogger(), sbomMaxBytes: 100 });
  const peer = { pid: process.pid, uid: 0 };
  const sign = (algorithm: string, digest: Buffer): Promise<Response> =>
    handler.handle({ type: 'SIGN', tenant: 'pq', keyId: ckaIdFor(ML_DSA_KEY_ID), algorithm, digest }, peer);
  return { up, pk, handler, sign, peer };
}

describe('LIST with ML-DSA and SM2 keys', () => {
  it('shows the ML-DSA key with its SPKI and raw key; leaves the SM2 key out and says why; refuses a mismatch', async () => {
    const { handler, pk, peer } = setup();
    const list = (await handler.handle({ type: 'LIST' }, peer)) as ListOk;
    expect(list.type).toBe('LIST_OK');
    const [pq, gm, odd] = list.tokens;
    expect(pq?.keys).toHaveLength(1);
    expect(pq?.keys[0]?.keySpec).toBe('ML_DSA_65');
    expect(pq?.keys[0]?.publicKey).toEqual(mlDsaSpkiDer('ML_DSA_65', pk));
    expect(pq?.keys[0]?.rawPublicKey).toEqual(pk);
    expect(gm?.keys).toEqual([]);
    expect(gm?.status).toBeUndefined(); // nothing failed: `signbridge status` shows a note, not an error
    expect(gm?.message).toContain(`key ${SM2_KEY_ID} (SM2) left out: SM2 has no PKCS#11 mechanism`);
    expect(odd?.keys).toEqual([]);
    expect(odd?.status).toBe(WireStatus.INTERNAL);
    expect(odd?.message).toContain('an ML_DSA_65 key where the service says ML_DSA_44');
  });
});

describe('SIGN with an ML-DSA key', () => {
  it('forwards the 64-byte mu with the key spec and returns the raw signature', async () => {
    const { up, sign } = setup();
    const mu = Buffer.alloc(64, 0x5a);
    const signature = Buffer.alloc(3309, 0x33);
    up.answer = () => ({ kind: 'signed', signature, keyId: ML_DSA_KEY_ID, algorithm: 'ML_DSA_SHAKE_256' });
    expect(await sign('ML_DSA_SHAKE_256', mu)).toEqual({ type: 'SIGN_OK', signature });
    expect(up.signed).toHaveLength(1);
    expect(up.signed[0]).toMatchObject({ tenantId: 'pq', digest: mu, keySpec: 'ML_DSA_65', pss: false });
  });

  it('refuses a signature of the wrong length, a digest that is not 64 bytes, and other algorithms', async () => {
    const { up, sign } = setup();
    up.answer = () => ({
      kind: 'signed',
      signature: Buffer.alloc(3308),
      keyId: ML_DSA_KEY_ID,
      algorithm: 'ML_DSA_SHAKE_256',
    });
    expect(await sign('ML_DSA_SHAKE_256', Buffer.alloc(64))).toMatchObject({
      type: 'ERROR',
      status: WireStatus.INTERNAL,
      message: expect.stringContaining('3308 bytes; an ML_DSA_65 signature has 3309'),
    });
    expect(await sign('ML_DSA_SHAKE_256', Buffer.alloc(32))).toMatchObject({
      type: 'ERROR',
      status: WireStatus.BAD_REQUEST,
    });
    expect(await sign('ECDSA_SHA_256', Buffer.alloc(32))).toMatchObject({
      type: 'ERROR',
      status: WireStatus.ALGORITHM_INVALID,
    });
    expect(up.signed).toHaveLength(1); // only the first reached the service
  });
});
