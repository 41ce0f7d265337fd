// The audit log's hash chain, the part that computes: canonical JSON, entry hashes and the rows a batch of entries
// becomes on the log's head. Plain CommonJS so that the store's writer thread (sqlite-writer.cjs) chains entries
// with the very code the stores and `admin audit verify` use (audit-chain.ts gives it its types).
'use strict';
const { createHash } = require('node:crypto');

const GENESIS_HASH = '0'.repeat(64);

/** Canonical JSON: object keys sorted at every level, so the hash does not depend on key order. */
function canonicalJson(value) {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
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
 * An entry's bytes in the transparency log (src/transparency): the very canonical JSON the chain hashes, UTF-8.
 * One definition, so a leaf and a chain link always cover the same fields.
 */
function leafBytes(seq, e) {
  return Buffer.from(canonicalJson(hashedFields(seq, e)), 'utf8');
}

/**
 * An entry's chain hash from its leaf bytes: the same SHA-256 over `prev_hash \n canonical JSON` as hashOf, for the
 * transparency log's integrator, which has the bytes already (one canonical JSON per entry instead of two).
 */
function entryHashOfLeaf(prevHash, bytes) {
  return createHash('sha256').update(`${prevHash}\n`).update(bytes).digest('hex');
}

function hashOf(prevHash, fields) {
  return createHash('sha256')
    .update(`${prevHash}\n${canonicalJson(fields)}`)
    .digest('hex');
}

function entryHash(seq, prevHash, e) {
  return hashOf(prevHash, hashedFields(seq, e));
}

/**
 * An entry's canonical JSON around its seq: `before + seq + after` is canonicalJson(hashedFields(seq, e)), because
 * seq and tenant_id sort last among the hashed fields. The chain is appended from these parts, here and in
 * PostgreSQL's group-commit function (migration 0013), which learns the seq only once it holds the chain's lock:
 * one definition of what is hashed, tested against canonicalJson.
 */
function entryHashParts(e) {
  const { seq: _seq, tenant_id, ...rest } = hashedFields(0, e);
  const head = canonicalJson(rest);
  return {
    before: `${head.slice(0, -1)}${head === '{}' ? '' : ','}"seq":`,
    // canonicalJson leaves out a field that is undefined; the split must too.
    after: tenant_id === undefined ? '}' : `,"tenant_id":${canonicalJson(tenant_id)}}`,
  };
}

/** An entry's hash from its parts: SHA-256 over `prev_hash \n canonical JSON`, hex. */
function hashFromParts(prevHash, seq, parts) {
  return createHash('sha256').update(`${prevHash}\n${parts.before}${seq}${parts.after}`).digest('hex');
}

/** The audit_log rows for `entries`, chained on the log's current head (undefined: the log is empty). */
function chainAuditRows(head, entries) {
  let seq = Number(head?.seq ?? 0);
  let prev = head?.hash ?? GENESIS_HASH;
  return entries.map((e) => {
    seq++;
    const hash = hashFromParts(prev, seq, entryHashParts(e));
    const row = { seq, ...auditColumns(e), prev_hash: prev, hash };
    prev = hash;
    return row;
  });
}

/** An entry's audit_log columns besides seq and the hashes (details as JSON text). */
function auditColumns(e) {
  const { seq: _seq, ...fields } = hashedFields(0, e);
  return { ...fields, details: JSON.stringify(e.details) };
}

module.exports = {
  GENESIS_HASH,
  canonicalJson,
  entryHash,
  leafBytes,
  entryHashOfLeaf,
  entryHashParts,
  auditColumns,
  chainAuditRows,
};
