// The one place that verifies ML-DSA signatures (pure ML-DSA, empty context, FIPS 204). Two inputs are possible:
// - the MESSAGE itself: node:crypto (OpenSSL 3.5's ML-DSA) where the runtime has it (Node 24; about 4x noble's
//   rate, docs/benchmarks.md), else @noble/post-quantum (Node 20 has no ML-DSA in node:crypto);
// - μ = SHAKE256(SHAKE256(pk, 64) || 0 || 0 || M, 64), what our API signs (KMS EXTERNAL_MU): only noble's
//   internal verify takes μ. node:crypto exposes no external-μ option (OpenSSL's "mu" parameter is not passed
//   through), so a caller that holds only μ (a file read in chunks, never whole in memory) stays on noble.
// A signature over μ is the signature of M, so both inputs give the same answer for the same signature.
import { createPublicKey, generateKeyPairSync, verify } from 'node:crypto';
import { ml_dsa44, ml_dsa65, ml_dsa87 } from '@noble/post-quantum/ml-dsa.js';
import type { KeySpec } from './algorithms.js';
import { mlDsaSpkiDer } from './spki.js';

export type MlDsaLevel = 44 | 65 | 87;

const NOBLE = { 44: ml_dsa44, 65: ml_dsa65, 87: ml_dsa87 } as const;
const SPEC: Record<MlDsaLevel, KeySpec> = { 44: 'ML_DSA_44', 65: 'ML_DSA_65', 87: 'ML_DSA_87' };
/** pk bytes per level (FIPS 204 table 2): a key of another length is a caller's error, on both paths alike. */
const PUBLIC_KEY_BYTES: Record<MlDsaLevel, number> = { 44: 1312, 65: 1952, 87: 2592 };

/** What was signed: the message, or μ computed from it (64 bytes). */
export type MlDsaSigned = { message: Uint8Array } | { mu: Uint8Array };

export type MlDsaVerifier = (level: MlDsaLevel, publicKey: Uint8Array, signed: MlDsaSigned, sig: Uint8Array) => boolean;

let nativeSupport: boolean | undefined;

/** True when this runtime's node:crypto has ML-DSA (Node 24); asked once. Node 20 throws ERR_INVALID_ARG_VALUE. */
export function nativeMlDsaAvailable(): boolean {
  if (nativeSupport === undefined) {
    try {
      generateKeyPairSync('ml-dsa-44' as never);
      nativeSupport = true;
    } catch {
      nativeSupport = false;
    }
  }
  return nativeSupport;
}

function checkPublicKey(level: MlDsaLevel, publicKey: Uint8Array): void {
  if (publicKey.length !== PUBLIC_KEY_BYTES[level]) {
    throw new Error(`an ML-DSA-${level} public key has ${PUBLIC_KEY_BYTES[level]} bytes, not ${publicKey.length}`);
  }
}

/** @noble/post-quantum: the message with the plain verify, μ with the internal one. */
export const verifyMlDsaJs: MlDsaVerifier = (level, publicKey, signed, signature) => {
  checkPublicKey(level, publicKey);
  if ('mu' in signed) {
    if (signed.mu.length !== 64) throw new Error(`μ has 64 bytes, not ${signed.mu.length}`);
    return NOBLE[level].internal.verify(signature, signed.mu, publicKey, { externalMu: true });
  }
  return NOBLE[level].verify(signature, signed.message, publicKey);
};

/** node:crypto (Node 24): the message only; throws for μ, which it cannot take, and where the runtime lacks ML-DSA. */
export const verifyMlDsaNative: MlDsaVerifier = (level, publicKey, signed, signature) => {
  checkPublicKey(level, publicKey);
  if (!('message' in signed)) throw new Error('node:crypto verifies ML-DSA over the message only, not over μ');
  if (!nativeMlDsaAvailable()) throw new Error(`node:crypto of Node ${process.versions.node} has no ML-DSA`);
  const key = createPublicKey({ key: mlDsaSpkiDer(SPEC[level], Buffer.from(publicKey)), format: 'der', type: 'spki' });
  return verify(null, signed.message, key, signature);
};

/**
 * True when `signature` is a valid ML-DSA-`level` signature (empty context) under the raw `publicKey` of what was
 * `signed`: node:crypto for a message where the runtime has ML-DSA, @noble/post-quantum otherwise and for μ.
 * A signature of the wrong length is false; a public key of the wrong length or μ not 64 bytes throws.
 */
export const verifyMlDsa: MlDsaVerifier = (level, publicKey, signed, signature) =>
  'message' in signed && nativeMlDsaAvailable()
    ? verifyMlDsaNative(level, publicKey, signed, signature)
    : verifyMlDsaJs(level, publicKey, signed, signature);

/** The level of an ML-DSA key spec (ML_DSA_65 -> 65), or undefined for any other spec. */
export function mlDsaLevel(spec: string): MlDsaLevel | undefined {
  const level = Number(/^ML_DSA_(44|65|87)$/.exec(spec)?.[1]);
  return level ? (level as MlDsaLevel) : undefined;
}
