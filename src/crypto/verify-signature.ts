// Checks a signature the service returned against the key's public half before a client keeps it: ML-DSA over μ
// (equivalent to verifying the message: μ binds the key and the file; ml-dsa-verify.ts says why μ means noble), SM2 with
// sm-crypto over e = SM3(Z_A || M) (KMS's distinguishing ID is in e), both as verify-digest.ts checks them; RSA and
// ECDSA with node:crypto over the file.
import { createPublicKey, createVerify, constants as cryptoConstants } from 'node:crypto';
import { algorithmInfo, DIGEST_LENGTH, keyInfo, type SigningAlgorithm } from './algorithms.js';
import { fileChunks, type PublicKeyOf } from './file-representative.js';
import { verifyDigestSignature } from './verify-digest.js';

/**
 * True when `signature` is `key`'s signature of the file at `path`; `representative` is the `hash` that was sent
 * (μ for ML-DSA, e for SM2; RSA and EC verify over the file itself, read again in chunks).
 */
export function verifyFileSignature(
  path: string,
  key: PublicKeyOf,
  algorithm: SigningAlgorithm,
  representative: Buffer,
  signature: Buffer,
): boolean {
  const info = keyInfo(key.keySpec);
  // μ and e already bind the key and the file: checked as the digest-like input they are.
  if (info.family === 'ml-dsa' || info.family === 'sm2') {
    return verifyDigestSignature(key, algorithm, representative, signature);
  }
  const alg = algorithmInfo(algorithm);
  // Ed25519ph: `representative` is the file's SHA-512, checked as the digest it is (the file is not read again).
  if (info.family === 'ed25519') {
    return alg.padding === 'ed25519ph' && verifyDigestSignature(key, algorithm, representative, signature);
  }
  if (alg.family === 'ml-dsa' || alg.family === 'sm2' || alg.family === 'ed25519') return false;
  const verifier = createVerify(alg.hash);
  for (const chunk of fileChunks(path)) verifier.update(chunk);
  const publicKey = createPublicKey(key.publicKeyPem);
  if (alg.padding === 'pss') {
    return verifier.verify(
      { key: publicKey, padding: cryptoConstants.RSA_PKCS1_PSS_PADDING, saltLength: DIGEST_LENGTH[alg.hash] },
      signature,
    );
  }
  return verifier.verify(publicKey, signature);
}
