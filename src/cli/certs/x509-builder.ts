// PKCS#10 requests and certificates for a key that signs elsewhere (the service, reached through the daemon).
// @peculiar/x509 does the ASN.1; it signs through a WebCrypto object, so we hand it one whose `sign` hashes the
// to-be-signed bytes here and sends only the digest to the remote key (for Ed25519, whose certificate signature is
// pure Ed25519 over the TBS (RFC 8410), the TBS bytes themselves). Everything else is Node's own WebCrypto.
import 'reflect-metadata';
import { createHash, createPublicKey, X509Certificate as NodeX509Certificate, verify, webcrypto } from 'node:crypto';
import { CertificationRequest } from '@peculiar/asn1-csr';
import { AsnConvert } from '@peculiar/asn1-schema';
import * as x509 from '@peculiar/x509';
import {
  algorithmInfo,
  algorithmsForKey,
  type HashName,
  type KeySpec,
  keyInfo,
  type SigningAlgorithm,
} from '../../crypto/algorithms.js';
import { SubjectError } from '../../crypto/subject-name.js';

/** A key whose private half lives elsewhere: its spec, its public key, and a way to sign a digest with it. */
export interface RemoteKey {
  keySpec: KeySpec;
  /** SubjectPublicKeyInfo, DER. */
  spki: Buffer;
  /**
   * Signs a digest, or for ED25519_SHA_512 (pure Ed25519) the message itself. RSA: the modulus-sized signature;
   * ECDSA: fixed-width r||s (what PKCS#11 and WebCrypto return, and what the daemon answers); Ed25519: 64 bytes.
   */
  sign(algorithm: SigningAlgorithm, input: Buffer): Promise<Buffer>;
}

/** A key this builder makes no certificate for (ML-DSA, SM2), with the reason and what to do instead. */
export class UnsupportedKeyError extends Error {}

const WEB_HASH: Record<HashName, string> = { sha256: 'SHA-256', sha384: 'SHA-384', sha512: 'SHA-512' };

/**
 * The signature algorithm for a key: PKCS#1 v1.5 (or PSS) with the chosen hash (default SHA-256) for RSA; ECDSA with
 * the chosen hash for EC, by default the curve's (an EC key signs any SHA-2 digest).
 */
export function certificateAlgorithm(keySpec: KeySpec, options: { hash?: HashName; pss?: boolean } = {}) {
  const info = keyInfo(keySpec);
  // Node 20's WebCrypto (which this builder uses for the public key) has neither ML-DSA nor SM2, and no signing
  // tool installable here (OpenSSL 3.0, osslsigncode, jarsigner) can use such a certificate yet: refuse before
  // anything is signed rather than emit a certificate nothing checks.
  if (info.family === 'ml-dsa' || info.family === 'sm2') {
    throw new UnsupportedKeyError(
      `certificates for ${keySpec} keys are not supported: Node 20's WebCrypto and OpenSSL 3.0 have no ` +
        `${info.family === 'ml-dsa' ? 'ML-DSA' : 'SM2 (with SM3 and its distinguishing ID)'} to build or use one; ` +
        'sign files with `signbridge sign` and distribute the public key from get_public_key (docs/keys.md)',
    );
  }
  if (info.family === 'ed25519') {
    // RFC 8410: an Ed25519 certificate or request is signed with pure Ed25519 over the TBS bytes, no hash to choose.
    if (options.hash !== undefined || options.pss) {
      throw new SubjectError('an Ed25519 key signs with pure Ed25519 (RFC 8410): --hash and --pss do not apply');
    }
    return { algorithm: 'ED25519_SHA_512' as SigningAlgorithm, web: { name: 'Ed25519' } };
  }
  const hash = options.hash ?? (info.family === 'ec' ? info.hash : 'sha256');
  if (info.family === 'ec' && options.pss) throw new SubjectError('PSS is for RSA keys only');
  const suffix = hash.slice(3);
  const algorithm = (
    info.family === 'ec'
      ? `ECDSA_SHA_${suffix}`
      : options.pss
        ? `RSASSA_PSS_SHA_${suffix}`
        : `RSASSA_PKCS1_V1_5_SHA_${suffix}`
  ) as SigningAlgorithm;
  if (!algorithmsForKey(keySpec).includes(algorithm)) throw new SubjectError(`${keySpec} does not allow ${algorithm}`);
  const webHash = WEB_HASH[hash];
  const web =
    info.family === 'ec'
      ? { name: 'ECDSA', hash: webHash, namedCurve: info.curve }
      : options.pss
        ? { name: 'RSA-PSS', hash: webHash, saltLength: DIGEST_BYTES[hash] }
        : { name: 'RSASSA-PKCS1-v1_5', hash: webHash };
  return { algorithm, web };
}

