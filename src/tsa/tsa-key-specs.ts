// The key specs a TSA key may have: only those whose time-stamp tokens the RFC 3161 clients verify (tried with
// OpenSSL 3.0's `ts -verify`, the reference client the CA/B code-signing tools share; docs/tsa.md#key-specs).
import type { KeySpec } from '../crypto/algorithms.js';
import type { TsaSigningAlgorithm } from './tsa-algorithms.js';

/** The key specs a TSA key may have, and the signature each makes (the one that also signs its certificate). */
export const TSA_KEY_SPECS: Readonly<Partial<Record<KeySpec, TsaSigningAlgorithm>>> = {
  RSA_2048: 'RSASSA_PKCS1_V1_5_SHA_256',
  RSA_3072: 'RSASSA_PKCS1_V1_5_SHA_256',
  RSA_4096: 'RSASSA_PKCS1_V1_5_SHA_256',
  ECC_NIST_P256: 'ECDSA_SHA_256',
  ECC_NIST_P384: 'ECDSA_SHA_384',
  // ECDSA in CMS as on the NIST curves (RFC 5753); `openssl ts -verify` checks it (test/api/tsa-key-specs.test.ts).
  ECC_SECG_P256K1: 'ECDSA_SHA_256',
};

/** CA/B Code Signing BRs §6.1.5: RSA keys of TSAs have at least 3072 bits since 2021. */
export const DEFAULT_TSA_KEY_SPEC: KeySpec = 'RSA_3072';

/** Key specs a TSA refuses although the service signs with them, and why (what a caller is told). */
const REFUSED: Readonly<Partial<Record<KeySpec, string>>> = {
  ECC_NIST_EDWARDS25519:
    "an Ed25519 time-stamp token (RFC 8419 in CMS) does not verify with OpenSSL 3.0's `ts -verify`, which checks " +
    'tokens as PKCS#7 and has no Ed25519 there ("operation not supported for this keytype"); clients would ' +
    'reject every token. Use ECC_NIST_P256 or RSA_3072',
};

/** The signature a TSA key of this spec makes, or the refusal: why not, and which specs it may have. */
export function tsaAlgorithmFor(keySpec: string): TsaSigningAlgorithm | { refused: string } {
  const algorithm = TSA_KEY_SPECS[keySpec as KeySpec];
  if (algorithm) return algorithm;
  const why = REFUSED[keySpec as KeySpec];
  const allowed = `a TSA key spec is one of ${Object.keys(TSA_KEY_SPECS).join(', ')}`;
  return { refused: why ? `${keySpec} cannot be a TSA key: ${why} (${allowed})` : `${allowed}, got ${keySpec}` };
}
