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

function hashOf(prevHash, fields) {
  return createHash('sha256')
    .update(`${prevHash}\n${canonicalJson(fields)}`)
    .digest('hex');
}

function entryHash(seq, prevHash, e) {
  return hashOf(prevHash, hashedFields(seq, e));
}

/** The audit_log rows for `entries`, chained on the log's current head (undefined: the log is empty). */
function chainAuditRows(head, entries) {
  let seq = Number(head?.seq ?? 0);
  let prev = head?.hash ?? GENESIS_HASH;
  return entries.map((e) => {
    seq++;
    const fields = hashedFields(seq, e);
    const hash = hashOf(prev, fields);
    const row = { ...fields, details: JSON.stringify(e.details), prev_hash: prev, hash };
    prev = hash;
    return row;
  });
}

module.exports = { GENESIS_HASH, canonicalJson, entryHash, chainAuditRows };
