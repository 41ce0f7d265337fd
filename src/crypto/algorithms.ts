// The one table of key specs and signing algorithms. Names follow AWS KMS so that a client written for
// KMS-style signing needs no translation; every other part of the service asks this module.
import { ApiError } from '../errors.js';

export const KEY_SPECS = [
  'RSA_2048',
  'RSA_3072',
  'RSA_4096',
  'ECC_NIST_P256',
  'ECC_NIST_P384',
  'ECC_NIST_P521',
  'ML_DSA_44',
  'ML_DSA_65',
  'ML_DSA_87',
  'SM2',
  'ECC_NIST_EDWARDS25519',
  'ECC_SECG_P256K1',
] as const;
export type KeySpec = (typeof KEY_SPECS)[number];

export const SIGNING_ALGORITHMS = [
  'RSASSA_PKCS1_V1_5_SHA_256',
  'RSASSA_PKCS1_V1_5_SHA_384',
  'RSASSA_PKCS1_V1_5_SHA_512',
  'RSASSA_PSS_SHA_256',
  'RSASSA_PSS_SHA_384',
  'RSASSA_PSS_SHA_512',
  'ECDSA_SHA_256',
  'ECDSA_SHA_384',
  'ECDSA_SHA_512',
  'ML_DSA_SHAKE_256',
  'SM2DSA',
  'ED25519_SHA_512',
  'ED25519_PH_SHA_512',
] as const;
export type SigningAlgorithm = (typeof SIGNING_ALGORITHMS)[number];

export type HashName = 'sha256' | 'sha384' | 'sha512';
export const DIGEST_LENGTH: Record<HashName, number> = { sha256: 32, sha384: 48, sha512: 64 };

export type KeyFamily = 'rsa' | 'ec' | 'ml-dsa' | 'sm2' | 'ed25519';
/** The ECDSA curves: NIST's three (named as in JWK and WebCrypto) and SEC 2's secp256k1 (JWK's name, RFC 8812). */
export type NamedCurve = 'P-256' | 'P-384' | 'P-521' | 'secp256k1';
/** Bytes of a coordinate on each curve, and of r and of s in a fixed-width (PKCS#11, JWS) ECDSA signature. */
export const EC_FIELD_BYTES: Record<NamedCurve, number> = { 'P-256': 32, 'P-384': 48, 'P-521': 66, secp256k1: 32 };
/** Each curve's namedCurve OBJECT IDENTIFIER (RFC 5480, SEC 2), as in CKA_EC_PARAMS and an EC SubjectPublicKeyInfo. */
export const EC_CURVE_OID: Record<NamedCurve, string> = {
  'P-256': '1.2.840.10045.3.1.7',
  'P-384': '1.3.132.0.34',
  'P-521': '1.3.132.0.35',
  secp256k1: '1.3.132.0.10',
};
/** Node's (OpenSSL's) name of each curve, as asymmetricKeyDetails.namedCurve reports it. */
export const EC_OPENSSL_CURVE: Record<NamedCurve, string> = {
  'P-256': 'prime256v1',
  'P-384': 'secp384r1',
  'P-521': 'secp521r1',
  secp256k1: 'secp256k1',
};

export interface RsaKeyInfo {
  family: 'rsa';
  bits: 2048 | 3072 | 4096;
}
export interface EcKeyInfo {
  family: 'ec';
  curve: NamedCurve;
  /** The hash KMS pairs with this curve: the default (certificates) and what a KMS-like key store accepts. */
  hash: HashName;
}
/**
 * ML-DSA (FIPS 204). As with KMS's MessageType EXTERNAL_MU, the `hash` a caller sends is the 64-byte μ
 * = SHAKE256(SHAKE256(pk, 64) || 0x00 || 0x00 || M, 64) (empty context); the signature is pure ML-DSA.
 */
