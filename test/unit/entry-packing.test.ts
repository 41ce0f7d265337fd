// How an audit entry is stored apart from what is hashed (migration 0032, src/store/audit/entry-packing.cjs): packed
// details unpack to the very canonical JSON that was hashed, for every kind of `signed` entry's details and every
// optional field; a compact row expands to the row every reader knew, hashes, prev_hash and all.
import { describe, expect, it } from 'vitest';
import { canonicalJson, chainAuditRows } from '../../src/store/audit/audit-chain.js';
import { entryPacking } from '../../src/store/audit/audit-rows.js';

/** An in-memory dictionary (audit-words.cjs keeps it in audit_words). */
function memoryWords() {
  const texts: string[] = [];
  return {
    texts,
    idOf: (text: string) => {
      const at = texts.indexOf(text);
      if (at >= 0) return at + 1;
      texts.push(text);
      return texts.length;
    },
    textOf: (id: number) => {
      const text = texts[id - 1];
      if (text === undefined) throw new Error(`no word ${id}`);
      return text;
    },
  };
}

const digest = Buffer.alloc(32, 7).toString('base64');
const signatureHex = Buffer.alloc(32, 9).toString('hex');
const base = {
  key_id: 'k_0123456789abcdef',
  key_store: 'pkcs11',
  algorithm: 'ECDSA_SHA_256',
  hash: digest,
  rule: 'default-allow',
  reason: 'no rule denied the request',
  inputs_digest: `sha256:${Buffer.alloc(32, 3).toString('hex')}`,
  signature_id: '0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b',
};

/** The details of each kind of `signed` entry: each door, held-then-approved, and odd values JSON can hold. */
const DETAILS: Record<string, Record<string, unknown>> = {
  'sign (/v1)': { ...base, via: { door: 'v1', action: 'sign' }, signature_sha256: signatureHex },
  'written ahead (no signature hash yet)': { ...base, via: { door: 'v1', action: 'pkcs11_sign' } },
  'KMS Sign': { ...base, via: { door: 'kms', operation: 'Sign', key_arn: 'arn:aws:kms:eu-west-1:1:key/abc' } },
  'Vault transit': { ...base, via: { door: 'vault', mount: 'transit' }, signature_sha256: signatureHex },
  'approved after being held': {
    ...base,
    request_id: 'req_5b1f0e',
    approvals: [{ by: 'person:alice', at: '2026-12-06T10:00:00.000Z' }],
    event_inputs: { sbom: { components: 3 }, labels: ['a', 'b'] },
    signature_sha256: signatureHex,
  },
  'pure Ed25519 (SHA-512 of the message)': { ...base, hash: Buffer.alloc(64, 1).toString('base64') },
  'strings JSON escapes, non-ASCII, long text': {
    ...base,
    reason: 'quote " backslash \\ newline \n tab \t control \u0001 ünïcødé 🎉 \u2028',
    note: 'x'.repeat(2000),
    empty: '',
    numbers: [0, -1, 1.5, 1e21, null, true, false],
    hexlike: 'ABCDEF0123456789abcdef', // upper case: not lowercase hex, kept as a word
    odd_base64: 'YWJj', // too short for bytes
    stray_bits_base64: 'AAAAAAAAAAAAAAB=', // decodes, but its bytes encode to another text: kept as a word
    not_uuid: '0190A1B2-C3D4-7E5F-8A9B-0C1D2E3F4A5B',
    plain_hex: Buffer.alloc(20, 5).toString('hex'),
    named_odd: 'sha256:abc', // odd hex: kept as a word
    long_word: 'w'.repeat(129),
  },
  'no strings at all': { n: 1, list: [1, 2, [3, {}]] },
  'empty details': {},
};

