// A check of DER's tag-length-value structure before a schema parser sees untrusted bytes. asn1js (under
// asn1-schema) reads a constructed element's children past the end its length announces, and ignores bytes after
// the outer element: a query whose inner lengths disagree would be read as something its sender never encoded.

const MAX_DEPTH = 16;

/**
 * Why `der` is not exactly one well-formed DER element (definite, shortest-form lengths that nest exactly), or
 * undefined when it is. Only the structure is checked; what the elements mean is the schema's business.
 */
export function derStructureProblem(der: Uint8Array): string | undefined {
  const outer = readHeader(der, 0);
  if (typeof outer === 'string') return outer;
  if (outer.end > der.length) return `truncated: ${outer.end} bytes announced, ${der.length} present`;
  if (outer.end < der.length) return `${der.length - outer.end} bytes follow the element`;
  return walk(der, 0, der.length, 0);
}

interface Header {
  /** The identifier octet (the first one; enough for the universal and context tags read here). */
  tag: number;
  constructed: boolean;
  contentStart: number;
  end: number;
}

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
  return { tag, constructed: (tag & 0x20) !== 0, contentStart: at, end: at + length };
}

function walk(der: Uint8Array, start: number, end: number, depth: number): string | undefined {
  if (depth > MAX_DEPTH) return `nested more than ${MAX_DEPTH} deep`;
  let offset = start;
  while (offset < end) {
    const header = readHeader(der.subarray(0, end), offset);
    if (typeof header === 'string') return header;
    if (header.end > end) return `an element at byte ${offset} runs past its parent's end`;
    if (header.constructed) {
      const problem = walk(der, header.contentStart, header.end, depth + 1);
      if (problem) return problem;
    }
    offset = header.end;
  }
  return undefined;
}

/** One element inside a structure derStructureProblem accepted. */
export interface DerElement {
  tag: number;
  /** The contents octets. */
  content: Uint8Array;
}

/** The elements inside `content` (the contents of a constructed element), in order; for DER already checked. */
export function derChildren(content: Uint8Array): DerElement[] {
  const children: DerElement[] = [];
  for (let offset = 0; offset < content.length; ) {
    const header = readHeader(content, offset);
    if (typeof header === 'string') throw new Error(header);
    children.push({ tag: header.tag, content: content.subarray(header.contentStart, header.end) });
    offset = header.end;
  }
  return children;
}
