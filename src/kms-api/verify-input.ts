// Verify at the KMS-compatible doors (KMS Verify, Vault transit verify): a digest-like input is checked as
// verify-digest.ts checks it; pure Ed25519's message with node:crypto, which verifies Ed25519 over the message.

import { createPublicKey, verify } from 'node:crypto';
import type { SigningAlgorithm } from '../crypto/algorithms.js';
import type { PublicKeyOf } from '../crypto/file-representative.js';
import { type DigestVerifyOptions, verifyDigestSignature } from '../crypto/verify-digest.js';
import type { KmsSigningInput } from './sign-input.js';

export function verifySigningInput(
  key: PublicKeyOf,
  algorithm: SigningAlgorithm,
  input: KmsSigningInput,
  signature: Buffer,
  options: DigestVerifyOptions = {},
): boolean {
  if ('digest' in input) return verifyDigestSignature(key, algorithm, input.digest, signature, options);
  if (algorithm !== 'ED25519_SHA_512' || key.keySpec !== 'ECC_NIST_EDWARDS25519') return false;
  try {
    return verify(null, input.message, createPublicKey(key.publicKeyPem), signature);
  } catch {
    return false; // not a 64-byte signature at all
  }
}