describe('packed details', () => {
  it.each(Object.entries(DETAILS))('%s unpack to the canonical JSON that was hashed', (_kind, details) => {
    const words = memoryWords();
    const json = canonicalJson(details);
    const withSignature = details.signature_sha256 === signatureHex ? signatureHex : undefined;
    const withDigest = typeof details.hash === 'string' ? details.hash : undefined;
    const packed = entryPacking.packDetails(json, words.idOf, withSignature, withDigest);
    expect(packed).toBeInstanceOf(Buffer);
    const columns = {
      signature_sha256: withSignature ? Buffer.from(withSignature, 'hex') : null,
      digest: withDigest ? Buffer.from(withDigest, 'base64') : null,
    };
    expect(entryPacking.unpackDetails(packed as Buffer, words.textOf, columns)).toBe(json);
  });

  it('is much smaller than the JSON for a signature made at once, its words written once for all entries', () => {
    const words = memoryWords();
    const details = DETAILS['sign (/v1)'] as Record<string, unknown>;
    const json = canonicalJson(details);
    const packed = entryPacking.packDetails(json, words.idOf, signatureHex, digest) as Buffer;
    // The inputs digest (32 bytes) and the signature id (16) are the entry's own; the rest are words' ids.
    expect(packed.length).toBeLessThan(100);
    expect(json.length).toBeGreaterThan(400);
    const wordsAfterFirst = words.texts.length;
    const again = entryPacking.packDetails(
      canonicalJson({ ...details, signature_id: '0190a1b2-c3d4-7e5f-8a9b-ffffffffffff' }),
      words.idOf,
      signatureHex,
      digest,
    );
    expect(again?.length).toBe(packed.length);
    expect(words.texts.length).toBe(wordsAfterFirst); // the second entry adds no word: its own parts are bytes
  });

  it('fails loudly on bytes that are no packed details, never returns another text', () => {
    const words = memoryWords();
    words.idOf('{"a":"}');
    expect(() => entryPacking.unpackDetails(Buffer.from([1, 0x80]), words.textOf, {})).toThrow();
    expect(() => entryPacking.unpackDetails(Buffer.from([1, 9 * 8 + 1]), words.textOf, {})).toThrow(/left over|end/);
  });
});

describe('compact rows', () => {
  it('expand to the rows chainAuditRows made: hashes in hex, prev_hash from the row before, details rebuilt', () => {
    const words = memoryWords();
    const entries = Object.values(DETAILS).map((details, i) => ({
      at: new Date(1_700_000_000_000 + i).toISOString(),
      tenantId: i % 3 ? 'acme' : null,
      actor: 'ci',
      action: 'sign',
      outcome: i === 2 ? 'sign_failed' : 'signed',
      details,
    }));
    entries.push({ ...(entries[0] as (typeof entries)[0]), details: { ...base, batch: { root: 'ab'.repeat(32) } } });
    const rows = chainAuditRows(undefined, entries);
    const stored = rows.map((row, i) => {
      const details = entries[i]?.details as Record<string, unknown>;
      const sig = details.signature_sha256 === signatureHex ? signatureHex : undefined;
      return entryPacking.compactRow(row, details, sig, words);
    });
    // Signed entries packed (a batch's entry and a sign_failed one left as JSON), every hash 32 bytes, no prev_hash.
    expect(stored.map((r) => r.details === entryPacking.PACKED_DETAILS)).toEqual(
      entries.map((e) => e.outcome === 'signed' && e.details.batch === undefined),
    );
    for (const r of stored) {
      expect(r.hash).toHaveLength(32);
      expect(r.prev_hash).toBe('');
    }
    const expanded = stored.map((r, i) =>
      entryPacking.expandRow(r, (rows[i - 1]?.hash ?? '0'.repeat(64)) as string, words.textOf),
    );
    expect(expanded.map(({ signature_sha256: _s, ...r }) => r)).toEqual(rows);
  });

  it('reads a row whose details were overwritten with JSON as that JSON, not from its packed bytes', () => {
    const words = memoryWords();
    const [row] = chainAuditRows(undefined, [
      {
        at: 'now',
        tenantId: 't',
        actor: 'a',
        action: 'sign',
        outcome: 'signed',
        details: DETAILS['sign (/v1)'] as Record<string, unknown>,
      },
    ]);
    const stored = entryPacking.compactRow(
      row as never,
      DETAILS['sign (/v1)'] as Record<string, unknown>,
      signatureHex,
      words,
    );
    const tampered = { ...stored, details: '{"hash":"forged"}' };
    expect(entryPacking.expandRow(tampered, '0'.repeat(64), words.textOf).details).toBe('{"hash":"forged"}');
  });
});
