// The canonical request of AWS Signature Version 4, built from the request as it arrived, the way AWS builds it for
// every service but S3 ("Create a signed AWS API request", step 1; botocore's SigV4Auth.canonical_request is the
// client side): the path with dot segments and empty segments removed and then URI-encoded once more (a path the
// client sent as `/a%20b` is signed as `/a%2520b`), the query decoded and re-encoded per RFC 3986 and sorted by name
// then value, the signed headers lowercased with their values trimmed and runs of whitespace made one space.

/** RFC 3986 unreserved characters stay; every other UTF-8 byte becomes %XX (upper-case hex). */
const UNRESERVED = /^[A-Za-z0-9\-._~]*$/;
const HEX = '0123456789ABCDEF';

function encodeUtf8(text: string, keepSlash: boolean): string {
  if (UNRESERVED.test(text)) return text;
  let out = '';
  for (const byte of Buffer.from(text, 'utf8')) {
    const unreserved =
      (byte >= 0x41 && byte <= 0x5a) ||
      (byte >= 0x61 && byte <= 0x7a) ||
      (byte >= 0x30 && byte <= 0x39) ||
      byte === 0x2d ||
      byte === 0x2e ||
      byte === 0x5f ||
      byte === 0x7e ||
      (keepSlash && byte === 0x2f);
    out += unreserved ? String.fromCharCode(byte) : `%${HEX[byte >> 4]}${HEX[byte & 15]}`;
  }
  return out;
}

/** Percent-decoding that keeps a malformed escape as it is (it is then signed as `%25...`, as a client would). */
function decodeLenient(text: string): string {
  if (!text.includes('%')) return text;
  try {
    return decodeURIComponent(text);
  } catch {
    return text.replace(/(%[0-9A-Fa-f]{2})+/g, (run) => {
      try {
        return decodeURIComponent(run);
      } catch {
        return run;
      }
    });
  }
}

/**
 * A query name or value as the service reads it: `+` is a space (botocore sends a space in a parameter as `+` and
 * signs it as `%20`; a literal plus travels as `%2B`), then percent-decoding.
 */
function decodeQueryPart(text: string): string {
  return decodeLenient(text.includes('+') ? text.replaceAll('+', ' ') : text);
}

/** Dot segments and empty segments removed (botocore's remove_dot_segments), then encoded again, `/` kept. */
export function canonicalPath(rawPath: string): string {
  if (rawPath === '' || rawPath === '/') return '/';
  const segments: string[] = [];
  for (const segment of rawPath.split('/')) {
    if (segment === '' || segment === '.') continue;
    if (segment === '..') segments.pop();
    else segments.push(segment);
  }
  const first = rawPath.startsWith('/') ? '/' : '';
  const last = rawPath.endsWith('/') && segments.length > 0 ? '/' : '';
  return encodeUtf8(first + segments.join('/') + last, true);
}

/**
 * Each `name=value` decoded and re-encoded (so `!`, `'`, a space and raw UTF-8 are signed as %XX, as a conforming
 * client encodes them), sorted by encoded name and then value, a missing `=` read as an empty value. Parameters named in
 * `omit` (the signature itself, for query-string signing) are left out.
 */
export function canonicalQuery(rawQuery: string, omit?: string): string {
  if (rawQuery === '') return '';
  const pairs: [string, string][] = [];
  for (const pair of rawQuery.split('&')) {
    const equals = pair.indexOf('=');
    const name = equals < 0 ? pair : pair.slice(0, equals);
    const value = equals < 0 ? '' : pair.slice(equals + 1);
    const decodedName = decodeQueryPart(name);
    if (omit !== undefined && decodedName === omit) continue;
    pairs.push([encodeUtf8(decodedName, false), encodeUtf8(decodeQueryPart(value), false)]);
  }
  pairs.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0));
  let out = '';
  for (const [name, value] of pairs) out += `${out === '' ? '' : '&'}${name}=${value}`;
  return out;
}

const WHITESPACE_RUN = /\s+/g;

/** Trimall: leading and trailing whitespace removed, every run inside made one space. */
export function canonicalHeaderValue(value: string): string {
  return value.trim().replace(WHITESPACE_RUN, ' ');
}

/** A header's values as the request carried them: several lines of one name are joined with `,`. */
export type HeaderValues = Record<string, string | string[] | undefined>;

function headerValue(headers: HeaderValues, name: string): string {
  const value = headers[name];
  if (value === undefined) return '';
  if (typeof value === 'string') return canonicalHeaderValue(value);
  let out = '';
  for (let i = 0; i < value.length; i++) out += (i === 0 ? '' : ',') + canonicalHeaderValue(value[i]!);
  return out;
}

export interface CanonicalRequestParts {
  method: string;
  /** The path as it came on the wire, still percent-encoded, without the query. */
  rawPath: string;
  /** The query as it came on the wire, without the `?`. */
  rawQuery: string;
  /** Header names in lower case (Node's `req.headersDistinct` or `req.headers`). */
  headers: HeaderValues;
  /** The signed header names, lower case, sorted, as the Authorization header lists them. */
  signedHeaders: readonly string[];
  /** Hex SHA-256 of the body. */
  payloadHash: string;
  /** Query parameter left out of the canonical query (X-Amz-Signature for query-string signing). */
  omitQueryParameter?: string;
}

export function canonicalRequest(parts: CanonicalRequestParts): string {
  let headers = '';
  for (const name of parts.signedHeaders) headers += `${name}:${headerValue(parts.headers, name)}\n`;
  return [
    parts.method.toUpperCase(),
    canonicalPath(parts.rawPath),
    canonicalQuery(parts.rawQuery, parts.omitQueryParameter),
    headers,
    parts.signedHeaders.join(';'),
    parts.payloadHash,
  ].join('\n');
}
