// An independent RFC 9162 §2.1 implementation for the transparency-log tests: written from the RFC, sharing no code
// with src/transparency, so that a shared mistake cannot make a wrong proof pass. Deliberately naive: whole-tree
// recursion for roots, and verifiers that rebuild the roots top-down from the proof's last element.
import { createHash } from 'node:crypto';

const sha256 = (...parts: Uint8Array[]) => {
  const h = createHash('sha256');
  for (const p of parts) h.update(p);
  return h.digest();
};

export const refLeaf = (entry: Uint8Array) => sha256(Buffer.from([0]), entry);
export const refNode = (l: Uint8Array, r: Uint8Array) => sha256(Buffer.from([1]), l, r);

/** k: the largest power of two smaller than n. */
function split(n: number): number {
  let k = 1;
  while (k << 1 < n) k <<= 1;
  return k;
}

/** MTH(D[n]) straight from the definition, over leaf hashes. */
export function refRoot(leaves: Buffer[]): Buffer {
  if (leaves.length === 0) return sha256();
  if (leaves.length === 1) return leaves[0] as Buffer;
  const k = split(leaves.length);
  return refNode(refRoot(leaves.slice(0, k)), refRoot(leaves.slice(k)));
}

/** Inclusion: the proof's last hash is the sibling at the top split; walk down to the leaf, hash back up. */
export function refVerifyInclusion(leaf: Buffer, index: number, size: number, proof: Buffer[], root: Buffer): boolean {
  if (index < 0 || index >= size) return false;
  const rest = [...proof];
  const walk = (i: number, n: number): Buffer | undefined => {
    if (n === 1) return leaf;
    const k = split(n);
    const sibling = rest.pop();
    if (!sibling) return undefined;
    const below = i < k ? walk(i, k) : walk(i - k, n - k);
    if (!below) return undefined;
    return i < k ? refNode(below, sibling) : refNode(sibling, below);
  };
  const got = walk(index, size);
  return rest.length === 0 && got !== undefined && got.equals(root);
}

/** Consistency m → n: rebuild the old and the new root from the proof, mirroring SUBPROOF from its end. */
export function refVerifyConsistency(m: number, n: number, oldRoot: Buffer, newRoot: Buffer, proof: Buffer[]): boolean {
  if (m === n) return proof.length === 0 && oldRoot.equals(newRoot);
  if (m <= 0 || m > n) return false;
  const rest = [...proof];
  const rebuild = (mm: number, nn: number, whole: boolean): [Buffer, Buffer] | undefined => {
    if (mm === nn) {
      if (whole) return [oldRoot, oldRoot];
      const x = rest.pop();
      return x ? [x, x] : undefined;
    }
    const k = split(nn);
    const sibling = rest.pop();
    if (!sibling) return undefined;
    if (mm <= k) {
      const r = rebuild(mm, k, whole);
      return r && [r[0], refNode(r[1], sibling)];
    }
    const r = rebuild(mm - k, nn - k, false);
    return r && [refNode(sibling, r[0]), refNode(sibling, r[1])];
  };
  const got = rebuild(m, n, true);
  return rest.length === 0 && got !== undefined && got[0].equals(oldRoot) && got[1].equals(newRoot);
}
