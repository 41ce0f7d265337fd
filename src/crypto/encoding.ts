import { ApiError } from '../errors.js';

const BASE64_ANY = /^[A-Za-z0-9+/_-]*={0,2}$/;

/**
 * Decodes base64 in either alphabet (standard or URL-safe), padded or not. The contract's samples use
 * URL-safe with padding while most tools emit standard base64, so both are accepted; anything else is a 400
 * that names the field.
 */
export function decodeBase64Field(field: string, value: string): Buffer {
  if (!BASE64_ANY.test(value)) {
    throw new ApiError('invalid_hash', `${field} is not base64 (standard or URL-safe alphabet)`);
  }
  const unpadded = value.replace(/=+$/, '');
  if (unpadded.length % 4 === 1 || (value.length !== unpadded.length && value.length % 4 !== 0)) {
    throw new ApiError('invalid_hash', `${field} has an invalid base64 length or padding`);
  }
  const bytes = Buffer.from(unpadded.replace(/-/g, '+').replace(/_/g, '/'), 'base64');
  if (bytes.length === 0) {
    throw new ApiError('invalid_hash', `${field} is empty`);
  }
  return bytes;
}

function derLength(len: number): Buffer {
  if (len < 0x80) return Buffer.from([len]);
  if (len < 0x100) return Buffer.from([0x81, len]);
  return Buffer.from([0x82, len >> 8, len & 0xff]);
}

function derInteger(raw: Buffer): Buffer {
  let i = 0;
  while (i < raw.length - 1 && raw[i] === 0) i++;
  let body = raw.subarray(i);
  if ((body[0] ?? 0) & 0x80) body = Buffer.concat([Buffer.from([0]), body]);
  return Buffer.concat([Buffer.from([0x02]), derLength(body.length), body]);
}

/** PKCS#11 ECDSA returns fixed-width r||s; KMS (and this API) return an X9.62 DER SEQUENCE. */
export function ecdsaRawToDer(raw: Buffer): Buffer {
  if (raw.length === 0 || raw.length % 2 !== 0) throw new Error('ECDSA r||s must have an even, non-zero length');
  const half = raw.length / 2;
  const body = Buffer.concat([derInteger(raw.subarray(0, half)), derInteger(raw.subarray(half))]);
  return Buffer.concat([Buffer.from([0x30]), derLength(body.length), body]);
}

/** The way back: an X9.62 DER SEQUENCE of r and s as fixed-width r||s, `width` bytes each (JWS's ECDSA form). */
export function ecdsaDerToRaw(der: Buffer, width: number): Buffer {
  let at = 0;
  const readLength = (): number => {
    const first = der[at++] ?? 0;
    if (first < 0x80) return first;
    let len = 0;
    for (let n = first & 0x7f; n > 0; n--) len = (len << 8) | (der[at++] ?? 0);
    return len;
  };
  if (der[at++] !== 0x30) throw new Error('an ECDSA signature is a DER SEQUENCE');
  readLength();
  const parts = [0, 1].map(() => {
    if (der[at++] !== 0x02) throw new Error('an ECDSA signature holds two DER INTEGERs');
    const len = readLength();
    let value = der.subarray(at, at + len);
    at += len;
    while (value.length > width && value[0] === 0) value = value.subarray(1);
    if (value.length > width) throw new Error(`an ECDSA integer longer than ${width} bytes`);
    return Buffer.concat([Buffer.alloc(width - value.length), value]);
  });
  return Buffer.concat(parts);
}

/** DigestInfo prefixes (RFC 8017 section 9.2 note 1) for PKCS#1 v1.5 over a pre-computed digest. */
export const DIGEST_INFO_PREFIX = {
  sha256: Buffer.from('3031300d060960864801650304020105000420', 'hex'),
  sha384: Buffer.from('3041300d060960864801650304020205000430', 'hex'),
  sha512: Buffer.from('3051300d060960864801650304020305000440', 'hex'),
} as const;
