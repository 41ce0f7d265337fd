// ECDSA signatures: the service returns X9.62 DER (as KMS does); PKCS#11 wants fixed-width r||s, each half
// left-padded to the curve's field size. Forgetting the padding broke P-521 in other modules ~75% of the time.
import type { KeySpec } from '../src/crypto/algorithms.js';

export const EC_FIELD_BYTES: Partial<Record<KeySpec, number>> = {
  ECC_NIST_P256: 32,
  ECC_NIST_P384: 48,
  ECC_NIST_P521: 66,
};

function readLength(der: Buffer, at: number): { len: number; next: number } {
  const first = der[at];
  if (first === undefined) throw new Error('ECDSA DER: truncated length');
  if (first < 0x80) return { len: first, next: at + 1 };
  if (first === 0x81) {
    const len = der[at + 1];
    if (len === undefined || len < 0x80) throw new Error('ECDSA DER: bad long-form length');
    return { len, next: at + 2 };
  }
  throw new Error('ECDSA DER: length form not used by any curve this daemon supports');
}

function readInteger(der: Buffer, at: number, fieldBytes: number): { value: Buffer; next: number } {
  if (der[at] !== 0x02) throw new Error('ECDSA DER: expected INTEGER');
  const { len, next } = readLength(der, at + 1);
  if (len === 0 || next + len > der.length) throw new Error('ECDSA DER: INTEGER runs past the end');
  let value = der.subarray(next, next + len);
  if ((value[0] ?? 0) & 0x80) throw new Error('ECDSA DER: negative INTEGER');
  while (value.length > 1 && value[0] === 0) value = value.subarray(1);
  if (value.length > fieldBytes) throw new Error(`ECDSA DER: INTEGER longer than ${fieldBytes} bytes`);
  const padded = Buffer.alloc(fieldBytes);
  value.copy(padded, fieldBytes - value.length);
  return { value: padded, next: next + len };
}

/** DER SEQUENCE { r INTEGER, s INTEGER } -> r||s, each exactly `fieldBytes` long. Throws on anything else. */
export function ecdsaDerToRaw(der: Buffer, fieldBytes: number): Buffer {
  if (der[0] !== 0x30) throw new Error('ECDSA DER: expected SEQUENCE');
  const { len, next } = readLength(der, 1);
  if (next + len !== der.length) throw new Error('ECDSA DER: SEQUENCE length does not match');
  const r = readInteger(der, next, fieldBytes);
  const s = readInteger(der, r.next, fieldBytes);
  if (s.next !== der.length) throw new Error('ECDSA DER: trailing bytes');
  return Buffer.concat([r.value, s.value]);
}
