// An RFC 9162 Merkle tree written from the RFC's recursive definitions (§2.1.1 MTH, §2.1.3.1 PATH, §2.1.4.1
// PROOF/SUBPROOF), for tests of the log's verifier and its commands: it shares nothing with
// src/transparency/verify/ (iterative algorithms over bit patterns), so an error in one is not repeated in the other.
// Quadratic and slow on purpose: clarity over speed, trees of at most a few hundred leaves.
import { createHash } from 'node:crypto';

export const sha256 = (...parts: Buffer[]) => createHash('sha256').update(Buffer.concat(parts)).digest();
export const hashLeaf = (d: Buffer) => sha256(Buffer.from([0]), d);
export const hashNode = (l: Buffer, r: Buffer) => sha256(Buffer.from([1]), l, r);

/** The largest power of two smaller than n (n > 1). */
function split(n: number): number {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}

/** MTH(D[n]). */
export function mth(d: Buffer[]): Buffer {
  if (d.length === 0) return sha256();
  if (d.length === 1) return hashLeaf(d[0] as Buffer);
  const k = split(d.length);
  return hashNode(mth(d.slice(0, k)), mth(d.slice(k)));
}

/** PATH(m, D[n]): the inclusion proof of leaf m. */
export function inclusionPath(m: number, d: Buffer[]): Buffer[] {
  if (d.length === 1) return [];
  const k = split(d.length);
  return m < k
    ? [...inclusionPath(m, d.slice(0, k)), mth(d.slice(k))]
    : [...inclusionPath(m - k, d.slice(k)), mth(d.slice(0, k))];
}

/** PROOF(m, D[n]): the consistency proof from the first m leaves to all of d (0 < m <= n). */
export function consistencyProof(m: number, d: Buffer[]): Buffer[] {
  return subproof(m, d, true);
}

function subproof(m: number, d: Buffer[], b: boolean): Buffer[] {
  const n = d.length;
  if (m === n) return b ? [] : [mth(d)];
  const k = split(n);
  return m <= k
    ? [...subproof(m, d.slice(0, k), b), mth(d.slice(k))]
    : [...subproof(m - k, d.slice(k), false), mth(d.slice(0, k))];
}
