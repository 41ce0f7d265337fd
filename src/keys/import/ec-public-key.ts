// The public key of an EC private key that cannot leave the token: the key signs two probe digests (raw ECDSA,
// r || s), the public key is recovered from the first signature (ECDSA public-key recovery, SEC 1 §4.1.6) and the
// candidate that verifies the second is it. Used for keys unwrapped in the token, which keep no public point.
import { randomBytes } from 'node:crypto';
import { p256, p384, p521 } from '@noble/curves/nist.js';
import { secp256k1 } from '@noble/curves/secp256k1.js';
import type { NamedCurve } from '../../crypto/algorithms.js';
import { ecPointSpkiPem } from '../../crypto/spki.js';

const NOBLE = { 'P-256': p256, 'P-384': p384, 'P-521': p521, secp256k1 } as const;

/** `sign`: raw ECDSA over a digest, r || s (CKM_ECDSA). Returns the public key, PEM SubjectPublicKeyInfo. */
export function recoverEcPublicKey(curve: NamedCurve, sign: (digest: Buffer) => Buffer): string {
  const probes = [randomBytes(32), randomBytes(32)] as const;
  const [first, second] = probes.map(sign) as [Buffer, Buffer];
  const ec = NOBLE[curve];
  for (const bit of [0, 1, 2, 3]) {
    let point: Uint8Array;
    try {
      point = ec.Signature.fromBytes(first, 'compact').addRecoveryBit(bit).recoverPublicKey(probes[0]).toBytes(false);
    } catch {
      continue;
    }
    if (ec.verify(second, probes[1], point, { prehash: false, lowS: false })) {
      return ecPointSpkiPem(curve, point);
    }
  }
  throw new Error('could not recover the public key of the imported EC key');
}
