// What a PKCS#8 PrivateKeyInfo holds, for key import: which key spec it is (to refuse material that does not
// match the key_spec with a reason naming what it is), and the parts the software key store keeps (ML-DSA per
// RFC 9881, SM2 per GB/T 32918 on curve 1.2.156.10197.1.301, Ed25519 per RFC 8410, secp256k1 as any EC key). RSA,
// EC and Ed25519 keys are named through node:crypto.
import { createPrivateKey, createPublicKey, type KeyObject } from 'node:crypto';
import { ml_dsa44, ml_dsa65, ml_dsa87 } from '@noble/post-quantum/ml-dsa.js';
import { type KeySpec, keyInfo } from '../../crypto/algorithms.js';
import { type DerElement, DerError, readChildren, readSingle, TAG } from '../../crypto/der.js';
import { decodeObjectIdentifier } from '../../crypto/object-identifier.js';
import { parseSm2Spki } from '../../crypto/spki.js';

const OID_EC_PUBLIC_KEY = '1.2.840.10045.2.1';
const OID_SM2 = '1.2.156.10197.1.301';
const ML_DSA_BY_OID: Record<string, KeySpec> = {
  '2.16.840.1.101.3.4.3.17': 'ML_DSA_44',
  '2.16.840.1.101.3.4.3.18': 'ML_DSA_65',
  '2.16.840.1.101.3.4.3.19': 'ML_DSA_87',
};
const CURVE_SPEC: Record<string, KeySpec> = {
  prime256v1: 'ECC_NIST_P256',
  secp384r1: 'ECC_NIST_P384',
  secp521r1: 'ECC_NIST_P521',
  secp256k1: 'ECC_SECG_P256K1',
};
const ML_DSA = { ML_DSA_44: ml_dsa44, ML_DSA_65: ml_dsa65, ML_DSA_87: ml_dsa87 } as Partial<
  Record<KeySpec, typeof ml_dsa65>
>;

/** Why the material is not usable for any key spec; the message is safe to show (it names no key bytes). */
export class KeyMaterialError extends Error {}

interface PrivateKeyInfo {
  algorithm: string;
  /** The AlgorithmIdentifier's parameters, when an OID (EC curves). */
  parameter?: string;
  /** The privateKey OCTET STRING's contents, a view into the input. */
  privateKey: Buffer;
}

function privateKeyInfo(der: Buffer): PrivateKeyInfo {
  try {
    const outer = readSingle(der, TAG.SEQUENCE);
    const [version, algId, key] = readChildren(outer.content);
    if (version?.tag !== TAG.INTEGER || algId?.tag !== TAG.SEQUENCE || key?.tag !== TAG.OCTET_STRING) {
      throw new DerError('not PrivateKeyInfo');
    }
    const [oid, param] = readChildren(algId.content);
    if (oid?.tag !== TAG.OBJECT_IDENTIFIER) throw new DerError('no algorithm OID');
    return {
      algorithm: objectIdentifier(oid),
      ...(param?.tag === TAG.OBJECT_IDENTIFIER && { parameter: objectIdentifier(param) }),
      privateKey: key.content,
    };
  } catch (err) {
    if (err instanceof DerError)
      throw new KeyMaterialError(`the key material is not a PKCS#8 private key (${err.message})`);
    throw err;
  }
}

function objectIdentifier(element: DerElement): string {
  const dotted = decodeObjectIdentifier(element.content);
  if (dotted === undefined) throw new DerError('an OBJECT IDENTIFIER that is not valid DER');
  return dotted;
}

/** The key spec of PKCS#8 DER material, or a description of what it is when no key spec fits. */
export function identifyKeyMaterial(der: Buffer): { spec: KeySpec } | { other: string } {
  const info = privateKeyInfo(der);
  const mlDsa = ML_DSA_BY_OID[info.algorithm];
  if (mlDsa) return { spec: mlDsa };
  if (info.algorithm === OID_SM2 || (info.algorithm === OID_EC_PUBLIC_KEY && info.parameter === OID_SM2)) {
    return { spec: 'SM2' };
  }
  let key: KeyObject;
  try {
    key = createPrivateKey({ key: der, format: 'der', type: 'pkcs8' });
  } catch {
    return { other: `a PKCS#8 key of algorithm ${info.algorithm} that could not be read` };
  }
  const details = key.asymmetricKeyDetails ?? {};
  if (key.asymmetricKeyType === 'rsa') {
    const bits = details.modulusLength ?? 0;
    if (bits === 2048 || bits === 3072 || bits === 4096) return { spec: `RSA_${bits}` as KeySpec };
    return { other: `an RSA-${bits} key` };
  }
  if (key.asymmetricKeyType === 'ec') {
    const spec = CURVE_SPEC[details.namedCurve ?? ''];
    return spec ? { spec } : { other: `an EC key on curve ${details.namedCurve}` };
  }
  if (key.asymmetricKeyType === 'ed25519') return { spec: 'ECC_NIST_EDWARDS25519' };
  return { other: `a ${key.asymmetricKeyType ?? info.algorithm} key` };
}

/** SubjectPublicKeyInfo (DER) of an RSA or NIST EC PKCS#8 key, as Node derives it. */
export function publicKeyOf(der: Buffer): Buffer {
  const key = createPrivateKey({ key: der, format: 'der', type: 'pkcs8' });
  return createPublicKey(key).export({ type: 'spki', format: 'der' });
}