const DIGEST_BYTES: Record<HashName, number> = { sha256: 32, sha384: 48, sha512: 64 };

/** The WebCrypto import parameters for the key's public half (only used to compute key identifiers). */
function importParams(keySpec: KeySpec) {
  const info = keyInfo(keySpec);
  if (info.family === 'ed25519') return { name: 'Ed25519' };
  return info.family === 'ec'
    ? { name: 'ECDSA', namedCurve: info.curve }
    : { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256' };
}

/** Node's WebCrypto, except that `sign` goes to the remote key with a digest computed here. */
function remoteCrypto(key: RemoteKey, algorithm: SigningAlgorithm): webcrypto.Crypto {
  const subtle = webcrypto.subtle;
  const hash = algorithmInfo(algorithm).hash;
  const signRemotely = async (
    _alg: unknown,
    _key: unknown,
    data: ArrayBuffer | ArrayBufferView,
  ): Promise<ArrayBuffer> => {
    const bytes = ArrayBuffer.isView(data)
      ? Buffer.from(data.buffer, data.byteOffset, data.byteLength)
      : Buffer.from(data as ArrayBuffer);
    // Pure Ed25519 signs the TBS bytes themselves (the daemon forwards them, as the module's CKM_EDDSA does).
    const input = hash === 'message' ? bytes : createHash(hash).update(bytes).digest();
    const signature = await key.sign(algorithm, input);
    return new Uint8Array(signature).buffer;
  };
  // A stand-in public key (spkiStandIn) exports as the SPKI it stands for.
  const exportKey = (format: string, cryptoKey: object) => {
    const spki = SPKI_OF.get(cryptoKey);
    if (spki && format === 'spki') return Promise.resolve(new Uint8Array(spki).buffer);
    return subtle.exportKey(format as 'spki', cryptoKey as webcrypto.CryptoKey);
  };
  const proxied = new Proxy(subtle, {
    get(target, prop) {
      if (prop === 'sign') return signRemotely;
      if (prop === 'exportKey') return exportKey;
      const value = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  return {
    subtle: proxied,
    getRandomValues: webcrypto.getRandomValues.bind(webcrypto),
    randomUUID: webcrypto.randomUUID.bind(webcrypto),
  } as unknown as webcrypto.Crypto;
}

export interface BuildOptions {
  subject: x509.Name;
  hash?: HashName;
  pss?: boolean;
}

/** Extensions a code-signing certificate carries: digitalSignature, codeSigning, not a CA. */
async function codeSigningExtensions(publicKey: webcrypto.CryptoKey, crypto: webcrypto.Crypto, selfSigned: boolean) {
  const extensions: x509.Extension[] = [
    new x509.BasicConstraintsExtension(false, undefined, true),
    new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
    new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.codeSigning], false),
    await x509.SubjectKeyIdentifierExtension.create(publicKey, false, crypto),
  ];
  if (selfSigned) extensions.push(await x509.AuthorityKeyIdentifierExtension.create(publicKey, false, crypto));
  return extensions;
}

async function publicCryptoKey(key: RemoteKey): Promise<webcrypto.CryptoKey> {
  if (withoutWebCrypto(key.keySpec)) return spkiStandIn(key);
  return webcrypto.subtle.importKey('spki', key.spki, importParams(key.keySpec), true, [
    'verify',
  ]) as Promise<webcrypto.CryptoKey>;
}

/**
 * secp256k1: Node's WebCrypto knows no such curve (importKey refuses it), while @peculiar/x509 does (K-256: its
 * OID, its signature's width). The library only ever needs the public key's SPKI, so it gets a stand-in public
 * CryptoKey that the remote crypto's `exportKey` answers with the SPKI as it is; signatures are checked with
 * node:crypto (OpenSSL's secp256k1) instead of WebCrypto.
 */
function withoutWebCrypto(keySpec: KeySpec): boolean {
  const info = keyInfo(keySpec);
  return info.family === 'ec' && info.curve === 'secp256k1';
}

const SPKI_OF = new WeakMap<object, Buffer>();

function spkiStandIn(key: RemoteKey): webcrypto.CryptoKey {
  const standIn = {
    type: 'public',
    extractable: true,
    usages: ['verify'],
    algorithm: { name: 'ECDSA', namedCurve: 'K-256' },
  };
  SPKI_OF.set(standIn, key.spki);
  return standIn as unknown as webcrypto.CryptoKey;
}

/** A PKCS#10 request for the remote key, asking for a code-signing certificate; its signature is checked here. */
export async function createCsr(key: RemoteKey, options: BuildOptions): Promise<x509.Pkcs10CertificateRequest> {
  const { algorithm, web } = certificateAlgorithm(key.keySpec, options);
  const crypto = remoteCrypto(key, algorithm);
  const publicKey = await publicCryptoKey(key);
  const csr = await x509.Pkcs10CertificateRequestGenerator.create(
    {
      name: options.subject,
      keys: { publicKey, privateKey: { algorithm: web, type: 'private' } as unknown as webcrypto.CryptoKey },
      signingAlgorithm: web,
      extensions: [
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
        new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.codeSigning], false),
      ],
    },
    crypto,
  );
  const verified = withoutWebCrypto(key.keySpec)
    ? verifiesWithNode(key, algorithm, AsnConvert.serialize(csrAsn(csr).certificationRequestInfo), csr.signature)
    : await csr.verify(webcrypto as unknown as webcrypto.Crypto);
  if (!verified) {
    throw new Error('the signature on the new request does not verify with the key; nothing was written');
  }
  return csr;
}

