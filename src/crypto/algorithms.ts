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
] as const;
export type SigningAlgorithm = (typeof SIGNING_ALGORITHMS)[number];

export type HashName = 'sha256' | 'sha384' | 'sha512';
export const DIGEST_LENGTH: Record<HashName, number> = { sha256: 32, sha384: 48, sha512: 64 };

export type KeyFamily = 'rsa' | 'ec';
export type NamedCurve = 'P-256' | 'P-384' | 'P-521';

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
export type KeyInfo = RsaKeyInfo | EcKeyInfo;

/** Key specs a key store can hold today. ML-DSA and SM2 are in the contract but have no backend yet. */
const KEY_INFO: Partial<Record<KeySpec, KeyInfo>> = {
  RSA_2048: { family: 'rsa', bits: 2048 },
  RSA_3072: { family: 'rsa', bits: 3072 },
  RSA_4096: { family: 'rsa', bits: 4096 },
  ECC_NIST_P256: { family: 'ec', curve: 'P-256', hash: 'sha256' },
  ECC_NIST_P384: { family: 'ec', curve: 'P-384', hash: 'sha384' },
  ECC_NIST_P521: { family: 'ec', curve: 'P-521', hash: 'sha512' },
};

export function keyInfo(spec: KeySpec): KeyInfo {
  const info = KEY_INFO[spec];
  if (!info) {
    throw new ApiError('unsupported_key_spec', `key_spec ${spec} is not supported by this key store`);
  }
  return info;
}

export interface AlgorithmInfo {
  family: KeyFamily;
  padding: 'pkcs1' | 'pss' | 'ecdsa';
  hash: HashName;
}

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
};

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

/** Checks that `algorithm` fits the key and the digest; throws the precise 400 otherwise. */
export function checkSigningRequest(spec: KeySpec, algorithm: SigningAlgorithm, digest: Buffer): void {
  const allowed = algorithmsForKey(spec);
  if (!allowed.includes(algorithm)) {
    throw new ApiError(
      'algorithm_key_mismatch',
      `algorithm ${algorithm} cannot be used with a ${spec} key; allowed: ${allowed.join(', ')}`,
    );
  }
  const expected = DIGEST_LENGTH[ALGORITHM_INFO[algorithm].hash];
  if (digest.length !== expected) {
    throw new ApiError(
      'invalid_hash',
      `hash must be a ${expected}-byte digest for ${algorithm}, got ${digest.length} bytes`,
    );
  }
}

/**
 * pkcs11_sign picks the algorithm itself, by digest length (SHA-256/384/512), for RSA keys also by pss_padding.
 * The PKCS#11 module hands over a bare digest, so this is all it knows.
 */
export function algorithmForPkcs11(spec: KeySpec, digest: Buffer, pss: boolean): SigningAlgorithm {
  const info = keyInfo(spec);
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