export interface MlDsaKeyInfo {
  family: 'ml-dsa';
  level: 44 | 65 | 87;
  signatureBytes: number;
}
/** SM2 signing (GB/T 32918) as KMS does it: `hash` is e = SM3(Z_A || M) with the distinguishing ID 1234567812345678. */
export interface Sm2KeyInfo {
  family: 'sm2';
}
/**
 * Ed25519 (RFC 8032) as KMS signs it: ED25519_SHA_512 is pure Ed25519 over the message itself (KMS MessageType RAW),
 * ED25519_PH_SHA_512 is Ed25519ph (phflag 1, empty context) whose input is the 64-byte SHA-512 digest of the
 * message (KMS MessageType DIGEST). The two give different signatures for the same message.
 */
export interface Ed25519KeyInfo {
  family: 'ed25519';
}
export type KeyInfo = RsaKeyInfo | EcKeyInfo | MlDsaKeyInfo | Sm2KeyInfo | Ed25519KeyInfo;

/** The distinguishing ID KMS uses for SM2 (GM/T 0009-2012's default); callers cannot choose another. */
export const SM2_DISTINGUISHING_ID = '1234567812345678';
/** Length of the digest-like input (μ) an ML-DSA signature takes. */
export const ML_DSA_MU_BYTES = 64;

const KEY_INFO: Record<KeySpec, KeyInfo> = {
  RSA_2048: { family: 'rsa', bits: 2048 },
  RSA_3072: { family: 'rsa', bits: 3072 },
  RSA_4096: { family: 'rsa', bits: 4096 },
  ECC_NIST_P256: { family: 'ec', curve: 'P-256', hash: 'sha256' },
  ECC_NIST_P384: { family: 'ec', curve: 'P-384', hash: 'sha384' },
  ECC_NIST_P521: { family: 'ec', curve: 'P-521', hash: 'sha512' },
  ML_DSA_44: { family: 'ml-dsa', level: 44, signatureBytes: 2420 },
  ML_DSA_65: { family: 'ml-dsa', level: 65, signatureBytes: 3309 },
  ML_DSA_87: { family: 'ml-dsa', level: 87, signatureBytes: 4627 },
  SM2: { family: 'sm2' },
  ECC_NIST_EDWARDS25519: { family: 'ed25519' },
  // KMS pairs secp256k1 with ECDSA_SHA_256 only; here it takes any SHA-2 digest, as the NIST curves do.
  ECC_SECG_P256K1: { family: 'ec', curve: 'secp256k1', hash: 'sha256' },
};

export function keyInfo(spec: KeySpec): KeyInfo {
  const info = KEY_INFO[spec];
  if (!info) throw new ApiError('unsupported_key_spec', `key_spec ${spec} is not a key spec`);
  return info;
}

/** RSA and ECDSA sign a SHA-2 digest. */
export interface DigestAlgorithmInfo {
  family: 'rsa' | 'ec';
  padding: 'pkcs1' | 'pss' | 'ecdsa';
  hash: HashName;
}
/** ML-DSA signs the 64-byte μ (`mu`), SM2 the 32-byte e = SM3(Z_A || M) (`sm3`). */
export interface OtherAlgorithmInfo {
  family: 'ml-dsa' | 'sm2';
  padding: 'ml-dsa' | 'sm2';
  hash: 'mu' | 'sm3';
}
/**
 * Ed25519 signs the message itself (`message`: pure, the doors that carry the message) or, as Ed25519ph, its
 * 64-byte SHA-512 digest (`sha512`: the hash doors).
 */
export interface Ed25519AlgorithmInfo {
  family: 'ed25519';
  padding: 'ed25519' | 'ed25519ph';
  hash: 'message' | 'sha512';
}
export type AlgorithmInfo = DigestAlgorithmInfo | OtherAlgorithmInfo | Ed25519AlgorithmInfo;

