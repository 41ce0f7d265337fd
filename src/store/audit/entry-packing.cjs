// How an audit entry is stored apart from what is hashed and exported (issue 46, migration 0032). The entry every
// verifier sees (its canonical JSON, its chain hash, its log leaf) does not change; the row written for it on SQLite
// holds it compactly, and the readers rebuild the canonical row from it (expandRow), byte for byte:
// - `hash` as its 32 bytes instead of 64 hex characters, and `prev_hash` empty: it is the previous row's hash (by
//   seq), which the reader takes from there.
// - the details of a signature made at once packed (`packed`, with `details` '0', a JSON text that the SQL expressions over
//   details read as holding nothing): the details' canonical JSON split into its shape (the text with every string
//   literal emptied) and its strings; the shape and the words (keys, key ids, algorithms, rules, reasons, via) as
//   ids into the audit_words dictionary, hex (also `sha256:`-named), base64 and UUIDs as their bytes, the digest (details.hash) in the
//   row's `digest` column (indexed for the lookup by digest) and the signature's SHA-256 in its `signature_sha256`
//   column, each named, not repeated.
// Packing is exact by construction (packDetails says how), so what is hashed and what is rebuilt cannot differ;
// test/unit/entry-packing.test.ts round-trips every kind of `signed` entry's details. Plain CommonJS: the store's
// writer thread (sqlite-writer.cjs) packs with it.
'use strict';

/** A slot's kind, in the low 3 bits of its first varint (the rest: a word's id or a length). */
const WORD = 0;
const HEX = 1;
const BASE64 = 2;
const UUID = 3;
const TEXT = 4;
const SIGNATURE_COLUMN = 5;
const DIGEST_COLUMN = 6;
/** `name:hex` (a digest named by its algorithm, as `sha256:...`): the name a word, the hex its bytes. */
const NAMED_HEX = 7;
/** Longer strings are stored as they are, not as words: a word is worth keeping only if it comes again. */
const MAX_WORD_LENGTH = 128;

/**
 * The entries packed: those of signatures made at once, one each (the bulk of the log). An approval's entry
 * (`approve_sign`, at a person's pace) and a batch's (one for many signatures) stay JSON, which tools and tests
 * read in SQL (details.request_id, details.batch).
 */
const PACKED_ACTIONS = new Set(['sign', 'pkcs11_sign']);

/** What `details` holds on a packed row: valid JSON (SQLite's json_extract reads it as holding no member), 1 byte. */
const PACKED_DETAILS = '0';

