// A small DER reader for the few structures key import parses that Node 20's crypto cannot (ML-DSA private keys,
// RFC 9881) or should not (an EC private scalar, taken as bytes that can be zeroed instead of a JWK string).
// Definite lengths only, as DER requires; anything else is malformed.

export interface Tlv {
  tag: number;
  /** The contents, a view into the input (zeroing the input zeroes it). */
  value: Buffer;
  /** Offset just past this element. */
  end: number;
}

export class DerError extends Error {}

export function readTlv(buf: Buffer, at = 0): Tlv {
  if (at + 2 > buf.length) throw new DerError('truncated DER element');
  const tag = buf[at] as number;
  let len = buf[at + 1] as number;
  let start = at + 2;
  if (len & 0x80) {
    const n = len & 0x7f;
    if (n === 0 || n > 3 || start + n > buf.length) throw new DerError('unsupported DER length');
    len = 0;
    for (let i = 0; i < n; i++) len = (len << 8) | (buf[start + i] as number);
    start += n;
  }
  const end = start + len;
  if (end > buf.length) throw new DerError('DER element runs past the end');
  return { tag, value: buf.subarray(start, end), end };
}

/** The elements of a constructed value (SEQUENCE contents), in order. */
export function readChildren(value: Buffer): Tlv[] {
  const out: Tlv[] = [];
  let at = 0;
  while (at < value.length) {
    const t = readTlv(value, at);
    out.push(t);
    at = t.end;
  }
  return out;
}

/** Dotted form of an OBJECT IDENTIFIER's contents. */
export function oidToString(value: Buffer): string {
  if (value.length === 0) throw new DerError('empty OID');
  const first = value[0] as number;
  const parts = [Math.min(2, Math.floor(first / 40)), first - 40 * Math.min(2, Math.floor(first / 40))];
  let n = 0;
  for (const byte of value.subarray(1)) {
    n = n * 128 + (byte & 0x7f);
    if (!(byte & 0x80)) {
      parts.push(n);
      n = 0;
    }
  }
  return parts.join('.');
}
