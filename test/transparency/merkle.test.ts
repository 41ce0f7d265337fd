// The tree and its proofs against an independent RFC 9162 implementation written in the test helper
// (test/helpers/rfc9162-verify.ts), for trees of 1, 2, 3, 2^k and 2^k+1 entries and ranges of sizes; then the same
// answers from tiles across tile boundaries (255, 256, 257, 65,537 leaves).
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { entryHash, entryHashOfLeaf, leafBytes, leafJson } from '../../src/store/audit/audit-chain.js';
import { consistencyProof, inclusionProof, type NodeSource, rootAt } from '../../src/transparency/merkle.js';
import { appendLeaves, edgeTiles, TileNodeSource, tileId, tilesNeeded } from '../../src/transparency/tiles.js';
import { EMPTY_ROOT, leafHash, verifyConsistency, verifyInclusion } from '../../src/transparency/verify/merkle.js';
import { refLeaf, refNode, refRoot, refVerifyConsistency, refVerifyInclusion } from '../helpers/rfc9162-verify.js';

const entries = (n: number) => Array.from({ length: n }, (_, i) => Buffer.from(`entry ${i}`));

/** Every complete node computed naively: what the tiles must agree with. */
function naiveSource(leaves: Buffer[]): NodeSource {
  return { node: (level, index) => refRoot(leaves.slice(index * 2 ** level, (index + 1) * 2 ** level)) };
}

/** Builds tiles by appending `leaves` in batches of the given sizes, as the integrator does. */
function buildTiles(leaves: Buffer[], batches: number[]): Map<string, Buffer> {
  const tiles = new Map<string, Buffer>();
  let size = 0;
  let b = 0;
  while (size < leaves.length) {
    const n = Math.min(batches[b++ % batches.length] as number, leaves.length - size);
    const edge = new Map(edgeTiles(size).map((k) => [tileId(k.level, k.index), tiles.get(tileId(k.level, k.index))]));
    for (const t of appendLeaves(size, edge as Map<string, Buffer>, leaves.slice(size, size + n))) {
      const existing = tiles.get(tileId(t.level, t.index));
      // A full tile never changes once written.
      if (existing?.length === 8192) expect(existing.equals(t.hashes)).toBe(true);
      tiles.set(tileId(t.level, t.index), t.hashes);
    }
    size += n;
  }
  return tiles;
}

describe('leaf bytes', () => {
  it("are the audit chain's canonical JSON of the entry, and give the same chain hash", () => {
    const e = {
      at: '2026-11-26T00:00:00.000Z',
      tenantId: 'acme',
      actor: 'key_1',
      action: 'sign',
      outcome: 'signed',
      details: { z: 1, a: [{ y: 'é', b: null }] },
    };
    const bytes = leafBytes(7, e);
    expect(bytes.toString()).toBe(
      '{"action":"sign","actor":"key_1","at":"2026-11-26T00:00:00.000Z","details":{"a":[{"b":null,"y":"é"}],"z":1},' +
        '"outcome":"signed","seq":7,"tenant_id":"acme"}',
    );
    expect(leafJson(7, e)).toBe(bytes.toString('utf8'));
    expect(entryHashOfLeaf('ab'.repeat(32), leafJson(7, e))).toBe(entryHash(7, 'ab'.repeat(32), e));
    // The chain hash as the docs define it, computed here: SHA-256 over `prev_hash \n canonical JSON`, hex.
    expect(entryHash(7, 'ab'.repeat(32), e)).toBe(
      createHash('sha256')
        .update(`${'ab'.repeat(32)}\n${bytes.toString('utf8')}`)
        .digest('hex'),
    );
  });
});

