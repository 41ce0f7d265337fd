// Vault's `salt_length` for RSA PSS, read as Vault reads it (builtin/logical/transit path_sign_verify.go,
// getSaltLength): "auto" (the default), "hash", or a decimal integer, where Go's constants make 0 mean auto and -1
// mean hash, and anything below -1 is refused. Signing, auto is the longest salt the key allows (Go's SignPSS with
// PSSSaltLengthAuto: emLen - hLen - 2 bytes, 222 for RSA-2048 with SHA-256); verifying, auto accepts any length.
// A length the key cannot hold is refused when signing; a signature cannot have one, so verifying says invalid.
import { DIGEST_LENGTH, type HashName, keyInfo } from '../../crypto/algorithms.js';
import { kmsPssSaltRefusal } from '../../keys/aws-kms/aws-kms-key-store.js';
import type { KeyRecord } from '../../store/store.js';
import { VaultError } from './errors.js';

export type SaltLength = 'auto' | 'hash' | number;

const GO_INT = /^[+-]?[0-9]+$/;

/** The field as Vault parses it, with Vault's own error texts. Vault parses it for every key type; so does this. */
export function parseSaltLength(raw: string | number | undefined): SaltLength {
  if (raw === undefined) return 'auto';
  const text = String(raw).toLowerCase();
  if (text === 'auto') return 'auto';
  if (text === 'hash') return 'hash';
  if (!GO_INT.test(text) || !Number.isSafeInteger(Number(text))) {
    throw new VaultError(400, [`salt length neither 'auto', 'hash', nor an int: ${raw}`]);
  }
  const n = Number(text);
  if (n < -1) throw new VaultError(400, [`salt length is invalid: ${n}`]);
  return n === 0 ? 'auto' : n === -1 ? 'hash' : n;
}

/** The longest PSS salt an RSA key of `bits` holds with `hash` (RFC 8017 9.1.1: emLen >= hLen + sLen + 2). */
export function maxSaltLength(bits: number, hash: HashName): number {
  return Math.ceil((bits - 1) / 8) - DIGEST_LENGTH[hash] - 2;
}

/**
 * The salt length to sign with, in bytes, for an RSA key; undefined where it is the hash's length (the key store's
 * default). A length the key cannot hold is a 400, and so is any other than the hash's for a key in AWS KMS, before
 * the policy is asked (the key store would refuse it only after).
 */
export function signingSaltLength(key: KeyRecord, hash: HashName, salt: SaltLength): number | undefined {
  const spec = key.keySpec;
  const info = keyInfo(spec);
  if (info.family !== 'rsa') return undefined;
  const max = maxSaltLength(info.bits, hash);
  const bytes = salt === 'auto' ? max : salt === 'hash' ? DIGEST_LENGTH[hash] : salt;
  if (bytes > max) {
    throw new VaultError(400, [
      `salt length is invalid: ${bytes} is longer than a ${info.bits}-bit RSA key holds with ${hash} (at most ${max})`,
    ]);
  }
  if (bytes === DIGEST_LENGTH[hash]) return undefined;
  if (key.keyStore === 'aws-kms') throw new VaultError(400, [kmsPssSaltRefusal(DIGEST_LENGTH[hash], bytes)]);
  return bytes;
}

/** What verify accepts: any salt length (auto), or exactly this many bytes. */
export function verifyingSaltLength(hash: HashName, salt: SaltLength): 'any' | number {
  return salt === 'auto' ? 'any' : salt === 'hash' ? DIGEST_LENGTH[hash] : salt;
}
