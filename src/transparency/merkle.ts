// RFC 9162 §2.1 Merkle tree proofs as the log hands them out; the hashing and the checking of a proof are the
// client's (verify/merkle.ts), which the log uses as they are. The tree is never held whole: proofs and roots are
// computed from the hashes of complete, aligned subtrees that a NodeSource hands out (tiles.ts reads them from
// stored tiles), so a proof at 1M entries touches ~20 nodes instead of 2M.
import { EMPTY_ROOT, isPowerOfTwo, nodeHash } from './verify/merkle.js';

/**
 * Hashes of complete subtrees: node(level, index) is the root over leaves [index·2^level, (index+1)·2^level).
 * Only subtrees that are complete in the tree being asked about are ever requested.
 */
export interface NodeSource {
  node(level: number, index: number): Buffer;
}

/** The largest power of two strictly below n (n ≥ 2): RFC 9162's split point k. */
export function splitPoint(n: number): number {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}

/**
 * MTH(D[start:end]) per RFC 9162 §2.1.1. In the recursions below every range whose size is a power of two starts at
 * a multiple of its size (the split keeps them aligned), so it is one stored node.
 */
export function subtreeHash(src: NodeSource, start: number, end: number): Buffer {
  const n = end - start;
  if (n <= 0) return EMPTY_ROOT;
  if (isPowerOfTwo(BigInt(n)) && start % n === 0) return src.node(Math.log2(n), start / n);
  const k = splitPoint(n);
  return nodeHash(subtreeHash(src, start, start + k), subtreeHash(src, start + k, end));
}

/** The root of the tree of the first `size` leaves. */
export function rootAt(src: NodeSource, size: number): Buffer {
  return subtreeHash(src, 0, size);
}

/** The audit path of leaf `index` in the tree of `size` leaves (RFC 9162 §2.1.3.1), deepest sibling first. */
export function inclusionProof(src: NodeSource, index: number, size: number): Buffer[] {
  if (!(index >= 0 && index < size)) throw new RangeError(`leaf ${index} is not in a tree of ${size}`);
  const out: Buffer[] = [];
  const path = (m: number, start: number, end: number): void => {
    const n = end - start;
    if (n === 1) return;
    const k = splitPoint(n);
    if (m < k) {
      path(m, start, start + k);
      out.push(subtreeHash(src, start + k, end));
    } else {
      path(m - k, start + k, end);
      out.push(subtreeHash(src, start, start + k));
    }
  };
  path(index, 0, size);
  return out;
}

/** The consistency proof from size m to size n (RFC 9162 §2.1.4.1); empty when m is 0 or m = n. */
export function consistencyProof(src: NodeSource, m: number, n: number): Buffer[] {
  if (!(m >= 0 && m <= n)) throw new RangeError(`no consistency proof from ${m} to ${n}`);
  if (m === 0 || m === n) return [];
  const out: Buffer[] = [];
  const sub = (mm: number, start: number, end: number, whole: boolean): void => {
    const size = end - start;
    if (mm === size) {
      if (!whole) out.push(subtreeHash(src, start, end));
      return;
    }
    const k = splitPoint(size);
    if (mm <= k) {
      sub(mm, start, start + k, whole);
      out.push(subtreeHash(src, start + k, end));
    } else {
      sub(mm - k, start + k, end, false);
      out.push(subtreeHash(src, start, start + k));
    }
  };
  sub(m, 0, n, true);
  return out;
}