const HEX_RE = /^(?:[0-9a-f]{2})+$/;
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const NAMED_HEX_RE = /^([a-z0-9_-]{1,16}):((?:[0-9a-f]{2}){8,})$/;
const BASE64_RE = /^(?:[A-Za-z0-9+/]{4})+(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

function readVarint(buf, at) {
  let n = 0;
  let scale = 1;
  for (;;) {
    const b = buf[at.pos++];
    if (b === undefined) throw new Error('packed details end early');
    n += (b & 0x7f) * scale;
    if (b < 0x80) return n;
    scale *= 128;
  }
}

/**
 * Canonical JSON split into its shape (each string literal left as a lone `"`, which appears nowhere else outside
 * strings) and the raw texts between each literal's quotes, escapes as written: shape.split('"') put back together
 * with them is the text again.
 */
function splitStrings(json) {
  const strings = [];
  let shape = '';
  let i = 0;
  for (;;) {
    const open = json.indexOf('"', i);
    if (open < 0) return { shape: shape + json.slice(i), strings };
    shape += json.slice(i, open + 1);
    // The closing quote: the next one not escaped (after an even number of backslashes). Found by indexOf, not a
    // walk over every character: this runs for every entry packed.
    let close = json.indexOf('"', open + 1);
    for (;;) {
      if (close < 0) throw new Error('unterminated string in JSON');
      let backslashes = 0;
      while (json.charCodeAt(close - 1 - backslashes) === 92) backslashes++;
      if (backslashes % 2 === 0) break;
      close = json.indexOf('"', close + 1);
    }
    strings.push(json.slice(open + 1, close));
    i = close + 1;
  }
}

/** Writes `n` as a varint into `buf` at `pos`; returns the position after it. */
function writeVarint(buf, pos, n) {
  while (n >= 0x80) {
    buf[pos++] = (n & 0x7f) | 0x80;
    n = Math.floor(n / 128);
  }
  buf[pos++] = n;
  return pos;
}

/** Whether `s` is base64 that its bytes encode back to exactly (no stray bits in its last character). */
function isCanonicalBase64(s) {
  return s.length >= 16 && BASE64_RE.test(s) && Buffer.from(s, 'base64').toString('base64') === s;
}

/**
 * Packs a `signed` entry's details (their canonical JSON). `wordId(text)` gives a word's dictionary id (adding it);
 * `signatureHex` and `digestBase64` are what the row's columns hold (undefined: none; each must encode back to
 * itself, as compactRow checks). Exact by construction: each kind of slot is taken only for strings it gives back
 * character for character (lowercase hex, canonical base64, lowercase UUIDs, words and texts as they are), and the
 * shape puts the strings back where they were; test/unit/entry-packing.test.ts round-trips every kind.
 */
function packDetails(detailsJson, wordId, signatureHex, digestBase64) {
  const { shape, strings } = splitStrings(detailsJson);
  // At most: a varint per slot and each string's bytes as UTF-8 (3 per UTF-16 unit).
  const buf = Buffer.allocUnsafe(16 + 8 * strings.length + 3 * detailsJson.length);
  let pos = writeVarint(buf, 0, wordId(shape));
  for (const s of strings) {
    if (signatureHex !== undefined && s === signatureHex) pos = writeVarint(buf, pos, SIGNATURE_COLUMN);
    else if (digestBase64 !== undefined && s === digestBase64) pos = writeVarint(buf, pos, DIGEST_COLUMN);
    else if (s.length === 36 && UUID_RE.test(s)) {
      pos = writeVarint(buf, pos, UUID);
      pos += buf.write(s.replaceAll('-', ''), pos, 'hex');
    } else if (s.length >= 16 && HEX_RE.test(s)) {
      pos = writeVarint(buf, pos, (s.length / 2) * 8 + HEX);
      pos += buf.write(s, pos, 'hex');
    } else if (isCanonicalBase64(s)) {
      const length = Buffer.byteLength(s, 'base64');
      pos = writeVarint(buf, pos, length * 8 + BASE64);
      pos += buf.write(s, pos, 'base64');
    } else if (s.length >= 20 && NAMED_HEX_RE.test(s)) {
      const colon = s.indexOf(':');
      pos = writeVarint(buf, pos, ((s.length - colon - 1) / 2) * 8 + NAMED_HEX);
      pos = writeVarint(buf, pos, wordId(s.slice(0, colon)));
      pos += buf.write(s.slice(colon + 1), pos, 'hex');
    } else if (s.length <= MAX_WORD_LENGTH) pos = writeVarint(buf, pos, wordId(s) * 8 + WORD);
    else {
      pos = writeVarint(buf, pos, Buffer.byteLength(s, 'utf8') * 8 + TEXT);
      pos += buf.write(s, pos, 'utf8');
    }
  }
  return Buffer.from(buf.subarray(0, pos));
}

/** A shape's texts between its strings, by shape: shapes are few, and a read splits each only once. */
const shapePartsCache = new Map();
const SHAPES_KEPT = 1024;

function shapeParts(shape) {
  let parts = shapePartsCache.get(shape);
  if (parts === undefined) {
    if (shapePartsCache.size >= SHAPES_KEPT) shapePartsCache.clear();
    parts = shape.split('"');
    shapePartsCache.set(shape, parts);
  }
  return parts;
}

/** The canonical JSON of packed details; `columns`: the row's signature_sha256 and digest (Buffers or null). */
function unpackDetails(packed, wordOf, columns) {
  const buf = Buffer.isBuffer(packed) ? packed : Buffer.from(packed);
  const at = { pos: 0 };
  const parts = shapeParts(wordOf(readVarint(buf, at)));
  /** The next `length` bytes as text in `encoding`. */
  const next = (encoding, length) => {
    const start = at.pos;
    at.pos += length;
    return buf.toString(encoding, start, at.pos);
  };
  let json = parts[0];
  for (let n = 1; n < parts.length; n++) {
    const x = readVarint(buf, at);
    const kind = x % 8;
    const value = Math.floor(x / 8);
    let s;
    if (kind === WORD) s = wordOf(value);
    else if (kind === HEX) s = next('hex', value);
    else if (kind === BASE64) s = next('base64', value);
    else if (kind === TEXT) s = next('utf8', value);
    else if (kind === UUID) {
      const h = next('hex', 16);
      s = `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
    } else if (kind === NAMED_HEX) {
      const name = wordOf(readVarint(buf, at));
      s = `${name}:${next('hex', value)}`;
    } else if (kind === SIGNATURE_COLUMN) s = Buffer.from(columns.signature_sha256).toString('hex');
    else if (kind === DIGEST_COLUMN) s = Buffer.from(columns.digest).toString('base64');
    else throw new Error(`packed details: unknown slot kind ${kind}`);
    if (at.pos > buf.length) throw new Error('packed details end early');
    json += `"${s}"${parts[n]}`;
  }
  if (at.pos !== buf.length) throw new Error('packed details: bytes left over');
  return json;
}

/** A stored hash as hex: 32 bytes on compact rows, hex text on rows from before migration 0032. */
function hashHex(hash) {
  return typeof hash === 'string' ? hash : Buffer.from(hash).toString('hex');
}

/**
 * Whether the row stores its entry packed (migration 0032): `details` says so, so that a row whose details were
 * overwritten with JSON is read as that JSON (and fails its hash), never from the packed bytes beside it.
 */
function isPacked(row) {
  return row.details === PACKED_DETAILS && row.packed !== null && row.packed !== undefined;
}

/**
 * A chained row (audit-hash.cjs: chainAuditRows) as SQLite stores it since migration 0032: hash as bytes, no
 * prev_hash, the details of a signature made at once packed (PACKED_ACTIONS). `details`: the entry's details object;
 * `signatureHex`: the signature's SHA-256 on the row (undefined: not known yet); `words`: the dictionary
 * (audit-words.cjs).
 */
function compactRow(row, details, signatureHex, words) {
  const compact = {
    ...row,
    prev_hash: '',
    hash: Buffer.from(row.hash, 'hex'),
    signature_sha256: signatureHex === undefined ? null : Buffer.from(signatureHex, 'hex'),
    packed: null,
    digest: null,
  };
  if (!PACKED_ACTIONS.has(row.action) || row.outcome !== 'signed' || details.batch !== undefined) return compact;
  const digest = details.hash;
  // The columns are bytes: a slot may name them only if they encode back to the very text.
  const digestBase64 = typeof digest === 'string' && isCanonicalBase64(digest) ? digest : undefined;
  const namedSignature = signatureHex !== undefined && HEX_RE.test(signatureHex) ? signatureHex : undefined;
  const packed = packDetails(row.details, (text) => words.idOf(text), namedSignature, digestBase64);
  return {
    ...compact,
    details: PACKED_DETAILS,
    packed,
    digest: digestBase64 === undefined ? null : Buffer.from(digestBase64, 'base64'),
  };
}

/**
 * A stored row as every reader sees it (AuditRow: hash and prev_hash in hex, details as their canonical JSON), given
 * the previous row's hash in hex (`prevHash`, used where the row stores none) and the dictionary's `wordOf`.
 */
function expandRow(row, prevHash, wordOf) {
  const { packed, digest, ...rest } = row;
  return {
    ...rest,
    prev_hash: row.prev_hash === '' ? prevHash : row.prev_hash,
    hash: hashHex(row.hash),
    details: isPacked(row)
      ? unpackDetails(packed, wordOf, { signature_sha256: row.signature_sha256, digest })
      : row.details,
  };
}

/** The word ids a packed row's details name (to fetch the unknown ones from audit_words before expanding). */
function wordIdsOf(row) {
  if (!isPacked(row)) return [];
  const buf = Buffer.from(row.packed);
  const at = { pos: 0 };
  const ids = [readVarint(buf, at)];
  while (at.pos < buf.length) {
    const x = readVarint(buf, at);
    const kind = x % 8;
    const value = Math.floor(x / 8);
    if (kind === WORD) ids.push(value);
    else if (kind === NAMED_HEX) {
      ids.push(readVarint(buf, at));
      at.pos += value;
    } else if (kind === UUID) at.pos += 16;
    else if (kind === HEX || kind === BASE64 || kind === TEXT) at.pos += value;
  }
  return ids;
}

module.exports = {
  PACKED_DETAILS,
  splitStrings,
  packDetails,
  unpackDetails,
  hashHex,
  isPacked,
  compactRow,
  expandRow,
  wordIdsOf,
};