function csrAsn(csr: x509.Pkcs10CertificateRequest): CertificationRequest {
  return AsnConvert.parse(csr.rawData, CertificationRequest);
}

/** An ECDSA signature (DER, as X.509 carries it) over `tbs`, checked by node:crypto with the key's SPKI. */
function verifiesWithNode(key: RemoteKey, algorithm: SigningAlgorithm, tbs: ArrayBuffer, signature: ArrayBuffer) {
  const publicKey = createPublicKey({ key: key.spki, format: 'der', type: 'spki' });
  return verify(algorithmInfo(algorithm).hash, Buffer.from(tbs), publicKey, Buffer.from(signature));
}

export interface SelfSignedOptions extends BuildOptions {
  days: number;
  notBefore?: Date;
}

/** A self-signed code-signing certificate for the remote key; its signature is checked here. */
export async function createSelfSigned(key: RemoteKey, options: SelfSignedOptions): Promise<x509.X509Certificate> {
  if (!Number.isInteger(options.days) || options.days < 1 || options.days > 36_500) {
    throw new SubjectError(`--days must be a whole number from 1 to 36500, got ${options.days}`);
  }
  const { algorithm, web } = certificateAlgorithm(key.keySpec, options);
  const crypto = remoteCrypto(key, algorithm);
  const publicKey = await publicCryptoKey(key);
  // A minute back, so that a verifier whose clock is slightly behind does not see a certificate from the future.
  const notBefore = options.notBefore ?? new Date(Date.now() - 60_000);
  const cert = await x509.X509CertificateGenerator.create(
    {
      serialNumber: webcrypto.getRandomValues(Buffer.alloc(16)).toString('hex').replace(/^./, '4'),
      subject: options.subject,
      issuer: options.subject,
      notBefore,
      notAfter: new Date(notBefore.getTime() + options.days * 86_400_000),
      publicKey: key.spki,
      signingKey: { algorithm: web, type: 'private' } as unknown as webcrypto.CryptoKey,
      signingAlgorithm: web,
      extensions: await codeSigningExtensions(publicKey, crypto, true),
    },
    crypto,
  );
  const check = new NodeX509Certificate(Buffer.from(cert.rawData));
  if (!check.verify(check.publicKey)) {
    throw new Error('the signature on the new certificate does not verify with the key; nothing was written');
  }
  return cert;
}
