// Pure Ed25519 (ED25519_SHA_512) signs the message itself, which only some doors carry (KMS MessageType RAW, Vault
// transit's `input`). What such a request must be, and why it cannot wait for a person's decision: a held request
// is signed on approval from what its record keeps, and the record keeps the message's SHA-512, never the message.

import {
  algorithmInfo,
  algorithmsForKey,
  ED25519_MAX_MESSAGE_BYTES,
  type KeySpec,
  type SigningAlgorithm,
} from '../crypto/algorithms.js';
import { ApiError } from '../errors.js';

/** The message is there, fits the bound, and the key and algorithm are pure Ed25519. */
export function checkPureEd25519Request(spec: KeySpec, algorithm: SigningAlgorithm, message: Buffer | undefined): void {
  if (algorithmInfo(algorithm).hash !== 'message') {
    throw new ApiError(
      'invalid_request',
      `${algorithm} signs a digest, not a message; only ED25519_SHA_512 signs a message`,
    );
  }
  if (!algorithmsForKey(spec).includes(algorithm)) {
    throw new ApiError('algorithm_key_mismatch', `algorithm ${algorithm} cannot be used with a ${spec} key`);
  }
  if (message === undefined) {
    throw new ApiError(
      'invalid_request',
      `${algorithm} is pure Ed25519 and signs the message itself, which this request does not carry; sign the ` +
        'SHA-512 digest of the message with ED25519_PH_SHA_512 instead',
    );
  }
  if (message.length < 1 || message.length > ED25519_MAX_MESSAGE_BYTES) {
    throw new ApiError(
      'invalid_request',
      `the message ${algorithm} signs must be 1 to ${ED25519_MAX_MESSAGE_BYTES} bytes, got ${message.length}; sign ` +
        'a longer one as its SHA-512 digest with ED25519_PH_SHA_512',
    );
  }
}

/** The policy wants a person's decision for a pure Ed25519 request: refused, nothing held or signed. */
export function pureEd25519NotHeld(rule: string): ApiError {
  return new ApiError(
    'policy_denied',
    `policy rule ${rule} holds this request for a person's decision, and a pure Ed25519 (ED25519_SHA_512) request ` +
      'cannot be held: the message is not kept to be signed on approval; sign its SHA-512 digest with ' +
      'ED25519_PH_SHA_512, which can be held and approved',
  );
}
