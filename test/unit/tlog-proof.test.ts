// The tlog-proof@v1 reader and writer (src/transparency/verify/tlog-proof.ts): what c2sp.org/tlog-proof defines is
// read back exactly, and anything else is refused naming the line. The CLI test (test/cli/audit-log-verify.test.ts)
// checks the files it writes with a verifier of its own.
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  claimedTreeSize,
  decodeTlogProof,
  encodeTlogProof,
  TlogProofFormatError,
  tlogProofToBundle,
} from '../../src/transparency/verify/tlog-proof.js';

const hash = (s: string) => createHash('sha256').update(s).digest();
const checkpoint = `log.example/test\n12\n${hash('root').toString('base64')}\n\n— log.example/test AAAAAAAA\n`;
const proof = { index: 7, entry: Buffer.from('{"seq":8}'), proof: [hash('a'), hash('b')], checkpoint };

describe('tlog-proof@v1', () => {
  it('writes the header, extra, index, hashes, an empty line and the checkpoint verbatim; reads them back', () => {
    const text = encodeTlogProof(proof);
    expect(text).toBe(
      `c2sp.org/tlog-proof@v1\nextra ${proof.entry.toString('base64')}\nindex 7\n` +
        `${hash('a').toString('base64')}\n${hash('b').toString('base64')}\n\n${checkpoint}`,
    );
    expect(decodeTlogProof(text)).toEqual(proof);
    const bundle = tlogProofToBundle(decodeTlogProof(text));
    expect(bundle.tree_size).toBe(12);
    expect(bundle.leaf_hash).toBe(
      createHash('sha256')
        .update(Buffer.concat([Buffer.from([0]), proof.entry]))
        .digest('base64'),
    );
  });

  it('reads a proof without extra or hashes (index 0 of a tree of one)', () => {
    const bare = decodeTlogProof(`c2sp.org/tlog-proof@v1\nindex 0\n\n${checkpoint}`);
    expect(bare).toEqual({ index: 0, proof: [], checkpoint });
    expect(tlogProofToBundle(bare).entry).toBeUndefined();
  });

  it.each([
    ['another header', `c2sp.org/tlog-proof@v2\nindex 0\n\n${checkpoint}`, /first line is not c2sp.org\/tlog-proof@v1/],
    ['no empty line', 'c2sp.org/tlog-proof@v1\nindex 0\n', /no empty line/],
    ['a leading zero', `c2sp.org/tlog-proof@v1\nindex 007\n\n${checkpoint}`, /line 2 is not "index N"/],
    ['extra after index', `c2sp.org/tlog-proof@v1\nindex 1\nextra AA==\n\n${checkpoint}`, /line 3 is not a base64/],
    [
      'a short hash',
      `c2sp.org/tlog-proof@v1\nindex 1\n${hash('a').subarray(1).toString('base64')}\n\n${checkpoint}`,
      /line 3/,
    ],
    [
      'extra not base64',
      `c2sp.org/tlog-proof@v1\nextra !!\nindex 1\n\n${checkpoint}`,
      /extra line is not standard base64/,
    ],
    ['no checkpoint', 'c2sp.org/tlog-proof@v1\nindex 1\n\n', /no checkpoint/],
  ])('refuses %s', (_name, text, message) => {
    expect(() => decodeTlogProof(text)).toThrow(TlogProofFormatError);
    expect(() => decodeTlogProof(text)).toThrow(message);
  });

  it('takes the tree size from the checkpoint without trusting it yet, and refuses a checkpoint without one', () => {
    expect(claimedTreeSize(checkpoint)).toBe(12);
    expect(() => claimedTreeSize('origin\nlots\nroot\n')).toThrow(/no tree size/);
  });
});
