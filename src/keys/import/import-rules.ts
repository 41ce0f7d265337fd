// AWS KMS's rules on which wrapping algorithm fits which key material (NOTES-NEXT-FEATURES §1.2), checked before
// any key store is touched: a refusal changes nothing.
import { type KeySpec, keyInfo } from '../../crypto/algorithms.js';
import { ApiError } from '../../errors.js';
import type { WrappingAlgorithm, WrappingKeySpec } from '../key-store.js';

export function isKeyWrap(algorithm: WrappingAlgorithm): boolean {
  return algorithm === 'RSA_AES_KEY_WRAP_SHA_1' || algorithm === 'RSA_AES_KEY_WRAP_SHA_256';
}

/** The OAEP hash of a wrapping algorithm (for the RSA block; the AES key wrap has none). */
export function oaepHashOf(algorithm: WrappingAlgorithm): 'sha1' | 'sha256' {
  return algorithm.endsWith('SHA_1') ? 'sha1' : 'sha256';
}

/** Throws wrapping_algorithm_not_allowed when AWS KMS would refuse this combination. */
export function checkWrapping(spec: KeySpec, algorithm: WrappingAlgorithm, wrappingKeySpec: WrappingKeySpec): void {
  const info = keyInfo(spec);
  if (info.family === 'rsa' && !isKeyWrap(algorithm)) {
    throw new ApiError(
      'wrapping_algorithm_not_allowed',
      `RSA private keys do not fit in one RSA-OAEP block: import ${spec} material with RSA_AES_KEY_WRAP_SHA_256 ` +
        `or RSA_AES_KEY_WRAP_SHA_1, not ${algorithm}`,
    );
  }
  if (spec === 'ECC_NIST_P521' && !isKeyWrap(algorithm) && wrappingKeySpec === 'RSA_2048') {
    throw new ApiError(
      'wrapping_algorithm_not_allowed',
      `ECC_NIST_P521 material (241 bytes of PKCS#8) does not fit one ${algorithm} block under an RSA_2048 ` +
        'wrapping key: use RSA_3072 or RSA_4096, or an RSA_AES_KEY_WRAP algorithm',
    );
  }
}
