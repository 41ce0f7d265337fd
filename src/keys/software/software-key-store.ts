// The key store for key specs the HSM cannot hold (SoftHSM 2.6.1 has neither ML-DSA nor SM2): the arithmetic is
// done here by well-kept libraries (ML-DSA: Node 24's OpenSSL through ml-dsa-addon.ts, else @noble/post-quantum;
// sm-crypto for SM2 with KMS's distinguishing ID), while the private keys exist only sealed under an AES key that
// never leaves the token (Sealer). The sealed blob is the key reference itself, so nothing else needs storing; it is
// opened for one signature and dropped.
// Ed25519 lives here too: SoftHSM 2.6.1 signs pure Ed25519 only, and the hash doors need Ed25519ph over a SHA-512
// digest (docs/keys.md). So does secp256k1 when no PKCS#11 token is configured before this store.
// Signatures run on worker threads (software-sign-pool.ts): the key is unsealed here, where the token session is,
// and its secret moved to the thread, which zeroes it after use. Unsealing on the thread would need a PKCS#11
// session and login per thread, and would tie this store to a PKCS#11 sealer; the Sealer interface stays abstract.
import { createPublicKey, randomBytes } from 'node:crypto';
import { availableParallelism } from 'node:os';
import { ed25519 } from '@noble/curves/ed25519.js';
import { secp256k1 } from '@noble/curves/secp256k1.js';
import { ml_dsa44, ml_dsa65, ml_dsa87 } from '@noble/post-quantum/ml-dsa.js';
import smCrypto from 'sm-crypto';
import {
  algorithmInfo,
  type KeySpec,
  keyInfo,
  type MlDsaKeyInfo,
  type SigningAlgorithm,
} from '../../crypto/algorithms.js';
import { ed25519PublicKey, signEd25519phDigest } from '../../crypto/ed25519ph.js';
import { ecPointSpkiPem, mlDsaSpkiPem, sm2SpkiPem } from '../../crypto/spki.js';
import { ApiError } from '../../errors.js';
import type { CreatedKey, KeyStore, KeyStoreOutage } from '../key-store.js';
import type { Sealer } from '../sealer.js';
import { loadMlDsaAddon, type MlDsaAddonLoad, mlDsaFallbackNote } from './ml-dsa-addon.js';
import { SoftwareSignPool } from './software-sign-pool.js';

const KEY_REF_PREFIX = 'software:v1:';

const ML_DSA = { 44: ml_dsa44, 65: ml_dsa65, 87: ml_dsa87 } as const;

/** What a sealed key holds: the private key and, to check an import, its public half. */
interface SoftwareKey {
  /**
   * ML-DSA: the expanded secret key (FIPS 204 skEncode); SM2 and secp256k1: the 32-byte private scalar d;
   * Ed25519: the 32-byte private key (RFC 8032's seed).
   */
  secret: Buffer;
  /** ML-DSA: pk (FIPS 204 pkEncode); SM2 and secp256k1: the uncompressed point 04||x||y; Ed25519: the 32-byte A. */
  publicKey: Buffer;
}

export interface SoftwareKeyStoreOptions {
  /**
   * Worker threads that sign (default: one per core, at most 4); 0 signs on the event loop, which then stalls
   * ~10 ms per ML-DSA or SM2 signature. Started at the first signature.
   */
  signThreads?: number;
  /**
   * The native ML-DSA signer's path (default: where src/keys/native/ml-dsa/build.sh puts it); false signs with noble.
   * Loaded at the first signature; where it cannot load, noble signs and `note` says why, once.
   */
  mlDsaAddonPath?: string | false;
  /** Where that one line goes (default: stderr). */
  note?: (line: string) => void;
}

export class SoftwareKeyStore implements KeyStore {
  readonly kind = 'software' as const;
  readonly description: string;
  private readonly signThreads: number;
  private pool: SoftwareSignPool | undefined;
  private closed = false;
  private mlDsa: MlDsaAddonLoad | undefined;

  constructor(
    private readonly sealer: Sealer,
    sealerDescription: string,
    private readonly options: SoftwareKeyStoreOptions = {},
  ) {
    this.description = `software (sealed by ${sealerDescription})`;
    this.signThreads = options.signThreads ?? Math.min(4, availableParallelism());
  }