const ALGORITHM_INFO: Record<SigningAlgorithm, AlgorithmInfo> = {
  RSASSA_PKCS1_V1_5_SHA_256: { family: 'rsa', padding: 'pkcs1', hash: 'sha256' },
  RSASSA_PKCS1_V1_5_SHA_384: { family: 'rsa', padding: 'pkcs1', hash: 'sha384' },
  RSASSA_PKCS1_V1_5_SHA_512: { family: 'rsa', padding: 'pkcs1', hash: 'sha512' },
  RSASSA_PSS_SHA_256: { family: 'rsa', padding: 'pss', hash: 'sha256' },
  RSASSA_PSS_SHA_384: { family: 'rsa', padding: 'pss', hash: 'sha384' },
  RSASSA_PSS_SHA_512: { family: 'rsa', padding: 'pss', hash: 'sha512' },
  ECDSA_SHA_256: { family: 'ec', padding: 'ecdsa', hash: 'sha256' },
  ECDSA_SHA_384: { family: 'ec', padding: 'ecdsa', hash: 'sha384' },
  ECDSA_SHA_512: { family: 'ec', padding: 'ecdsa', hash: 'sha512' },
  ML_DSA_SHAKE_256: { family: 'ml-dsa', padding: 'ml-dsa', hash: 'mu' },
  SM2DSA: { family: 'sm2', padding: 'sm2', hash: 'sm3' },
  ED25519_SHA_512: { family: 'ed25519', padding: 'ed25519', hash: 'message' },
  ED25519_PH_SHA_512: { family: 'ed25519', padding: 'ed25519ph', hash: 'sha512' },
};

/** The most bytes of message a pure Ed25519 signature takes where a door carries the message (KMS RAW's bound). */
export const ED25519_MAX_MESSAGE_BYTES = 4096;

/**
 * Bytes of the `hash` field each algorithm signs. Pure Ed25519 has none (it signs the message, of any length up to
 * ED25519_MAX_MESSAGE_BYTES): asked for it, this refuses as checkSigningRequest does.
 */
export function inputLength(algorithm: SigningAlgorithm): number {
  const info = ALGORITHM_INFO[algorithm];
  if (info.hash === 'message') throw pureEd25519WithoutMessage(algorithm);
  if (info.hash === 'mu') return ML_DSA_MU_BYTES;
  if (info.hash === 'sm3') return 32;
  return DIGEST_LENGTH[info.hash];
}

export function algorithmInfo(algorithm: SigningAlgorithm): AlgorithmInfo {
  return ALGORITHM_INFO[algorithm];
}

/**
 * The algorithms a key accepts: RSA keys any RSA scheme, EC keys ECDSA with any SHA-2 digest. KMS allows an EC key
 * only its curve's hash; signbridge deliberately allows all three, as a plain HSM does, because TLS 1.2 stacks hand
 * a P-384 or P-521 key a SHA-256 digest by default (docs/api.md). ecdsaInputForCurve() serves key stores that
 * accept only the curve's digest length.
 */
export function algorithmsForKey(spec: KeySpec): SigningAlgorithm[] {
  const info = keyInfo(spec);
  return SIGNING_ALGORITHMS.filter((alg) => ALGORITHM_INFO[alg].family === info.family);
}

/**
 * The algorithms of the key that sign a hash, i.e. all of algorithmsForKey but pure Ed25519, which signs the message:
 * what the hash doors (the JSON API's `sign`) can accept for the key.
 */
export function hashAlgorithmsForKey(spec: KeySpec): SigningAlgorithm[] {
  return algorithmsForKey(spec).filter((alg) => ALGORITHM_INFO[alg].hash !== 'message');
}

/** The algorithm a `sign` without `algorithm` uses: the contract's default for RSA, the only one for the others. */
export function defaultAlgorithm(spec: KeySpec): SigningAlgorithm {
  const info = keyInfo(spec);
  if (info.family === 'ec') return `ECDSA_SHA_${info.hash.slice(3)}` as SigningAlgorithm;
  if (info.family === 'ml-dsa') return 'ML_DSA_SHAKE_256';
  if (info.family === 'sm2') return 'SM2DSA';
  // The hash doors' only choice: pure Ed25519 needs the message, which they do not carry.
  if (info.family === 'ed25519') return 'ED25519_PH_SHA_512';
  return 'RSASSA_PKCS1_V1_5_SHA_256';
}

