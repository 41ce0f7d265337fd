// The transparency-log verifier (src/transparency/verify/) against an RFC 9162 tree written for the tests from the
// RFC's recursive definitions (test/helpers/rfc9162-tree.ts), which shares nothing with the verifier's iterative
// algorithms: every correct proof of trees of 1, 2, 3, 2^k and 2^k+1 leaves is accepted, and every proof with one
// bit flipped, two hashes swapped, a hash dropped or added, or the wrong index is refused. Signed notes against published vectors (golang.org/x/mod sumdb/note's Ed25519 example, the ECDSA
// checkpoints of transparency-dev/witness's note tests) and a node:crypto key; the strict parsing rules.
import { createHash, generateKeyPairSync, type KeyObject, sign } from 'node:crypto';
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { checkEntryFor } from '../../src/transparency/verify/artifact-match.js';
import { CheckpointError, openCheckpoint, parseCheckpointText } from '../../src/transparency/verify/checkpoint.js';
import { canonicalJson, parseLeafEntry } from '../../src/transparency/verify/entry.js';
import { InclusionError, verifyInclusionBundle } from '../../src/transparency/verify/inclusion-bundle.js';
import { leafHash, verifyConsistency, verifyInclusion } from '../../src/transparency/verify/merkle.js';
import { NoteError, parseSignedNote, parseVerifierKey, verifyNote } from '../../src/transparency/verify/note.js';
import { consistencyProof, hashLeaf, hashNode, inclusionPath, mth, sha256 } from '../helpers/rfc9162-tree.js';

// ---- The independent tree (test/helpers/rfc9162-tree.ts) ----

const H_LEAF = hashLeaf;
const H_NODE = hashNode;
const path = inclusionPath;
const proof = consistencyProof;

const leaves = (n: number) => Array.from({ length: n }, (_, i) => Buffer.from(`leaf ${i}`));
const flip = (h: Buffer, bit: number) => {
  const c = Buffer.from(h);
  c[bit >> 3] = (c[bit >> 3] as number) ^ (1 << (bit & 7));
  return c;
};
/** Every bit of every hash when `all`, else a few per hash (first, last, middle): the big trees stay fast. */
const bitsToFlip = (all: boolean) => (all ? Array.from({ length: 256 }, (_, i) => i) : [0, 7, 128, 255]);

const SIZES = [1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 32, 33];

