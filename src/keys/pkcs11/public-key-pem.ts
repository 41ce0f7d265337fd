// A token's public key attributes as SPKI PEM, the form the key store hands out.
import { createPublicKey } from 'node:crypto';
import type * as graphene from 'graphene-pk11';
import { EC_FIELD_BYTES, type EcKeyInfo, type NamedCurve, type RsaKeyInfo } from '../../crypto/algorithms.js';
import { readSingle, TAG } from '../../crypto/der.js';
import { ecPointSpkiPem } from '../../crypto/spki.js';

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
  try {
    // CKA_EC_POINT is a DER OCTET STRING around the uncompressed point 04||X||Y (some tokens give the bare point).
    const bare = pointEc[0] === 0x04 && pointEc.length === 1 + 2 * EC_FIELD_BYTES[curve];
    return ecPointSpkiPem(curve, bare ? pointEc : readSingle(pointEc, TAG.OCTET_STRING).content);
  } catch {
    throw new Error('token returned a malformed EC point');
  }
}
