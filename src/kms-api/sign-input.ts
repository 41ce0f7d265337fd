// What KMS's Sign and Verify take (Message, MessageType, SigningAlgorithm) turned into what signbridge's key stores
// sign: the digest for RSA and ECDSA, ML-DSA's μ, SM2's e, the message itself for pure Ed25519. RAW messages (at most 4096 bytes, as KMS) are hashed
// here; DIGEST must be the algorithm's digest; EXTERNAL_MU is ML-DSA's μ itself. A request KMS would refuse is
// refused here with the ApiError whose AWS name src/api/aws/kms/errors.ts gives.

import { createHash } from 'node:crypto';
import { algorithmInfo, inputLength, type KeySpec, keyInfo, type SigningAlgorithm } from '../crypto/algorithms.js';
import { mlDsaPublicKey, type PublicKeyOf, sm2PublicPoint } from '../crypto/file-representative.js';
import { mlDsaMu, sm2Digest } from '../crypto/message-representatives.js';
import { ApiError } from '../errors.js';
import { awsSigningAlgorithms } from './key-metadata.js';

export const MESSAGE_TYPES = ['RAW', 'DIGEST', 'EXTERNAL_MU'] as const;
export type MessageType = (typeof MESSAGE_TYPES)[number];
/** KMS's limit on Message. */
export const MAX_MESSAGE_BYTES = 4096;

/** The algorithm must be one KMS lists for the key (DescribeKey's SigningAlgorithms). */
export function checkKmsAlgorithm(spec: KeySpec, algorithm: SigningAlgorithm): void {
  const allowed = awsSigningAlgorithms(spec);
  if (!allowed.includes(algorithm)) {
    throw new ApiError(
      'algorithm_key_mismatch',
      `SigningAlgorithm ${algorithm} is not valid for a ${spec} key; valid: ${allowed.join(', ')}`,
    );
  }
}

/**
 * What is signed: a digest (or ML-DSA's μ, SM2's e); or, for pure Ed25519, the message itself (the signing entry
 * point records its SHA-512 in its place: src/signing/signing-entry.ts).
 */
export type KmsSigningInput = { digest: Buffer } | { message: Buffer };

export function signingInput(
  key: PublicKeyOf,
  algorithm: SigningAlgorithm,
  messageType: MessageType,
  message: Buffer,
): KmsSigningInput {
  checkKmsAlgorithm(key.keySpec, algorithm);
  if (message.length < 1 || message.length > MAX_MESSAGE_BYTES) {
    throw new ApiError('invalid_request', `Message must be 1 to ${MAX_MESSAGE_BYTES} bytes, got ${message.length}`);
  }
  const family = keyInfo(key.keySpec).family;
  if (messageType === 'EXTERNAL_MU') {
    if (family !== 'ml-dsa') {
      throw new ApiError(
        'invalid_request',
        `MessageType EXTERNAL_MU is only for ML-DSA keys; this key is ${key.keySpec}`,
      );
    }
    return { digest: exactLength(message, algorithm, 'EXTERNAL_MU') };
  }
  if (family === 'ed25519') return ed25519Input(algorithm, messageType, message);
  if (messageType === 'DIGEST') {
    if (family === 'ml-dsa') {
      throw new ApiError('invalid_request', 'MessageType DIGEST is not valid for ML-DSA keys; use RAW or EXTERNAL_MU');
    }
    return { digest: exactLength(message, algorithm, 'DIGEST') };
  }
  if (family === 'ml-dsa') return { digest: mlDsaMu(mlDsaPublicKey(key), [message]) };
  if (family === 'sm2') return { digest: sm2Digest(sm2PublicPoint(key), [message]) };
  const info = algorithmInfo(algorithm);
  return {
    digest: createHash(info.hash === 'mu' || info.hash === 'sm3' || info.hash === 'message' ? 'sha256' : info.hash)
      .update(message)
      .digest(),
  };
}

/**
 * ECC_NIST_EDWARDS25519 as botocore's KMS model defines it (SignRequest.MessageType): ED25519_SHA_512 requires RAW
 * and signs the message itself; ED25519_PH_SHA_512 requires DIGEST, the message's 64-byte SHA-512, over which KMS
 * still applies Ed25519ph's own SHA-512 prehash (FIPS 186-5 §7.8.1), as the key store does (ed25519ph.ts).
 */
function ed25519Input(algorithm: SigningAlgorithm, messageType: MessageType, message: Buffer): KmsSigningInput {
  if (algorithm === 'ED25519_SHA_512') {
    if (messageType !== 'RAW') {
      throw new ApiError(
        'invalid_request',
        `ED25519_SHA_512 signing algorithm requires MessageType RAW (the message itself, at most ${MAX_MESSAGE_BYTES} ` +
          'bytes); to sign a digest, use ED25519_PH_SHA_512 with MessageType DIGEST',
      );
    }
    return { message };
  }
  if (messageType !== 'DIGEST') {
    throw new ApiError(
      'invalid_request',
      'ED25519_PH_SHA_512 signing algorithm requires MessageType DIGEST (the 64-byte SHA-512 of the message); to ' +
        'sign the message itself, use ED25519_SHA_512 with MessageType RAW',
    );
  }
  return { digest: exactLength(message, algorithm, 'DIGEST') };
}

function exactLength(message: Buffer, algorithm: SigningAlgorithm, type: MessageType): Buffer {
  const expected = inputLength(algorithm);
  if (message.length !== expected) {
    throw new ApiError(
      'invalid_hash',
      `Digest is invalid length for algorithm ${algorithm}: MessageType ${type} needs ${expected} bytes, got ${message.length}`,
    );
  }
  return message;
}