describe('RFC 9162 inclusion', () => {
  it('the independent tree agrees with a known root (RFC 6962 test leaves are not needed: MTH({}) is SHA-256(""))', () => {
    expect(mth([]).toString('hex')).toBe('e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
    expect(mth([Buffer.alloc(0)]).toString('hex')).toBe(
      '6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d',
    );
  });

  for (const n of SIZES) {
    it(`tree of ${n}: every correct proof verifies, every changed one is refused`, () => {
      const d = leaves(n);
      const root = mth(d);
      for (let m = 0; m < n; m++) {
        const leaf = H_LEAF(d[m] as Buffer);
        const p = path(m, d);
        expect(verifyInclusion(m, n, leaf, p, root), `index ${m}`).toBe(true);
        expect(leafHash(d[m] as Buffer).equals(leaf)).toBe(true);
        // Wrong index, wrong tree size, wrong leaf, wrong root.
        for (let other = 0; other < n + 2; other++) {
          if (other !== m) expect(verifyInclusion(other, n, leaf, p, root), `index ${other} for ${m}`).toBe(false);
        }
        // (A wrong tree size alone can give the same shape and so the same root: the signed checkpoint binds the
        // size to the root, and the bundle test below refuses a proof whose size is not the checkpoint's.)
        expect(verifyInclusion(m, n, H_LEAF(Buffer.from('another')), p, root)).toBe(false);
        expect(verifyInclusion(m, n, leaf, p, mth(leaves(n + 1)))).toBe(false);
        for (const bit of bitsToFlip(n <= 17)) {
          expect(verifyInclusion(m, n, flip(leaf, bit), p, root)).toBe(false);
          expect(verifyInclusion(m, n, leaf, p, flip(root, bit))).toBe(false);
          for (let i = 0; i < p.length; i++) {
            const bad = [...p];
            bad[i] = flip(p[i] as Buffer, bit);
            expect(verifyInclusion(m, n, leaf, bad, root), `bit ${bit} of hash ${i}`).toBe(false);
          }
        }
        for (let i = 0; i + 1 < p.length; i++) {
          const swapped = [...p];
          [swapped[i], swapped[i + 1]] = [p[i + 1] as Buffer, p[i] as Buffer];
          expect(verifyInclusion(m, n, leaf, swapped, root)).toBe(false);
        }
        if (p.length > 0) expect(verifyInclusion(m, n, leaf, p.slice(0, -1), root)).toBe(false);
        expect(verifyInclusion(m, n, leaf, [...p, root], root)).toBe(false);
        expect(verifyInclusion(m, n, leaf, [...p, Buffer.alloc(32)], root)).toBe(false);
      }
    });
  }

  it('refuses malformed input rather than throwing', () => {
    const d = leaves(5);
    const root = mth(d);
    const leaf = H_LEAF(d[2] as Buffer);
    const p = path(2, d);
    expect(verifyInclusion(-1, 5, leaf, p, root)).toBe(false);
    expect(verifyInclusion(2.5, 5, leaf, p, root)).toBe(false);
    expect(verifyInclusion(2, 0, leaf, p, root)).toBe(false);
    expect(verifyInclusion(2, 5, leaf.subarray(1), p, root)).toBe(false);
    expect(verifyInclusion(2, 5, leaf, [...p.slice(0, -1), Buffer.alloc(31)], root)).toBe(false);
    expect(verifyInclusion(2, 5, leaf, Array(65).fill(root), root)).toBe(false);
  });

  it('works past 2^31 leaves (no 32-bit shifts): the last leaf of a tree of 2^33 + 1', () => {
    // The tree of 2^33 + 1 leaves is the full tree of 2^33 and one leaf: the last leaf's path is that full root.
    const full = Buffer.alloc(32, 7);
    const last = H_LEAF(Buffer.from('last'));
    const n = 2 ** 33 + 1;
    expect(verifyInclusion(n - 1, n, last, [full], H_NODE(full, last))).toBe(true);
    expect(verifyInclusion(n - 2, n, last, [full], H_NODE(full, last))).toBe(false);
  });
});

describe('RFC 9162 consistency', () => {
  for (const n of SIZES) {
    it(`tree of ${n}: every correct proof from every smaller size verifies, every changed one is refused`, () => {
      const d = leaves(n);
      const root2 = mth(d);
      for (let m = 0; m <= n; m++) {
        const root1 = mth(d.slice(0, m));
        const p = m === 0 ? [] : proof(m, d);
        expect(verifyConsistency(m, n, root1, root2, p), `${m} -> ${n}`).toBe(true);
        if (m === 0) continue;
        if (m < n) {
          expect(verifyConsistency(m, n, root1, mth(leaves(n + 1)), p)).toBe(false);
          expect(verifyConsistency(m, n, mth(d.slice(0, m - 1)), root2, p)).toBe(false);
          expect(verifyConsistency(m, n, root1, root2, [])).toBe(false);
          expect(verifyConsistency(m, n, root1, root2, p.slice(0, -1))).toBe(false);
          expect(verifyConsistency(m, n, root1, root2, [...p, root2])).toBe(false);
          if (m > 1) expect(verifyConsistency(m - 1, n, root1, root2, p)).toBe(false);
          if (m + 1 < n) expect(verifyConsistency(m + 1, n, root1, root2, p)).toBe(false);
        }
        // A tree the first one is not a prefix of: its last leaf changed.
        const rewritten = [...d.slice(0, m - 1), Buffer.from('rewritten'), ...d.slice(m)];
        expect(verifyConsistency(m, n, root1, mth(rewritten), p)).toBe(false);
        for (const bit of bitsToFlip(n <= 9)) {
          expect(verifyConsistency(m, n, flip(root1, bit), root2, p)).toBe(false);
          expect(verifyConsistency(m, n, root1, flip(root2, bit), p)).toBe(false);
          for (let i = 0; i < p.length; i++) {
            const bad = [...p];
            bad[i] = flip(p[i] as Buffer, bit);
            expect(verifyConsistency(m, n, root1, root2, bad), `${m} -> ${n}: bit ${bit} of hash ${i}`).toBe(false);
          }
        }
        for (let i = 0; i + 1 < p.length; i++) {
          if ((p[i] as Buffer).equals(p[i + 1] as Buffer)) continue;
          const swapped = [...p];
          [swapped[i], swapped[i + 1]] = [p[i + 1] as Buffer, p[i] as Buffer];
          expect(verifyConsistency(m, n, root1, root2, swapped)).toBe(false);
        }
      }
    });
  }

  it('equal sizes need equal roots and no proof; a bigger first tree is refused', () => {
    const r = mth(leaves(3));
    expect(verifyConsistency(3, 3, r, r, [])).toBe(true);
    expect(verifyConsistency(3, 3, r, mth(leaves(4)), [])).toBe(false);
    expect(verifyConsistency(3, 3, r, r, [r])).toBe(false);
    expect(verifyConsistency(4, 3, mth(leaves(4)), r, proof(3, leaves(4)))).toBe(false);
    expect(verifyConsistency(0, 3, sha256(), r, [r])).toBe(false);
  });
});

// ---- Signed notes and checkpoints ----

/** golang.org/x/mod sumdb/note's example (Ed25519, type 0x01). */
const PETER_VKEY = 'PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW';
const PETER_TEXT =
  "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n";
const PETER_NOTE = `${PETER_TEXT}\n— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n`;
/** transparency-dev/witness internal/note/note_verifier_test.go: ECDSA (type 0x02) keys and checkpoints. */
const REKOR_VKEY =
  'rekor.sigstore.dev+c0d23d6a+AjBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABNhtmPtrWm3U1eQXBogSMdGvXwBcK5AW5i0hrZLOC96l+smGNM7nwZ4QvFK/4sueRoVj//QP22Ni4Qt9DPfkWLc=';
const REKOR_NOTE =
  'Rekor\n798034\nf+7CoKgXKE/tNys9TTXcr/ad6U/K3xvznmzew9y6SP0=\n\n— rekor.sigstore.dev wNI9ajBEAiARInWIWyCdyG27CO6LPnPekyw20qO0YJfoaPaowGp/XgIgc+qEHS3+GKVClgqq20uDLet7MCoTURUCRdxwWBHHufk=\n';
const PIXEL_VKEY =
  'pixel6_transparency_log+91c16e30+AjBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABN+4x0Jk1yTwvLFI9A4NDdGZcX0aiWVdWM5XJVy0M4VWD3AvyW5Q6Hs9A0mcDkpUoYgn+KKPNzFC0H3nN3q6JQ8=';
const PIXEL_NOTE =
  'DEFAULT\n10\nbsWRucJU5xJPHb5eBdOm6+DM+VelCZBuvtI3sHERJ9Y=\n\n— pixel6_transparency_log kcFuMDBFAiEAhqMAP8P6qf6QxtUJhzMhbN+MbZ9dwfUHzGQJmffJHtoCIGD0cNe47dHWBoPwYdgBCepB06/+g5O1FmYjXl06owL4\n';

/** A log key as the service's contract has it: ECDSA P-256, key ID = SHA-256(DER SPKI)[:4], DER signatures. */
function ecdsaLog(origin: string) {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const spki = publicKey.export({ format: 'der', type: 'spki' });
  const id = createHash('sha256').update(spki).digest().subarray(0, 4);
  const vkey = `${origin}+${id.toString('hex')}+${Buffer.concat([Buffer.from([2]), spki]).toString('base64')}`;
  const signLine = (text: string, key: KeyObject = privateKey, name = origin) =>
    `— ${name} ${Buffer.concat([id, sign('sha256', Buffer.from(text), { key, dsaEncoding: 'der' })]).toString('base64')}\n`;
  const note = (text: string) => `${text}\n${signLine(text)}`;
  return { vkey, id, note, signLine, privateKey };
}

describe('signed notes', () => {
  it('verifies the published Ed25519 and ECDSA vectors', () => {
    expect(verifyNote(PETER_NOTE, parseVerifierKey(PETER_VKEY))).toBe(PETER_TEXT);
    expect(verifyNote(REKOR_NOTE, parseVerifierKey(REKOR_VKEY))).toBe(
      'Rekor\n798034\nf+7CoKgXKE/tNys9TTXcr/ad6U/K3xvznmzew9y6SP0=\n',
    );
    expect(verifyNote(PIXEL_NOTE, parseVerifierKey(PIXEL_VKEY))).toMatch(/^DEFAULT\n10\n/);
    // A changed text, another key of the same type.
    expect(() => verifyNote(PETER_NOTE.replace('cryptography', 'cryptographY'), parseVerifierKey(PETER_VKEY))).toThrow(
      NoteError,
    );
    expect(() => verifyNote(REKOR_NOTE.replace('798034', '798035'), parseVerifierKey(REKOR_VKEY))).toThrow(NoteError);
    expect(() => verifyNote(REKOR_NOTE, parseVerifierKey(PIXEL_VKEY))).toThrow(/not signed by pixel6/);
  });

  it('a checkpoint whose origin is not the key name is refused (the witness vectors are such notes)', () => {
    expect(() => openCheckpoint(REKOR_NOTE, parseVerifierKey(REKOR_VKEY))).toThrow(/origin "Rekor"/);
  });

  it('reads vkeys strictly: key ID, type, name, base64', () => {
    const good = parseVerifierKey(REKOR_VKEY);
    expect(good.name).toBe('rekor.sigstore.dev');
    expect(good.keyId).toBe(0xc0d23d6a);
    expect(() => parseVerifierKey(REKOR_VKEY.replace('c0d23d6a', '00000000'))).toThrow(/does not match/);
    expect(() => parseVerifierKey(REKOR_VKEY.replace('+c0d23d6a+', '+c0d23d6+'))).toThrow(/8 hex/);
    expect(() => parseVerifierKey('rekor.sigstore.dev+12345678+AwEB')).toThrow(/type 0x03/);
    expect(() => parseVerifierKey('rekor.sigstore.dev+12344556')).toThrow(NoteError);
    expect(() => parseVerifierKey(`${REKOR_VKEY.slice(0, -2)}=`)).toThrow(NoteError);
    expect(() => parseVerifierKey(`bad name${REKOR_VKEY.slice('rekor.sigstore.dev'.length)}`)).toThrow(/key name/);
    // Every truncation of a vkey is refused.
    for (let i = 1; i < PETER_VKEY.length; i++) expect(() => parseVerifierKey(PETER_VKEY.slice(0, i))).toThrow();
  });

  it('accepts the ECDSA P-256 log key of the contract, and ignores other keys’ lines', () => {
    const log = ecdsaLog('example.com/signbridge-log');
    const other = ecdsaLog('example.com/signbridge-log');
    const key = parseVerifierKey(log.vkey);
    const text = `example.com/signbridge-log\n3\n${mth(leaves(3)).toString('base64')}\n`;
    expect(verifyNote(log.note(text), key)).toBe(text);
    // A witness's line before it and an unknown key with the same name: ignored.
    const cosigned = `${text}\n${other.signLine(text)}— witness.example ${Buffer.alloc(40, 1).toString('base64')}\n${log.signLine(text)}`;
    expect(verifyNote(cosigned, key)).toBe(text);
    // Signed only by another key of the same name: not this log's.
    expect(() => verifyNote(other.note(text), key)).toThrow(/not signed by/);
    // A line with this key's name and ID whose signature fails rejects the note, even beside a good one.
    const forged = `${text}\n${log.signLine(text)}${log.signLine(text, other.privateKey)}`;
    expect(() => verifyNote(forged, key)).toThrow(/does not verify/);
    const cp = openCheckpoint(log.note(text), key);
    expect(cp.size).toBe(3);
    expect(cp.root.equals(mth(leaves(3)))).toBe(true);
  });

  it('parses notes strictly', () => {
    const log = ecdsaLog('o');
    const text = 'o\n1\n' + 'A'.repeat(43) + '=\n';
    const good = log.note(text);
    expect(parseSignedNote(good).signatures).toHaveLength(1);
    const bad = [
      good.replace('\n\n', '\n'), // no blank line
      good.slice(0, -1), // no final newline
      good.replace('— ', '- '), // not an em dash
      good.replace('— o ', '— o  '), // two spaces
      good.replace('— o ', '—  '), // no name
      good.replace('o\n1', 'o\t\n1'), // control character
      good.replace('o\n1', 'o\r\n1'),
      `${good}— o AAAA\n`, // a signature shorter than key ID + 1 byte
      `${good}— o AAAAAA==x\n`, // not base64
      `${good}— o+x AAAAAAA=\n`, // a plus in the name
    ];
    for (const note of bad) expect(() => parseSignedNote(note), JSON.stringify(note)).toThrow(NoteError);
    expect(() => parseSignedNote(Buffer.concat([Buffer.from(good), Buffer.from([0xff])]))).toThrow(/UTF-8/);
    const many = `${text}\n${log.signLine(text).repeat(17)}`;
    expect(() => parseSignedNote(many)).toThrow(/more than 16/);
    expect(parseSignedNote(`${text}\n${log.signLine(text).repeat(16)}`).signatures).toHaveLength(16);
    expect(() => parseSignedNote(`${'x'.repeat(200_000)}\n\n${log.signLine(text)}`)).toThrow(/bytes/);
  });

  it('parses checkpoint text strictly', () => {
    const root = Buffer.alloc(32, 9).toString('base64');
    expect(parseCheckpointText(`o\n0\n${sha256().toString('base64')}\n`).size).toBe(0);
    expect(() => parseCheckpointText(`o\n0\n${root}\n`)).toThrow(/size 0/);
    expect(parseCheckpointText(`o\n12\n${root}\next one\n`).extensions).toEqual(['ext one']);
    for (const text of [
      `o\n012\n${root}\n`, // leading zero
      `o\n+12\n${root}\n`,
      `o\n1e3\n${root}\n`,
      `o\n 12\n${root}\n`,
      `o\n99999999999999999999\n${root}\n`,
      `o\n12\n${root.slice(0, -4)}\n`, // 29 bytes
      `o\n12\n${Buffer.alloc(33).toString('base64')}\n`,
      `o\n12\n${root}`, // no final newline
      `o\n12\n`, // no root
      `\n12\n${root}\n`, // empty origin
      `o\n12\n${root}\n\next\n`, // empty extension line
    ]) {
      expect(() => parseCheckpointText(text), JSON.stringify(text)).toThrow(CheckpointError);
    }
  });
});

// ---- Leaves: the audit entry's canonical JSON ----

const require = createRequire(import.meta.url);
const auditHash = require('../../src/store/audit/audit-hash.cjs') as { canonicalJson: (v: unknown) => string };

const ENTRY = {
  seq: 5,
  at: '2026-11-26T12:00:00.000Z',
  tenant_id: 'acme',
  actor: 'key_1',
  action: 'sign',
  outcome: 'signed',
  details: {
    key_id: 'k1',
    hash: Buffer.alloc(32, 1).toString('base64'),
    signature_sha256: 'ab'.repeat(32),
    z: [1, { b: 2, a: 'é' }],
  },
};

describe('leaf entries', () => {
  it('canonical JSON is the hash chain’s (audit-hash.cjs)', () => {
    for (const v of [
      ENTRY,
      { b: null, a: [true, 1.5, 'x\u2028"'], c: { e: undefined, d: -0 } },
      'plain',
      3,
      null,
      [],
      // The quirks both must share: items JSON cannot show, key order by UTF-16 code units, escaped keys.
      [undefined, 1, () => 0, [], {}],
      // biome-ignore lint/suspicious/noSparseArray: a hole must come out as the item form leaves it
      [1, , 3],
      { z: 1, Z: 2, é: 3, '\u{1F600}': 4, '\uFFFF': 5, '"q\n': 6, a: { y: [{ b: undefined, a: 1e21 }] } },
      { '': 0, nested: { deeper: { list: [null, false, 'ü'] } } },
    ]) {
      expect(canonicalJson(v)).toBe(auditHash.canonicalJson(v));
    }
  });

  it('reads only canonical audit entries', () => {
    const bytes = Buffer.from(canonicalJson(ENTRY));
    expect(parseLeafEntry(bytes)).toMatchObject({ seq: 5, tenantId: 'acme', outcome: 'signed' });
    expect(parseLeafEntry(Buffer.from(canonicalJson({ ...ENTRY, tenant_id: null }))).tenantId).toBeNull();
    for (const text of [
      JSON.stringify(ENTRY), // keys not sorted
      canonicalJson(ENTRY).replace('"action":"sign"', '"action":"sign","action":"sign"'), // a duplicated key
      canonicalJson({ ...ENTRY, extra: 1 }),
      canonicalJson({ ...ENTRY, seq: 0 }),
      canonicalJson({ ...ENTRY, details: [] }),
      canonicalJson({ ...ENTRY, actor: 7 }),
      `${canonicalJson(ENTRY)} `,
    ]) {
      expect(() => parseLeafEntry(Buffer.from(text)), text).toThrow();
    }
  });

  it('ties an entry to a tenant, a digest or a signature', () => {
    const entry = parseLeafEntry(Buffer.from(canonicalJson(ENTRY)));
    expect(() => checkEntryFor(entry, { tenant: 'acme', digest: ENTRY.details.hash })).not.toThrow();
    expect(() => checkEntryFor(entry, { tenant: 'acme', signatureSha256s: ['AB'.repeat(32)] })).not.toThrow();
    expect(() => checkEntryFor(entry, { tenant: 'other' })).toThrow(/not other's/);
    expect(() => checkEntryFor(entry, { digest: Buffer.alloc(32, 2).toString('base64') })).toThrow(/digest/);
    expect(() => checkEntryFor(entry, { signatureSha256s: ['cd'.repeat(32)] })).toThrow(/names signature/);
    const denied = parseLeafEntry(Buffer.from(canonicalJson({ ...ENTRY, outcome: 'denied' })));
    expect(() => checkEntryFor(denied, { digest: ENTRY.details.hash })).toThrow(/not a signature/);
  });
});

describe('inclusion bundles', () => {
  const log = ecdsaLog('example.com/log');
  const key = parseVerifierKey(log.vkey);
  const entries = Array.from({ length: 6 }, (_, i) => Buffer.from(canonicalJson({ ...ENTRY, seq: i + 1 })));
  const checkpoint = (n: number, root = mth(entries.slice(0, n))) =>
    log.note(`example.com/log\n${n}\n${root.toString('base64')}\n`);
  const bundle = (index: number, n: number) => ({
    index,
    tree_size: n,
    leaf_hash: H_LEAF(entries[index] as Buffer).toString('base64'),
    entry: (entries[index] as Buffer).toString('base64'),
    proof: path(index, entries.slice(0, n)).map((h) => h.toString('base64')),
    checkpoint: checkpoint(n),
  });

  it('verifies a correct bundle and names what is wrong with a changed one', () => {
    expect(verifyInclusionBundle(bundle(3, 6), key).entry.seq).toBe(4);
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ entry: Buffer.from(canonicalJson({ ...ENTRY, seq: 4, tenant_id: 'evil' })).toString('base64') }, /changed/],
      [{ index: 2 }, /does not lead/],
      [{ tree_size: 5 }, /tree size 6, the proof of 5/],
      [{ checkpoint: checkpoint(6, Buffer.alloc(32)) }, /does not lead/],
      [
        { checkpoint: ecdsaLog('example.com/log').note(`example.com/log\n6\n${mth(entries).toString('base64')}\n`) },
        /not signed/,
      ],
      [{ entry: undefined }, /no entry/],
    ];
    for (const [change, message] of cases) {
      expect(() => verifyInclusionBundle({ ...bundle(3, 6), ...change } as never, key), message.source).toThrow(
        message,
      );
    }
    // A leaf whose seq does not fit its index (a proof for another position) is refused too.
    const wrongSeq = Buffer.from(canonicalJson({ ...ENTRY, seq: 9 }));
    const moved = [...entries.slice(0, 3), wrongSeq, ...entries.slice(4)];
    const b = {
      ...bundle(3, 6),
      entry: wrongSeq.toString('base64'),
      leaf_hash: H_LEAF(wrongSeq).toString('base64'),
      proof: path(3, moved).map((h) => h.toString('base64')),
      checkpoint: checkpoint(6, mth(moved)),
    };
    expect(() => verifyInclusionBundle(b, key)).toThrow(InclusionError);
    expect(() => verifyInclusionBundle(b, key)).toThrow(/seq is 9/);
  });
});
