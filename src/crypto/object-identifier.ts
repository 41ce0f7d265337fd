// OBJECT IDENTIFIER contents (X.690 §8.19) to and from dotted text, each arc a bigint. asn1js (under asn1-schema)
// reads an arc of more than 8 octets as hex and one above 2^53 imprecisely, and writes such arcs wrongly or not at
// all, yet 2.25.<UUID> OIDs (X.667, the default TSA policy) have a 128-bit arc. Key import reads PKCS#8's OIDs
// with it too.
import { TAG, tlv } from './der.js';

/** The dotted form of an OID's contents octets, or undefined when they are not a valid DER encoding. */
export function decodeObjectIdentifier(content: Uint8Array): string | undefined {
  const arcs: bigint[] = [];
  let value = 0n;
  let started = false;
  for (const octet of content) {
    // DER: an arc's first octet is never 0x80 (no leading zero groups).
    if (!started && octet === 0x80) return undefined;
    started = true;
    value = (value << 7n) | BigInt(octet & 0x7f);
    if (octet & 0x80) continue;
    arcs.push(value);
    value = 0n;
    started = false;
  }
  const [first, ...rest] = arcs;
  if (first === undefined || started) return undefined;
  const top = first < 40n ? 0n : first < 80n ? 1n : 2n;
  return [top, first - top * 40n, ...rest].join('.');
}

/** The DER OBJECT IDENTIFIER (tag, length, contents) of a dotted OID such as tsa.policy. */
export function encodeObjectIdentifier(dotted: string): Buffer {
  const parts = dotted.split('.');
  if (parts.length < 2 || !parts.every((p) => /^(0|[1-9][0-9]*)$/.test(p))) {
    throw new Error(`${dotted} is not a dotted OID`);
  }
  const [top, second, ...rest] = parts.map((p) => BigInt(p));
  if ((top as bigint) > 2n || ((top as bigint) < 2n && (second as bigint) >= 40n)) {
    throw new Error(`${dotted} is not a valid OID (X.660: the first arc is 0..2, the second below 40 under 0 and 1)`);
  }
  const octets: number[] = [];
  for (const arc of [(top as bigint) * 40n + (second as bigint), ...rest]) {
    const groups = [Number(arc & 0x7fn)];
    for (let v = arc >> 7n; v > 0n; v >>= 7n) groups.unshift(Number(v & 0x7fn) | 0x80);
    octets.push(...groups);
  }
  if (octets.length > 127) throw new Error(`${dotted} is too long`);
  return tlv(TAG.OBJECT_IDENTIFIER, Buffer.from(octets));
}