describe('RFC 9162 hashing', () => {
  it('hashes leaves and nodes with the 0x00 / 0x01 prefixes; the empty tree is SHA-256("")', () => {
    expect(leafHash(Buffer.from('x')).equals(refLeaf(Buffer.from('x')))).toBe(true);
    expect(EMPTY_ROOT.toString('hex')).toBe('e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
    const l = entries(3).map(leafHash);
    expect(rootAt(naiveSource(l), 3).equals(refNode(refNode(l[0] as Buffer, l[1] as Buffer), l[2] as Buffer))).toBe(
      true,
    );
  });

  for (const n of [1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 32, 33]) {
    it(`tree of ${n}: every inclusion proof and every consistency proof verifies independently`, () => {
      const leaves = entries(n).map(leafHash);
      const src = naiveSource(leaves);
      const roots = Array.from({ length: n + 1 }, (_, s) => refRoot(leaves.slice(0, s)));
      expect(rootAt(src, n).equals(roots[n] as Buffer)).toBe(true);
      for (let size = 1; size <= n; size++) {
        for (let i = 0; i < size; i++) {
          const proof = inclusionProof(src, i, size);
          expect(refVerifyInclusion(leaves[i] as Buffer, i, size, proof, roots[size] as Buffer)).toBe(true);
          expect(verifyInclusion(i, size, leaves[i] as Buffer, proof, roots[size] as Buffer)).toBe(true);
          // The wrong leaf, or the right one at the wrong place, fails.
          const other = leaves[(i + 1) % size] as Buffer;
          if (size > 1) expect(refVerifyInclusion(other, i, size, proof, roots[size] as Buffer)).toBe(false);
        }
        for (let m = 1; m <= size; m++) {
          const proof = consistencyProof(src, m, size);
          expect(refVerifyConsistency(m, size, roots[m] as Buffer, roots[size] as Buffer, proof)).toBe(true);
          expect(verifyConsistency(m, size, roots[m] as Buffer, roots[size] as Buffer, proof)).toBe(true);
          if (m < size) {
            // A forged old root (another history) fails both verifiers.
            const forged = refLeaf(Buffer.from('forged'));
            expect(refVerifyConsistency(m, size, forged, roots[size] as Buffer, proof)).toBe(false);
            expect(verifyConsistency(m, size, forged, roots[size] as Buffer, proof)).toBe(false);
          }
        }
      }
    });
  }

  it('refuses proofs for leaves outside the tree', () => {
    const src = naiveSource(entries(3).map(leafHash));
    expect(() => inclusionProof(src, 3, 3)).toThrow(RangeError);
    expect(() => consistencyProof(src, 4, 3)).toThrow(RangeError);
  });
});

describe('tiles', () => {
  for (const n of [255, 256, 257, 511, 65_537]) {
    it(`${n} leaves: tiles give the same roots and proofs as the naive tree`, () => {
      const leaves = entries(n).map(leafHash);
      // Odd batch sizes so that tiles fill up in the middle of a batch and across batches.
      const tiles = buildTiles(leaves, n > 1000 ? [4093, 1, 300] : [1, 7, 100, 3]);
      const fromTiles = new TileNodeSource(tiles);
      const sizes = n > 1000 ? [1, 255, 256, 257, 65_535, 65_536, 65_537] : [1, 2, 255, Math.min(256, n), n];
      const roots = new Map(sizes.map((s) => [s, refRoot(leaves.slice(0, s))]));
      for (const size of sizes) {
        expect(rootAt(fromTiles, size).equals(roots.get(size) as Buffer)).toBe(true);
        for (const i of [0, size >> 1, size - 1]) {
          const proof = inclusionProof(fromTiles, i, size);
          expect(refVerifyInclusion(leaves[i] as Buffer, i, size, proof, roots.get(size) as Buffer)).toBe(true);
        }
        for (const m of sizes.filter((s) => s <= size)) {
          const proof = consistencyProof(fromTiles, m, size);
          expect(
            refVerifyConsistency(m, size, roots.get(m) as Buffer, roots.get(size) as Buffer, proof),
            `${m} -> ${size}`,
          ).toBe(true);
        }
      }
      if (n === 65_537) {
        // Level 0: 256 full tiles and one of width 1; level 1: one full tile; level 2: one hash.
        expect(tiles.get('0/256')?.length).toBe(32);
        expect(tiles.get('1/0')?.length).toBe(8192);
        expect(tiles.get('2/0')?.length).toBe(32);
        // A proof reads few tiles.
        expect(tilesNeeded((src) => inclusionProof(src, 12_345, n)).length).toBeLessThanOrEqual(5);
      }
    });
  }
});
