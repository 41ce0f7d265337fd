// SubjectPublicKeyInfo for the key types Node 20's crypto cannot export: ML-DSA (RFC 9881: the algorithm OID with
// absent parameters, the raw pk in the BIT STRING) and SM2 (id-ecPublicKey on curve 1.2.156.10197.1.301, as KMS
// returns it). And the way back, for callers that need the raw ML-DSA key (μ starts with SHAKE256(pk)).
import { createPublicKey } from 'node:crypto';
import type { KeySpec, NamedCurve } from './algorithms.js';

/** id-ml-dsa-44/65/87 (2.16.840.1.101.3.4.3.17-19), DER. */
export const ML_DSA_OID: Partial<Record<KeySpec, Buffer>> = {
  ML_DSA_44: Buffer.from('0609608648016503040311', 'hex'),
  ML_DSA_65: Buffer.from('0609608648016503040312', 'hex'),
  ML_DSA_87: Buffer.from('0609608648016503040313', 'hex'),
};
/** SEQUENCE { id-ecPublicKey, sm2 curve } */
const SM2_ALGORITHM = Buffer.from('301306072a8648ce3d020106082a811ccf5501822d', 'hex');

function derLength(len: number): Buffer {
  if (len < 0x80) return Buffer.from([len]);
  if (len < 0x100) return Buffer.from([0x81, len]);
  return Buffer.from([0x82, len >> 8, len & 0xff]);
}

function tlv(tag: number, body: Buffer): Buffer {
  return Buffer.concat([Buffer.from([tag]), derLength(body.length), body]);
}

function spki(algorithm: Buffer, publicKey: Buffer): Buffer {
  return tlv(0x30, Buffer.concat([algorithm, tlv(0x03, Buffer.concat([Buffer.from([0]), publicKey]))]));
}

/** Bytes of a coordinate on each NIST curve. */
export const EC_FIELD_BYTES: Record<NamedCurve, number> = { 'P-256': 32, 'P-384': 48, 'P-521': 66 };

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
  return spki(tlv(0x30, oid), publicKey);
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
  for (const [spec, oid] of Object.entries(ML_DSA_OID) as [KeySpec, Buffer][]) {
    const algorithm = tlv(0x30, oid);
    const at = der.indexOf(algorithm);
    // SEQUENCE hdr (4 bytes: 30 82 LL LL), the algorithm, then BIT STRING hdr (03 82 LL LL 00).
    if (at !== 4 || der[0] !== 0x30) continue;
    const bits = at + algorithm.length;
    // A truncated input must give undefined, not a RangeError from the reads below.
    if (der.length < bits + 5 || der[bits] !== 0x03 || der[bits + 1] !== 0x82) return undefined;
    const len = der.readUInt16BE(bits + 2);
    if (der[bits + 4] !== 0 || bits + 4 + len !== der.length) return undefined;
    return { spec, publicKey: Buffer.from(der.subarray(bits + 5)) };
  }
  return undefined;
}

/** The public point (04 || x || y) of an SM2 SubjectPublicKeyInfo (DER), or undefined when it is not one. */
export function parseSm2Spki(der: Buffer): Buffer | undefined {
  const prefix = Buffer.concat([Buffer.from('3059', 'hex'), SM2_ALGORITHM, Buffer.from('034200', 'hex')]);
  if (der.length !== prefix.length + 65 || !der.subarray(0, prefix.length).equals(prefix)) return undefined;
  return Buffer.from(der.subarray(prefix.length));
}
