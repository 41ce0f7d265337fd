// The audit log's hash chain, the part that computes: canonical JSON, entry hashes and the rows a batch of entries
// becomes on the log's head. Plain CommonJS so that the store's writer thread (sqlite-writer.cjs) chains entries
// with the very code the stores and `admin audit verify` use (audit-chain.ts gives it its types).
'use strict';
const crypto = require('node:crypto');

/**
 * SHA-256 of a string, hex. crypto.hash (Node 20.12+, 21.7+) is the one-shot form, about twice as fast for an
 * entry's few hundred bytes as createHash, and this runs for every entry appended and integrated.
 */
const sha256Hex =
  typeof crypto.hash === 'function'
    ? (text) => crypto.hash('sha256', text, 'hex')
    : (text) => crypto.createHash('sha256').update(text).digest('hex');

const GENESIS_HASH = '0'.repeat(64);

/**
 * Canonical JSON: object keys sorted at every level, so the hash does not depend on key order. Written as loops
 * over strings: it runs for every entry the chain appends and the log integrates, and the Object.entries / filter /
 * sort / map / join form spent most of its time allocating arrays. Same output as that form (which
 * src/transparency/verify/entry.ts keeps, and test/unit/transparency-verify.test.ts compares), including its
 * quirks: an array item JSON cannot show leaves its slot empty, an object's undefined members are left out.
 */
function canonicalJson(value) {
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) {
    let out = '[';
    for (let i = 0; i < value.length; i++) {
      if (i > 0) out += ',';
      const item = canonicalJson(value[i]);
      if (item !== undefined) out += item;
    }
    return `${out}]`;
  }
  // Default sort: UTF-16 code unit order, as a < b compares strings.
  const keys = Object.keys(value).sort();
  let out = '{';
  let first = true;
  for (const key of keys) {
    const member = value[key];
    if (member === undefined) continue;
    out += `${first ? '' : ','}${JSON.stringify(key)}:${canonicalJson(member)}`;
    first = false;
  }
  return `${out}}`;
}

/** What an entry's hash covers, besides its predecessor's hash: these fields, as canonical JSON. */
function hashedFields(seq, e) {
  return {
    seq,
    at: e.at,
    tenant_id: e.tenantId,
    actor: e.actor,
    action: e.action,
    outcome: e.outcome,
    details: e.details,
  };
}

/**
 * An entry's text in the transparency log (src/transparency): the very canonical JSON the chain hashes; its leaf is
 * this text in UTF-8. One definition, so a leaf and a chain link always cover the same fields.
 */
function leafJson(seq, e) {
  return canonicalJson(hashedFields(seq, e));
}

/** leafJson as the leaf's bytes. */
function leafBytes(seq, e) {
  return Buffer.from(leafJson(seq, e), 'utf8');
}

/**
 * An entry's chain hash from its leafJson: the same SHA-256 over `prev_hash \n canonical JSON` as hashOf, for the
 * transparency log's integrator, which has the text already (one canonical JSON per entry instead of two).
 */
function entryHashOfLeaf(prevHash, json) {
  return sha256Hex(`${prevHash}\n${json}`);
}

function hashOf(prevHash, fields) {
  return sha256Hex(`${prevHash}\n${canonicalJson(fields)}`);
}

function entryHash(seq, prevHash, e) {
  return hashOf(prevHash, hashedFields(seq, e));
}

/**
 * The canonical JSON of the hashed fields up to seq's value, from the fields' texts: `details` is already canonical
 * JSON, the other four are strings. The fields sort action, actor, at, details, outcome, seq, tenant_id, so seq and
 * tenant_id come last. Built by concatenation: the generic canonicalJson over the whole entry cost the chain's
 * appender and the log's integrator most of their time.
 */
function headOfTexts(action, actor, at, detailsJson, outcome) {
  return `{"action":${JSON.stringify(action)},"actor":${JSON.stringify(actor)},"at":${JSON.stringify(at)},"details":${detailsJson},"outcome":${JSON.stringify(outcome)},"seq":`;
}

/** What follows seq's value; canonicalJson leaves out a field that is undefined, so this does too. */
function tailOf(tenantId) {
  return tenantId === undefined ? '}' : `,"tenant_id":${canonicalJson(tenantId)}}`;
}

/**
 * An entry's canonical JSON around its seq: `before + seq + after` is canonicalJson(hashedFields(seq, e)). The chain
 * is appended from these parts, here and in PostgreSQL's group-commit function (migration 0013), which learns the
 * seq only once it holds the chain's lock: one definition of what is hashed, tested against canonicalJson.
 * `detailsJson` is canonicalJson(e.details) when the caller has it already.
 */
function entryHashParts(e, detailsJson = canonicalJson(e.details)) {
  const texts = [e.action, e.actor, e.at, e.outcome];
  if (detailsJson !== undefined && texts.every((t) => typeof t === 'string')) {
    return { before: headOfTexts(e.action, e.actor, e.at, detailsJson, e.outcome), after: tailOf(e.tenantId) };
  }
  // Anything else (no caller passes it, but canonicalJson defines the hash for every value): the generic form.
  const { seq: _seq, tenant_id, ...rest } = hashedFields(0, e);
  const head = canonicalJson(rest);
  return { before: `${head.slice(0, -1)}${head === '{}' ? '' : ','}"seq":`, after: tailOf(tenant_id) };
}

/**
 * The leaf JSON of a stored row, by concatenation (no JSON.parse, no canonicalJson): right when the row's details
 * text is canonical, as the chain stores it since details went in as canonical JSON. The log's integrator takes it
 * only when it hashes to the row's chain hash, so it is then exactly the text the chain hashed when the entry was
 * written; for older rows (details as JSON.stringify left them) it falls back to leafJson over the parsed row.
 */
function leafJsonOfRow(row) {
  return `${headOfTexts(row.action, row.actor, row.at, row.details, row.outcome)}${row.seq}${tailOf(row.tenant_id)}`;
}

/** An entry's hash from its parts: SHA-256 over `prev_hash \n canonical JSON`, hex. */
function hashFromParts(prevHash, seq, parts) {
  return sha256Hex(`${prevHash}\n${parts.before}${seq}${parts.after}`);
}

/** The audit_log rows for `entries`, chained on the log's current head (undefined: the log is empty). */
function chainAuditRows(head, entries) {
  let seq = Number(head?.seq ?? 0);
  let prev = head?.hash ?? GENESIS_HASH;
  return entries.map((e) => {
    seq++;
    const { columns, parts } = entryTexts(e);
    const hash = hashFromParts(prev, seq, parts);
    const row = { seq, ...columns, prev_hash: prev, hash };
    prev = hash;
    return row;
  });
}

/**
 * An entry's audit_log columns besides seq and the hashes, and its hash parts. Details are stored as their canonical
 * JSON, computed once for both (so the integrator can rebuild the leaf from the row's texts: leafJsonOfRow).
 */
function entryTexts(e) {
  const details = canonicalJson(e.details);
  const { seq: _seq, ...fields } = hashedFields(0, e);
  return { columns: { ...fields, details }, parts: entryHashParts(e, details) };
}

module.exports = {
  GENESIS_HASH,
  canonicalJson,
  entryHash,
  leafBytes,
  leafJson,
  entryHashOfLeaf,
  entryHashParts,
  leafJsonOfRow,
  entryTexts,
  chainAuditRows,
};
