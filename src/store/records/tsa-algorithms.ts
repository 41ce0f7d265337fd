// The signatures a TSA key makes, as the store keeps them (the algorithms themselves: src/tsa/tsa-algorithms.ts).
import type { SigningAlgorithm } from '../../crypto/algorithms.js';

/** The signatures a TSA key makes here: PKCS#1 v1.5 for RSA, ECDSA for EC, each with a SHA-2 digest. */
export const TSA_SIGNING_ALGORITHMS = [
  'RSASSA_PKCS1_V1_5_SHA_256',
  'RSASSA_PKCS1_V1_5_SHA_384',
  'RSASSA_PKCS1_V1_5_SHA_512',
  'ECDSA_SHA_256',
  'ECDSA_SHA_384',
  'ECDSA_SHA_512',
] as const satisfies readonly SigningAlgorithm[];
export type TsaSigningAlgorithm = (typeof TSA_SIGNING_ALGORITHMS)[number];
