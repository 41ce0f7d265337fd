// What KMS's Sign and Verify take (Message, MessageType, SigningAlgorithm) turned into what signbridge's key stores
// sign: the digest for RSA and ECDSA, ML-DSA's μ, SM2's e. RAW messages (at most 4096 bytes, as KMS) are hashed
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

export function signingInput(
  key: PublicKeyOf,
  algorithm: SigningAlgorithm,
  messageType: MessageType,
  message: Buffer,
): Buffer {
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
    return exactLength(message, algorithm, 'EXTERNAL_MU');
  }
  if (messageType === 'DIGEST') {
    if (family === 'ml-dsa') {
      throw new ApiError('invalid_request', 'MessageType DIGEST is not valid for ML-DSA keys; use RAW or EXTERNAL_MU');
    }
    return exactLength(message, algorithm, 'DIGEST');
  }
  if (family === 'ed25519') {
    // KMS: ED25519_PH_SHA_512 requires DIGEST; pure ED25519_SHA_512 over RAW needs a key store path that signs the
    // message, which this door does not have yet (issue 47's door part). Refused, never hashed into a wrong signature.
    throw new ApiError(
      'invalid_request',
      algorithm === 'ED25519_PH_SHA_512'
        ? 'ED25519_PH_SHA_512 requires MessageType DIGEST (the 64-byte SHA-512 of the message)'
        : `${algorithm} with MessageType RAW is not supported by this service yet; sign the message's SHA-512 with ` +
            'ED25519_PH_SHA_512 and MessageType DIGEST',
    );
  }
  if (family === 'ml-dsa') return mlDsaMu(mlDsaPublicKey(key), [message]);
  if (family === 'sm2') return sm2Digest(sm2PublicPoint(key), [message]);
  const info = algorithmInfo(algorithm);
  return createHash(info.hash === 'mu' || info.hash === 'sm3' ? 'sha256' : info.hash)
    .update(message)
    .digest();
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