/** Checks that `algorithm` fits the key and the digest; throws the precise 400 otherwise. */
export function checkSigningRequest(spec: KeySpec, algorithm: SigningAlgorithm, digest: Buffer): void {
  if (!algorithmsForKey(spec).includes(algorithm)) {
    throw new ApiError(
      'algorithm_key_mismatch',
      `algorithm ${algorithm} cannot be used with a ${spec} key; allowed: ${hashAlgorithmsForKey(spec).join(', ')}`,
    );
  }
  const expected = inputLength(algorithm);
  if (digest.length !== expected) {
    throw new ApiError('invalid_hash', `hash must be ${describeInput(algorithm)}, got ${digest.length} bytes`);
  }
}

/** The 400 for pure Ed25519 asked for where only a hash is carried. */
function pureEd25519WithoutMessage(algorithm: SigningAlgorithm): ApiError {
  return new ApiError(
    'invalid_request',
    `${algorithm} is pure Ed25519 and signs the message itself, which this request does not carry (it has a hash ` +
      'only); sign the SHA-512 digest of the message with ED25519_PH_SHA_512 instead, or send the message where the ' +
      'door takes one (AWS KMS MessageType RAW, Vault transit)',
  );
}

function describeInput(algorithm: SigningAlgorithm): string {
  const { hash } = ALGORITHM_INFO[algorithm];
  if (hash === 'mu') return `the 64-byte ML-DSA message representative mu (FIPS 204, external mu) for ${algorithm}`;
  if (hash === 'sm3') return `the 32-byte SM3(Z_A || M) with ID ${SM2_DISTINGUISHING_ID} for ${algorithm}`;
  if (hash === 'message') return `the message itself for ${algorithm}`;
  if (algorithm === 'ED25519_PH_SHA_512') {
    return `the 64-byte SHA-512 digest of the message for ${algorithm} (Ed25519ph, as KMS's MessageType DIGEST)`;
  }
  return `a ${DIGEST_LENGTH[hash]}-byte digest for ${algorithm}`;
}

/**
 * pkcs11_sign picks the algorithm itself, by digest length (SHA-256/384/512), for RSA keys also by pss_padding.
 * The PKCS#11 module hands over a bare digest, so this is all it knows.
 */
export function algorithmForPkcs11(spec: KeySpec, digest: Buffer, pss: boolean): SigningAlgorithm {
  const info = keyInfo(spec);
  if (info.family === 'ed25519') {
    // The module's CKM_EDDSA forwards the message, not a digest: that is the wire protocol's own path.
    throw new ApiError(
      'unsupported_key_spec',
      `pkcs11_sign takes a digest, and a ${spec} key signs with CKM_EDDSA over the message; use sign with ` +
        'ED25519_PH_SHA_512 and the SHA-512 digest instead',
    );
  }
  if (info.family === 'ml-dsa' || info.family === 'sm2') {
    const algorithm = defaultAlgorithm(spec);
    if (pss) throw new ApiError('invalid_request', `pss_padding applies only to RSA keys; this key is ${spec}`);
    checkSigningRequest(spec, algorithm, digest);
    return algorithm;
  }
  if (info.family === 'ec' && pss) {
    throw new ApiError('invalid_request', `pss_padding applies only to RSA keys; this key is ${spec}`);
  }
  const hash = (Object.keys(DIGEST_LENGTH) as HashName[]).find((h) => DIGEST_LENGTH[h] === digest.length);
  if (!hash) {
    throw new ApiError(
      'invalid_hash',
      `hash must be a 32, 48 or 64-byte digest (SHA-256/384/512) for ${info.family === 'ec' ? 'an EC' : 'an RSA'} ` +
        `key, got ${digest.length} bytes`,
    );
  }
  const bits = hash.slice(3);
  if (info.family === 'ec') return `ECDSA_SHA_${bits}` as SigningAlgorithm;
  return (pss ? `RSASSA_PSS_SHA_${bits}` : `RSASSA_PKCS1_V1_5_SHA_${bits}`) as SigningAlgorithm;
}