/** The private scalar of an EC PKCS#8 (ECPrivateKey.privateKey, RFC 5915), left-padded to `size` bytes. */
export function ecPrivateScalar(der: Buffer, size: number): Buffer {
  const ecPrivateKey = readSingle(privateKeyInfo(der).privateKey, TAG.SEQUENCE);
  const [, d] = readChildren(ecPrivateKey.content);
  if (d?.tag !== TAG.OCTET_STRING || d.content.length > size) throw new KeyMaterialError('malformed ECPrivateKey');
  const out = Buffer.alloc(size);
  d.content.copy(out, size - d.content.length);
  return out;
}

/**
 * What the software key store keeps: ML-DSA sk/pk (FIPS 204 encodings), SM2 and secp256k1 d and the point 04||x||y,
 * Ed25519 the 32-byte private key and A.
 */
export interface SoftwareKeyParts {
  secret: Buffer;
  publicKey: Buffer;
}

/**
 * ML-DSA private key per RFC 9881: `seed [0] IMPLICIT OCTET STRING (32)`, `expandedKey OCTET STRING`, or
 * `both SEQUENCE { seed, expandedKey }` (then the two must agree). The public key is derived.
 */
export function mlDsaKeyParts(spec: KeySpec, der: Buffer): SoftwareKeyParts {
  const alg = ML_DSA[spec];
  if (!alg) throw new Error(`${spec} is not an ML-DSA key spec`);
  const inner = privateKeyInfo(der).privateKey;
  let choice: DerElement;
  try {
    choice = readSingle(inner);
  } catch {
    throw new KeyMaterialError('malformed ML-DSA private key (RFC 9881)');
  }
  const fromSeed = (seed: Buffer) => {
    if (seed.length !== 32) throw new KeyMaterialError(`an ML-DSA seed is 32 bytes, got ${seed.length}`);
    const { secretKey, publicKey } = alg.keygen(seed);
    return { secret: Buffer.from(secretKey), publicKey: Buffer.from(publicKey) };
  };
  const fromExpanded = (sk: Buffer) => {
    if (sk.length !== alg.lengths.secretKey) {
      throw new KeyMaterialError(`an ${spec} expanded key is ${alg.lengths.secretKey} bytes, got ${sk.length}`);
    }
    return { secret: Buffer.from(sk), publicKey: Buffer.from(alg.getPublicKey(sk)) };
  };
  if (choice.tag === 0x80) return fromSeed(choice.content);
  if (choice.tag === TAG.OCTET_STRING) return fromExpanded(choice.content);
  if (choice.tag === TAG.SEQUENCE) {
    const [seed, expanded] = readChildren(choice.content);
    if (seed?.tag !== TAG.OCTET_STRING || expanded?.tag !== TAG.OCTET_STRING) {
      throw new KeyMaterialError('malformed ML-DSA "both" key');
    }
    const a = fromSeed(seed.content);
    const b = fromExpanded(expanded.content);
    b.secret.fill(0);
    if (!a.publicKey.equals(b.publicKey)) {
      a.secret.fill(0);
      throw new KeyMaterialError('the ML-DSA seed and expanded key of the material do not belong together');
    }
    return a;
  }
  throw new KeyMaterialError('malformed ML-DSA private key (RFC 9881: seed, expandedKey or both)');
}

/** SM2: the 32-byte d (zeroable) and the public point, derived by node:crypto. */
export function sm2KeyParts(der: Buffer): SoftwareKeyParts {
  const secret = ecPrivateScalar(der, 32);
  let spki: Buffer;
  try {
    spki = createPublicKey(createPrivateKey({ key: der, format: 'der', type: 'pkcs8' })).export({
      type: 'spki',
      format: 'der',
    });
  } catch {
    secret.fill(0);
    throw new KeyMaterialError('the SM2 private key could not be read');
  }
  const point = parseSm2Spki(spki);
  if (!point) {
    secret.fill(0);
    throw new KeyMaterialError('the SM2 private key has no public point on the SM2 curve');
  }
  return { secret, publicKey: point };
}

/** The parts the software key store keeps for material of `spec` (checked to be of that spec already). */
export function softwareKeyParts(spec: KeySpec, der: Buffer): SoftwareKeyParts {
  const info = keyInfo(spec);
  if (info.family === 'sm2') return sm2KeyParts(der);
  if (info.family === 'ml-dsa') return mlDsaKeyParts(spec, der);
  if (info.family === 'ed25519' || (info.family === 'ec' && info.curve === 'secp256k1')) return jwkKeyParts(der);
  throw new Error(`the software key store does not hold ${spec} keys`);
}

/** Ed25519 (d: the private key, x: A) and secp256k1 (d, and the point 04||x||y), as node:crypto reads them. */
function jwkKeyParts(der: Buffer): SoftwareKeyParts {
  const jwk = createPrivateKey({ key: der, format: 'der', type: 'pkcs8' }).export({ format: 'jwk' });
  if (!jwk.d || !jwk.x) throw new KeyMaterialError('the private key could not be read');
  const x = Buffer.from(jwk.x, 'base64url');
  if (jwk.kty === 'OKP') return { secret: Buffer.from(jwk.d, 'base64url'), publicKey: x };
  const d = Buffer.from(jwk.d, 'base64url');
  const secret = Buffer.alloc(32);
  d.copy(secret, 32 - d.length);
  d.fill(0);
  return { secret, publicKey: Buffer.concat([Buffer.from([4]), x, Buffer.from(jwk.y ?? '', 'base64url')]) };
}