  /** Which ML-DSA signer: the native one, or noble and why (said once). */
  get mlDsaSigner(): MlDsaAddonLoad {
    if (this.mlDsa) return this.mlDsa;
    const path = this.options.mlDsaAddonPath;
    this.mlDsa = path === false ? { reason: 'turned off (mlDsaAddonPath: false)' } : loadMlDsaAddon(path);
    const note = mlDsaFallbackNote(this.mlDsa);
    if (note && path !== false) {
      (this.options.note ?? ((line) => process.stderr.write(`signbridge: ${line}\n`)))(note);
    }
    return this.mlDsa;
  }

  /**
   * The sealer's outage: without the token no key opens. It is the token's outage, recorded once by the token's
   * own key store; refusals here carry it (the unseal's error) and are counted in it.
   */
  get outage(): KeyStoreOutage | undefined {
    return this.sealer.outage;
  }

  supports(spec: KeySpec): boolean {
    const info = keyInfo(spec);
    return (
      info.family === 'ml-dsa' ||
      info.family === 'sm2' ||
      info.family === 'ed25519' ||
      (info.family === 'ec' && info.curve === 'secp256k1')
    );
  }

  async createKey(spec: KeySpec, _label: string): Promise<CreatedKey> {
    const info = keyInfo(spec);
    if (info.family === 'ml-dsa') {
      const { secretKey, publicKey } = ML_DSA[info.level].keygen(randomBytes(32));
      return this.keep(spec, { secret: Buffer.from(secretKey), publicKey: Buffer.from(publicKey) });
    }
    if (info.family === 'sm2') {
      const pair = smCrypto.sm2.generateKeyPairHex();
      return this.keep(spec, {
        secret: Buffer.from(pair.privateKey.padStart(64, '0'), 'hex'),
        publicKey: Buffer.from(pair.publicKey, 'hex'),
      });
    }
    if (info.family === 'ed25519') {
      const seed = randomBytes(32);
      return this.keep(spec, { secret: seed, publicKey: ed25519PublicKey(seed) });
    }
    if (info.family === 'ec' && info.curve === 'secp256k1') {
      const d = Buffer.from(secp256k1.utils.randomSecretKey());
      return this.keep(spec, { secret: d, publicKey: Buffer.from(secp256k1.getPublicKey(d, false)) });
    }
    throw new ApiError('unsupported_key_spec', `key_spec ${spec} is not held by the software key store`);
  }

  /** Seals a private key that came from elsewhere (key import); the caller has checked it matches `spec`. */
  importKey(spec: KeySpec, key: SoftwareKey): Promise<CreatedKey> {
    return this.keep(spec, key);
  }

  async sign(keyRef: string, spec: KeySpec, algorithm: SigningAlgorithm, digest: Buffer): Promise<Buffer> {
    const info = keyInfo(spec);
    const alg = algorithmInfo(algorithm);
    const fits =
      (info.family === 'ml-dsa' && algorithm === 'ML_DSA_SHAKE_256') ||
      (info.family === 'sm2' && algorithm === 'SM2DSA') ||
      (info.family === 'ed25519' && alg.family === 'ed25519') ||
      (info.family === 'ec' && info.curve === 'secp256k1' && alg.family === 'ec');
    if (!fits) throw new Error(`the software key store cannot sign ${algorithm} with a ${spec} key`);
    if (this.closed) throw new ApiError('key_store_unavailable', 'the key store is shutting down');
    const key = await this.open(keyRef, spec);
    if (this.closed) {
      key.secret.fill(0); // closed while the key was being unsealed: start no new threads
      throw new ApiError('key_store_unavailable', 'the key store is shutting down');
    }
    if (info.family === 'ed25519' || info.family === 'ec') {
      // Well under a millisecond each: signed here, where a thread's message passing would cost more than it saves.
      try {
        return signCurve(algorithm, key.secret, digest);
      } finally {
        key.secret.fill(0);
      }
    }
    if (this.signThreads > 0) {
      this.pool ??= new SoftwareSignPool(this.signThreads, this.mlDsaSigner.path);
      // The secret's ArrayBuffer moves to the thread (this view is emptied), which zeroes it after signing.
      return this.pool.sign({
        family: info.family as 'ml-dsa' | 'sm2',
        ...(info.family === 'ml-dsa' && { level: info.level }),
        secret: key.secret.buffer as ArrayBuffer,
        input: digest,
      });
    }
    try {
      if (info.family === 'ml-dsa') return this.signMu(info, key.secret, digest);
      // e = SM3(Z_A || M) as the caller computed it (KMS MessageType DIGEST); hash:false signs e as given.
      const der = smCrypto.sm2.doSignature(Array.from(digest), key.secret.toString('hex'), {
        hash: false,
        der: true,
      });
      return Buffer.from(der, 'hex');
    } finally {
      key.secret.fill(0);
    }
  }

