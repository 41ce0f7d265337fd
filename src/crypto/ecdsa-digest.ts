// ECDSA signs the integer made of a digest's leftmost bits, as many as the curve's order has (SEC 1 section 4.1.3,
// FIPS 186-5 section 6.4.1). A key store that accepts only the curve's own digest length (AWS KMS takes a P-384
// key's digest only as 48 bytes) can still sign a SHA-256 or SHA-512 digest: the input below is another byte
// string for the same integer, so the signature is the one a verifier of the original digest expects.
import { DIGEST_LENGTH, type NamedCurve } from './algorithms.js';

/** Bits of each curve's order n. */
const ORDER_BITS: Record<NamedCurve, number> = { 'P-256': 256, 'P-384': 384, 'P-521': 521, secp256k1: 256 };
/** The digest length each curve pairs with (what a KMS-like key store accepts). */
const CURVE_DIGEST_BYTES: Record<NamedCurve, number> = {
  'P-256': DIGEST_LENGTH.sha256,
  'P-384': DIGEST_LENGTH.sha384,
  'P-521': DIGEST_LENGTH.sha512,
  secp256k1: DIGEST_LENGTH.sha256,
};

/**
 * `digest` as the curve's digest length without changing what ECDSA signs: a shorter digest is left-padded with
 * zeros (the same integer, and never longer than the order, so nothing is truncated away); a longer one keeps its
 * leftmost bytes, which are exactly the bits ECDSA would have used (the curve's digest length is the order's size
 * for P-256, P-384 and secp256k1; P-521's 64 bytes are longer than any SHA-2 digest, so it is only ever padded).
 */
export function ecdsaInputForCurve(curve: NamedCurve, digest: Buffer): Buffer {
  const want = CURVE_DIGEST_BYTES[curve];
  if (digest.length === want) return digest;
  if (digest.length < want) return Buffer.concat([Buffer.alloc(want - digest.length), digest]);
  if (want * 8 !== ORDER_BITS[curve]) {
    // Never reached with SHA-2 digests; truncating bytes would be wrong where the order is not whole bytes.
    throw new Error(`a ${digest.length}-byte digest cannot be shortened for ${curve}`);
  }
  return digest.subarray(0, want);
}
