// A token's public key attributes as SPKI PEM, the form the key store hands out.
import { createPublicKey } from 'node:crypto';
import type * as graphene from 'graphene-pk11';
import type { EcKeyInfo, NamedCurve, RsaKeyInfo } from '../../crypto/algorithms.js';
import { EC_FIELD_BYTES, ecPointSpkiPem } from '../../crypto/spki.js';

/** The SPKI PEM of a public key object the token just generated for a key of `info`. */
export function tokenPublicKeyPem(info: RsaKeyInfo | EcKeyInfo, publicKey: graphene.PublicKey): string {
  return info.family === 'rsa'
    ? rsaPublicKeyPem(publicKey.getAttribute({ modulus: null, publicExponent: null }))
    : ecPublicKeyPem(info.curve, publicKey.getAttribute({ pointEC: null }).pointEC as Buffer);
}

function rsaPublicKeyPem(attrs: { modulus?: Buffer | null; publicExponent?: Buffer | null }): string {
  if (!attrs.modulus || !attrs.publicExponent) throw new Error('token returned an RSA public key without modulus');
  return createPublicKey({
    key: { kty: 'RSA', n: attrs.modulus.toString('base64url'), e: attrs.publicExponent.toString('base64url') },
    format: 'jwk',
  })
    .export({ type: 'spki', format: 'pem' })
    .toString();
}

function ecPublicKeyPem(curve: NamedCurve, pointEc: Buffer): string {
  // CKA_EC_POINT is a DER OCTET STRING around the uncompressed point 04||X||Y.
  let point = pointEc;
  if (point[0] === 0x04 && point.length !== 1 + 2 * EC_FIELD_BYTES[curve]) {
    const lenByte = point[1] ?? 0;
    point = point.subarray(lenByte & 0x80 ? 2 + (lenByte & 0x7f) : 2);
  }
  try {
    return ecPointSpkiPem(curve, point);
  } catch {
    throw new Error('token returned a malformed EC point');
  }
}
