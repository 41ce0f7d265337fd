// The compact JWS text of a CI ID token, checked to be the one spelling of its bytes (RFC 7515 §2: base64url
// without padding, RFC 4648 §3.5: unused bits of the last character zero). Decoders, jose's included, ignore those
// bits, so without this check one signed token has several texts that all verify: anything keyed on the text (a
// one-use check, a cache) would count each as new. docs/ci.md, "The exchange".

const SEGMENT_NAMES = ['header', 'payload', 'signature'] as const;
const BASE64URL = /^[A-Za-z0-9_-]*$/;

/** Why `segment` is not the canonical base64url of its bytes, or undefined when it is. */
export function base64urlProblem(segment: string): string | undefined {
  if (!BASE64URL.test(segment)) return 'has characters outside base64url (padding "=", "+" or "/")';
  if (segment.length % 4 === 1) return 'has a length no base64url text has';
  // Re-encoding the decoded bytes gives the one canonical text; any other text set bits the encoding leaves unused.
  if (Buffer.from(segment, 'base64url').toString('base64url') !== segment) {
    return 'sets unused bits in its last character (not the canonical encoding of its bytes)';
  }
  return undefined;
}

/**
 * Why a compact JWS is not canonically encoded (naming the segment), or undefined when each of its three segments
 * is. A text without exactly three segments is left to the JWT parser, which says so in its own words.
 */
export function compactJwsProblem(token: string): string | undefined {
  const segments = token.split('.');
  if (segments.length !== SEGMENT_NAMES.length) return undefined;
  for (const [index, name] of SEGMENT_NAMES.entries()) {
    const problem = base64urlProblem(segments[index] as string);
    if (problem) return `its ${name} ${problem}`;
  }
  return undefined;
}
