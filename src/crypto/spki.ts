// SubjectPublicKeyInfo for the key types Node 20's crypto cannot export: ML-DSA (RFC 9881: the algorithm OID with
// absent parameters, the raw pk in the BIT STRING) and SM2 (id-ecPublicKey on curve 1.2.156.10197.1.301, as KMS
// returns it). And the way back, for callers that need the raw ML-DSA key (μ starts with SHAKE256(pk)).
import { createPublicKey } from 'node:crypto';
import { EC_FIELD_BYTES, type KeySpec, type NamedCurve } from './algorithms.js';
import { DerError, readChildren, readSingle, TAG, tlv } from './der.js';

/** id-ml-dsa-44/65/87 (2.16.840.1.101.3.4.3.17-19), DER. */
export const ML_DSA_OID: Partial<Record<KeySpec, Buffer>> = {
  ML_DSA_44: Buffer.from('0609608648016503040311', 'hex'),
  ML_DSA_65: Buffer.from('0609608648016503040312', 'hex'),
  ML_DSA_87: Buffer.from('0609608648016503040313', 'hex'),
};
/** SEQUENCE { id-ecPublicKey, sm2 curve } */
const SM2_ALGORITHM = Buffer.from('301306072a8648ce3d020106082a811ccf5501822d', 'hex');

function spki(algorithm: Buffer, publicKey: Buffer): Buffer {
  return tlv(TAG.SEQUENCE, algorithm, tlv(TAG.BIT_STRING, Buffer.from([0]), publicKey));
}

/** SubjectPublicKeyInfo PEM of an uncompressed NIST-curve point 04 || x || y; throws on any other shape. */
export function ecPointSpkiPem(curve: NamedCurve, point: Uint8Array): string {
  const size = EC_FIELD_BYTES[curve];
  const p = Buffer.from(point);
  if (p[0] !== 0x04 || p.length !== 1 + 2 * size) throw new Error(`not an uncompressed ${curve} point`);
  return createPublicKey({
    key: {
      kty: 'EC',
      crv: curve,
      x: p.subarray(1, 1 + size).toString('base64url'),
      y: p.subarray(1 + size).toString('base64url'),
    },
    format: 'jwk',
  })
    .export({ type: 'spki', format: 'pem' })
    .toString();
}

export function toPem(der: Buffer, label = 'PUBLIC KEY'): string {
  const lines = der.toString('base64').match(/.{1,64}/g) ?? [];
  return `-----BEGIN ${label}-----\n${lines.join('\n')}\n-----END ${label}-----\n`;
}

export function mlDsaSpkiDer(spec: KeySpec, publicKey: Buffer): Buffer {
  const oid = ML_DSA_OID[spec];
  if (!oid) throw new Error(`${spec} is not an ML-DSA key spec`);
  return spki(tlv(TAG.SEQUENCE, oid), publicKey);
}

export function mlDsaSpkiPem(spec: KeySpec, publicKey: Buffer): string {
  return toPem(mlDsaSpkiDer(spec, publicKey));
}

/** `point`: the uncompressed point 04 || x || y. */
export function sm2SpkiPem(point: Buffer): string {
  return toPem(spki(SM2_ALGORITHM, point));
}

/** The key spec and raw pk of an ML-DSA SubjectPublicKeyInfo (DER), or undefined when it is not one. */
export function parseMlDsaSpki(der: Buffer): { spec: KeySpec; publicKey: Buffer } | undefined {
  try {
    const fields = readChildren(readSingle(der, TAG.SEQUENCE).content);
    const [algorithm, bits] = fields;
    if (fields.length !== 2 || algorithm?.tag !== TAG.SEQUENCE || bits?.tag !== TAG.BIT_STRING) return undefined;
    // RFC 9881: the parameters are absent, so the algorithm is the OID alone; the key is whole bytes (no unused bits).
    const entry = Object.entries(ML_DSA_OID).find(([, oid]) => oid.equals(algorithm.content));
    if (!entry || bits.content[0] !== 0 || bits.content.length < 2) return undefined;
    return { spec: entry[0] as KeySpec, publicKey: Buffer.from(bits.content.subarray(1)) };
  } catch (err) {
    if (err instanceof DerError) return undefined; // a truncated input gives undefined, never a half-read key
    throw err;
  }
}

/** The public point (04 || x || y) of an SM2 SubjectPublicKeyInfo (DER), or undefined when it is not one. */
export function parseSm2Spki(der: Buffer): Buffer | undefined {
  const prefix = Buffer.concat([Buffer.from('3059', 'hex'), SM2_ALGORITHM, Buffer.from('034200', 'hex')]);
  if (der.length !== prefix.length + 65 || !der.subarray(0, prefix.length).equals(prefix)) return undefined;
  return Buffer.from(der.subarray(prefix.length));
}