  /** Pure ML-DSA over an externally computed μ (KMS EXTERNAL_MU): the same signature a RAW message would get. */
  private signMu(info: MlDsaKeyInfo, secretKey: Buffer, mu: Buffer): Buffer {
    const native = this.mlDsaSigner.addon;
    if (native) return native.signMu(info.level, secretKey, mu);
    return Buffer.from(ML_DSA[info.level].internal.sign(mu, secretKey, { externalMu: true }));
  }

  /** Signatures under way on the signing threads (busy-poll.ts yields to them). */
  threadsBusy(): number {
    return this.pool?.inFlight ?? 0;
  }

  /** The key lives only in its reference; the row that held it is gone with the tenant or key version. */
  async destroyKey(_keyRef: string): Promise<void> {}

  /** Ready when the sealer is: a seal and unseal round trip. */
  async ping(): Promise<void> {
    const probe = Buffer.from('ping');
    const back = await this.sealer.unseal(await this.sealer.seal(probe, AAD_PING), AAD_PING);
    if (!back.equals(probe)) throw new Error('the sealing key did not round-trip');
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.pool?.close();
  }

  private async keep(spec: KeySpec, key: SoftwareKey): Promise<CreatedKey> {
    const plain = encodeKey(key);
    try {
      const sealed = await this.sealer.seal(plain, aadFor(spec));
      const publicKeyPem = publicKeyPemOf(spec, key.publicKey);
      return { keyRef: KEY_REF_PREFIX + sealed.toString('base64url'), publicKeyPem };
    } finally {
      plain.fill(0);
      key.secret.fill(0);
    }
  }

  private async open(keyRef: string, spec: KeySpec): Promise<SoftwareKey> {
    if (!keyRef.startsWith(KEY_REF_PREFIX)) throw new Error('not a software key store reference');
    const sealed = Buffer.from(keyRef.slice(KEY_REF_PREFIX.length), 'base64url');
    return decodeKey(await this.sealer.unseal(sealed, aadFor(spec)));
  }
}

/**
 * Ed25519ph over the SHA-512 digest, pure Ed25519 over the message itself (for the doors that carry one), or ECDSA
 * on secp256k1 over the digest as given (no hashing here), DER with low S as blockchain verifiers require.
 */
function signCurve(algorithm: SigningAlgorithm, secret: Buffer, input: Buffer): Buffer {
  const alg = algorithmInfo(algorithm);
  if (alg.family === 'ed25519') {
    return alg.padding === 'ed25519ph' ? signEd25519phDigest(secret, input) : Buffer.from(ed25519.sign(input, secret));
  }
  return Buffer.from(secp256k1.sign(input, secret, { prehash: false, lowS: true, format: 'der' }));
}

function publicKeyPemOf(spec: KeySpec, publicKey: Buffer): string {
  const info = keyInfo(spec);
  if (info.family === 'sm2') return sm2SpkiPem(publicKey);
  if (info.family === 'ec') return ecPointSpkiPem(info.curve, publicKey);
  if (info.family === 'ed25519') {
    return createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: publicKey.toString('base64url') }, format: 'jwk' })
      .export({ type: 'spki', format: 'pem' })
      .toString();
  }
  return mlDsaSpkiPem(spec, publicKey);
}

const AAD_PING = Buffer.from('signbridge software key store ping');

/** Binds a sealed key to its spec: a blob pasted into a key of another spec does not open. */
function aadFor(spec: KeySpec): Buffer {
  return Buffer.from(`signbridge software key ${spec}`);
}

/** u16 length || secret || public key. */
function encodeKey(key: SoftwareKey): Buffer {
  const len = Buffer.alloc(2);
  len.writeUInt16BE(key.secret.length);
  return Buffer.concat([len, key.secret, key.publicKey]);
}

function decodeKey(plain: Buffer): SoftwareKey {
  const len = plain.readUInt16BE(0);
  // An ArrayBuffer of its own (never a slice of Node's shared pool), so it can be moved to a signing thread.
  const secret = Buffer.from(new ArrayBuffer(len));
  plain.copy(secret, 0, 2, 2 + len);
  const publicKey = Buffer.from(plain.subarray(2 + len));
  plain.fill(0);
  return { secret, publicKey };
}
