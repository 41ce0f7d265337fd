// Ed25519ph (RFC 8032 §5.1 with phflag 1 and an empty context) over a SHA-512 digest that the caller computed, as
// KMS's ED25519_PH_SHA_512 with MessageType DIGEST signs. @noble/curves' ed25519ph takes the message and hashes it
// itself, node:crypto signs pure Ed25519 only; this is the same scheme with the prehash step already done: noble's
// EdDSA core with RFC 8032's dom2 and an identity prehash. The tests check it against ed25519ph over the message.

import { eddsa } from '@noble/curves/abstract/edwards.js';
import { ed25519, ed25519ph } from '@noble/curves/ed25519.js';
import { sha512 } from '@noble/hashes/sha2.js';

const DOM2_PREFIX = new TextEncoder().encode('SigEd25519 no Ed25519 collisions');

/** dom2(phflag, context) || data (RFC 8032 §2); noble calls it with phflag true because a prehash is set. */
function dom2(data: Uint8Array, context: Uint8Array, phflag: boolean): Uint8Array {
  if (context.length > 255) throw new Error('Ed25519ph context longer than 255 bytes');
  const out = new Uint8Array(DOM2_PREFIX.length + 2 + context.length + data.length);
  out.set(DOM2_PREFIX);
  out.set([phflag ? 1 : 0, context.length], DOM2_PREFIX.length);
  out.set(context, DOM2_PREFIX.length + 2);
  out.set(data, DOM2_PREFIX.length + 2 + context.length);
  return out;
}

/** RFC 8032 §5.1.5's clamping of the secret scalar, as for every Ed25519 variant. */
function clamp(bytes: Uint8Array): Uint8Array {
  bytes[0] = (bytes[0] ?? 0) & 248;
  bytes[31] = ((bytes[31] ?? 0) & 127) | 64;
  return bytes;
}

const ED25519PH_OF_DIGEST = eddsa(ed25519ph.Point, sha512, {
  adjustScalarBytes: clamp,
  domain: dom2,
  prehash: (digest: Uint8Array) => digest,
});

const SHA512_BYTES = 64;

/** The Ed25519ph signature (64 bytes) by the 32-byte private key `seed` of the message whose SHA-512 is `digest`. */
export function signEd25519phDigest(seed: Uint8Array, digest: Uint8Array): Buffer {
  if (digest.length !== SHA512_BYTES) throw new Error(`Ed25519ph signs a 64-byte SHA-512 digest, got ${digest.length}`);
  return Buffer.from(ED25519PH_OF_DIGEST.sign(digest, seed));
}

/** RFC 8032's strict verification (no ZIP-215 leniency) of an Ed25519ph signature of the digest. */
export function verifyEd25519phDigest(publicKey: Uint8Array, digest: Uint8Array, signature: Uint8Array): boolean {
  if (digest.length !== SHA512_BYTES || signature.length !== 64 || publicKey.length !== 32) return false;
  try {
    return ED25519PH_OF_DIGEST.verify(signature, digest, publicKey, { zip215: false });
  } catch {
    return false; // not a point, not a signature
  }
}

/** The 32-byte public key of an Ed25519 private key (seed). */
export function ed25519PublicKey(seed: Uint8Array): Buffer {
  return Buffer.from(ed25519.getPublicKey(seed));
}
