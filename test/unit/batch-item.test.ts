// A batch's items (src/transparency/verify/batch-item.ts, docs/transparency.md "A batch's items"): the item leaf's
// bytes exactly as the doc lays them out, the tree the service builds (batch-tree.ts) against the independent
// RFC 9162 root, and the tlog-proof file of an item: `extra` carries the item beside the entry, read back exactly,
// its record hash still the entry's; an `extra` with an item but no entry is refused.
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { BatchTree } from '../../src/transparency/batch-tree.js';
import { batchItemLeafBytes } from '../../src/transparency/verify/batch-item.js';
import {
  decodeTlogProof,
  encodeTlogProof,
  TlogProofFormatError,
  tlogProofToBundle,
} from '../../src/transparency/verify/tlog-proof.js';
import { refLeaf, refRoot, refVerifyInclusion } from '../helpers/rfc9162-verify.js';

const hash = (s: string) => createHash('sha256').update(s).digest();

describe("a batch's items", () => {
  it('lays an item leaf out as u32 index, u8 digest length, the digest and the signature hash', () => {
    const digest = Buffer.alloc(48, 1);
    const signatureHash = Buffer.alloc(32, 2);
    const bytes = batchItemLeafBytes(258, digest, signatureHash);
    expect(bytes.subarray(0, 5).toString('hex')).toBe('0000010230');
    expect(bytes.subarray(5, 53)).toEqual(digest);
    expect(bytes.subarray(53)).toEqual(signatureHash);
    expect(bytes).toHaveLength(85);
  });

  it('builds the RFC 9162 tree over the items in index order: its root and every path check independently', () => {
    for (const size of [1, 2, 3, 7, 100]) {
      const items = Array.from({ length: size }, (_, i) => ({
        index: i * 2,
        digest: hash(`digest ${i}`),
        signatureSha256: hash(`signature ${i}`),
      }));
      const leaves = items.map((i) => refLeaf(batchItemLeafBytes(i.index, i.digest, i.signatureSha256)));
      const tree = new BatchTree(items);
      expect(tree.root()).toEqual(refRoot(leaves));
      for (let position = 0; position < size; position++) {
        expect(refVerifyInclusion(leaves[position] as Buffer, position, size, tree.proof(position), tree.root())).toBe(
          true,
        );
      }
    }
  });

  it("keeps an item in a tlog-proof's extra beside its entry, and reads it back", () => {
    const checkpoint = `log.example/test\n12\n${hash('root').toString('base64')}\n\n— log.example/test AAAAAAAA\n`;
    const batchItem = {
      index: 3,
      position: 3,
      digest: hash('d').toString('base64'),
      signature_sha256: hash('s').toString('hex'),
      proof: [hash('p').toString('base64')],
    };
    const entry = Buffer.from('{"seq":8}');
    const text = encodeTlogProof({ index: 7, entry, proof: [hash('a')], checkpoint, batchItem });
    const extra = Buffer.from(/^extra (\S+)$/m.exec(text)?.[1] as string, 'base64');
    expect(JSON.parse(extra.toString())).toEqual({ batch_item: batchItem, entry: entry.toString('base64') });
    const read = decodeTlogProof(text);
    expect(read).toEqual({ index: 7, entry, proof: [hash('a')], checkpoint, batchItem });
    // The record hash is the entry's, not the extra's.
    expect(tlogProofToBundle(read).leaf_hash).toBe(refLeaf(entry).toString('base64'));
    const noEntry = Buffer.from(JSON.stringify({ batch_item: batchItem })).toString('base64');
    expect(() => decodeTlogProof(text.replace(/^extra \S+$/m, `extra ${noEntry}`))).toThrow(TlogProofFormatError);
  });
});
