// The head of a refused `LIST` request, read exactly as strictly as Node's HTTP parser (llhttp) reads a head it
// accepts, so that the rescue (list-verb.ts) answers nothing Node itself would have refused: a request line
// `LIST <path>[?query] HTTP/1.x` with visible characters only; header names of token characters (RFC 9110 5.6.2)
// right before the colon (no whitespace before it, no line folding); values of visible characters, spaces, tabs and
// obs-text; exactly one Host; no body. On top of that, no second credential header (x-vault-token,
// authorization), which would otherwise leave the choice of token to the parser.

export interface ListHead {
  path: string;
  query: string;
  /** Names in lower case; hop-by-hop and body headers left out (they describe the refused connection). */
  headers: Record<string, string>;
}

/** `LIST`, an origin-form target of visible ASCII (path without `?`, then the query), HTTP/1.0 or 1.1. */
const REQUEST_LINE = /^LIST (\/[!->@-~]*)(\?[!-~]*)? HTTP\/1\.[01]$/;
/** A header line: token characters, the colon at once, then the value (visible, space, tab, obs-text). */
const HEADER_LINE = /^([!#$%&'*+.^_`|~0-9A-Za-z-]+):([\t\x20-\x7e\x80-\xff]*)$/;
/** Headers that describe the refused connection or body, not the request the app is to answer. */
export const HOP_HEADERS = new Set(['connection', 'keep-alive', 'content-length', 'transfer-encoding', 'upgrade']);
/** Headers that carry the caller's credentials: each at most once. */
const CREDENTIALS = new Set(['x-vault-token', 'authorization']);

/**
 * The request, when `raw` is exactly one whole head of a `LIST` for `listPath` (no body, nothing after it), and
 * valid; undefined for anything else (the caller then lets the ordinary 400 stand).
 */
export function parseListHead(raw: Buffer, listPath: string): ListHead | undefined {
  const text = raw.toString('latin1');
  const end = text.indexOf('\r\n\r\n');
  if (end < 0 || end + 4 !== text.length) return undefined; // incomplete, or a body (or a pipelined request) follows
  const [line = '', ...lines] = text.slice(0, end).split('\r\n');
  const match = REQUEST_LINE.exec(line);
  if (!match || (match[1] as string).replace(/\/+$/, '') !== listPath) return undefined;
  const headers: Record<string, string> = {};
  const seen = new Set<string>();
  let hosts = 0;
  for (const header of lines) {
    const parts = HEADER_LINE.exec(header); // a folded line starts with whitespace: no token, refused here
    if (!parts) return undefined;
    const name = (parts[1] as string).toLowerCase();
    const value = (parts[2] as string).replace(/^[\t ]+|[\t ]+$/g, '');
    if (name === 'host') hosts++;
    if ((CREDENTIALS.has(name) || name === 'content-length') && seen.has(name)) return undefined;
    seen.add(name);
    if (name === 'transfer-encoding' || (name === 'content-length' && value !== '0')) return undefined;
    if (!HOP_HEADERS.has(name)) headers[name] = name in headers ? `${headers[name]}, ${value}` : value;
  }
  if (hosts !== 1) return undefined;
  return { path: match[1] as string, query: (match[2] ?? '').slice(1), headers };
}
