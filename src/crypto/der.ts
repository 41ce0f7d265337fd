// DER (X.690), read strictly and written minimally: the one hand-written DER code of the project. Definite lengths
// in their shortest form, an element never running past its parent, no bytes after the outer element, INTEGERs
// without needless leading octets; a truncated input is an error, never zeros. The X.509 and TSA builders use
// @peculiar/asn1 for whole structures; this module serves the few places that read or write DER by hand (ECDSA
// signatures, SubjectPublicKeyInfo, PKCS#8 key import, the TSA's structure check and its TSTInfo policy).

export class DerError extends Error {}

/** Nested elements deeper than this are refused (a time-stamp query needs 6; a PKCS#8 key 4). */
export const MAX_DEPTH = 16;

export const TAG = {
  INTEGER: 0x02,
  BIT_STRING: 0x03,
  OCTET_STRING: 0x04,
  NULL: 0x05,
  OBJECT_IDENTIFIER: 0x06,
  SEQUENCE: 0x30,
  SET: 0x31,
} as const;

/** One element: its identifier octet, contents and where it ends in the buffer it was read from. */
export interface DerElement {
  /** The identifier octet (the first one; enough for the universal and context tags read here). */
  tag: number;
  constructed: boolean;
  /** The contents octets, a view into the input (zeroing the input zeroes it). */
  content: Buffer;
  /** Offset just past this element. */
  end: number;
}

interface Header {
  tag: number;
  contentStart: number;
  end: number;
}

/** The header at `offset`, or why it is not one; `end` may lie past the buffer (the caller says what that means). */
function readHeader(der: Uint8Array, offset: number): Header | string {
  let at = offset;
  const tag = der[at++];
  if (tag === undefined) return `an element ends at byte ${offset}`;
  if ((tag & 0x1f) === 0x1f) {
    // High tag number: base-128 continuation bytes.
    for (let octets = 1; ; octets++) {
      const b = der[at++];
      if (b === undefined) return `a tag is cut off at byte ${offset}`;
      if (octets > 4) return `a tag at byte ${offset} is too long`;
      if (!(b & 0x80)) break;
    }
  }
  const first = der[at++];
  if (first === undefined) return `a length is missing at byte ${at - 1}`;
  let length = first;
  if (first === 0x80) return `indefinite length at byte ${at - 1} (BER, not DER)`;
  if (first > 0x80) {
    const octets = first & 0x7f;
    if (octets > 4) return `a length at byte ${at - 1} is too long`;
    length = 0;
    for (let i = 0; i < octets; i++) {
      const b = der[at++];
      if (b === undefined) return `a length is cut off at byte ${at - 1}`;
      if (i === 0 && b === 0) return `a length at byte ${at - 1} is not in shortest form`;
      length = length * 256 + b;
    }
    if (length < 0x80) return `a length at byte ${at - 1} is not in shortest form`;
  }
  return { tag, contentStart: at, end: at + length };
}

/** The element at `offset` of `der`, which must end within `der`; throws DerError otherwise. */
export function readElement(der: Uint8Array, offset = 0): DerElement {
  const header = readHeader(der, offset);
  if (typeof header === 'string') throw new DerError(header);
  if (header.end > der.length) {
    throw new DerError(`truncated: an element at byte ${offset} announces ${header.end - offset} bytes`);
  }
  const bytes = Buffer.from(der.buffer, der.byteOffset, der.byteLength);
  return {
    tag: header.tag,
    constructed: (header.tag & 0x20) !== 0,
    content: bytes.subarray(header.contentStart, header.end),
    end: header.end,
  };
}

/** The one element `der` holds, with `tag` when given: nothing missing, nothing after it. */
export function readSingle(der: Uint8Array, tag?: number): DerElement {
  const element = readElement(der);
  if (element.end !== der.length) throw new DerError(`${der.length - element.end} bytes follow the element`);
  if (tag !== undefined && element.tag !== tag) throw new DerError(`tag 0x${hex(element.tag)}, not 0x${hex(tag)}`);
  return element;
}

/** The elements inside `content` (the contents of a constructed element), in order; each must end inside it. */
export function readChildren(content: Uint8Array): DerElement[] {
  const children: DerElement[] = [];
  for (let offset = 0; offset < content.length; ) {
    const child = readElement(content, offset);
    children.push(child);
    offset = child.end;
  }
  return children;
}

/**
 * Why `der` is not exactly one well-formed DER element (definite, shortest-form lengths that nest exactly, at most
 * MAX_DEPTH deep), or undefined when it is. Only the structure is checked; what the elements mean is the caller's.
 */
export function derStructureProblem(der: Uint8Array): string | undefined {
  const outer = readHeader(der, 0);
  if (typeof outer === 'string') return outer;
  if (outer.end > der.length) return `truncated: ${outer.end} bytes announced, ${der.length} present`;
  if (outer.end < der.length) return `${der.length - outer.end} bytes follow the element`;
  return walk(der, 0, der.length, 0);
}

function walk(der: Uint8Array, start: number, end: number, depth: number): string | undefined {
  if (depth > MAX_DEPTH) return `nested more than ${MAX_DEPTH} deep`;
  let offset = start;
  while (offset < end) {
    const header = readHeader(der.subarray(0, end), offset);
    if (typeof header === 'string') return header;
    if (header.end > end) return `an element at byte ${offset} runs past its parent's end`;
    if (header.tag & 0x20) {
      const problem = walk(der, header.contentStart, header.end, depth + 1);
      if (problem) return problem;
    }
    offset = header.end;
  }
  return undefined;
}

/** The length octets of `length`, in shortest form. */
export function encodeLength(length: number): Buffer {
  if (!Number.isSafeInteger(length) || length < 0 || length > 0xffffffff) throw new RangeError(`length ${length}`);
  if (length < 0x80) return Buffer.from([length]);
  const octets: number[] = [];
  for (let v = length; v > 0; v = Math.floor(v / 256)) octets.unshift(v % 256);
  return Buffer.from([0x80 | octets.length, ...octets]);
}

/** One element: tag, length, contents. */
export function tlv(tag: number, ...content: Uint8Array[]): Buffer {
  let length = 0;
  for (const part of content) length += part.length;
  // One copy of the contents: ECDSA signatures from the token are converted here on every signing.
  return Buffer.concat([Buffer.from([tag]), encodeLength(length), ...content]);
}

/** The INTEGER holding the unsigned big-endian `magnitude`: leading zeros dropped, one 00 kept when the top bit is set. */
export function unsignedInteger(magnitude: Uint8Array): Buffer {
  let i = 0;
  while (i < magnitude.length - 1 && magnitude[i] === 0) i++;
  const body = magnitude.subarray(i);
  if (body.length === 0) return tlv(TAG.INTEGER, Buffer.from([0]));
  return (body[0] as number) & 0x80 ? tlv(TAG.INTEGER, Buffer.from([0]), body) : tlv(TAG.INTEGER, body);
}

/** The magnitude of a non-negative INTEGER's contents, refusing the empty, the negative and a needless leading 00. */
export function readUnsignedInteger(content: Uint8Array): Buffer {
  const bytes = Buffer.from(content.buffer, content.byteOffset, content.byteLength);
  if (bytes.length === 0) throw new DerError('an INTEGER with no contents');
  if ((bytes[0] as number) & 0x80) throw new DerError('a negative INTEGER');
  if (bytes.length > 1 && bytes[0] === 0 && !((bytes[1] as number) & 0x80)) {
    throw new DerError('an INTEGER with a needless leading zero (not DER)');
  }
  return bytes[0] === 0 && bytes.length > 1 ? bytes.subarray(1) : bytes;
}

/** PKCS#11 ECDSA returns fixed-width r||s; KMS (and this API) return an X9.62 DER SEQUENCE { r, s }. */
export function ecdsaRawToDer(raw: Uint8Array): Buffer {
  if (raw.length === 0 || raw.length % 2 !== 0) throw new Error('ECDSA r||s must have an even, non-zero length');
  const half = raw.length / 2;
  return tlv(TAG.SEQUENCE, unsignedInteger(raw.subarray(0, half)), unsignedInteger(raw.subarray(half)));
}

/**
 * The way back: an X9.62 DER SEQUENCE { r INTEGER, s INTEGER } as fixed-width r||s, `width` bytes each (PKCS#11's
 * and JWS's form). Throws DerError on anything that is not exactly that in DER, or an integer wider than `width`.
 */
export function ecdsaDerToRaw(der: Uint8Array, width: number): Buffer {
  const sequence = readSingle(der, TAG.SEQUENCE);
  const parts = readChildren(sequence.content);
  if (parts.length !== 2 || parts.some((p) => p.tag !== TAG.INTEGER)) {
    throw new DerError('an ECDSA signature is a SEQUENCE of two INTEGERs');
  }
  const raw = Buffer.alloc(2 * width);
  parts.forEach((part, i) => {
    const value = readUnsignedInteger(part.content);
    if (value.length > width) throw new DerError(`an ECDSA integer longer than ${width} bytes`);
    value.copy(raw, (i + 1) * width - value.length);
  });
  return raw;
}

function hex(byte: number): string {
  return byte.toString(16).padStart(2, '0');
}
