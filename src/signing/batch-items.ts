// What a batch's digests share wherever they are signed: at once (batch-signer.ts) or at the approval of the one
// request that held them (approvals.ts).
import { createHash } from 'node:crypto';
import type { Signed } from './sign-outcome.js';

/** One digest's outcome: its signature, or why it alone failed after the batch was allowed. */
export type BatchItem = { kind: 'signed'; signed: Signed } | { kind: 'failed'; error: unknown };

/**
 * The batch's own digest: SHA-256 over its digests in order. It names a held batch's request (its `hash`), so a
 * retry of the same batch continues that request and a collection must bring the same digests in the same order.
 */
export function batchDigest(digests: readonly Buffer[]): Buffer {
  const hash = createHash('sha256');
  for (const digest of digests) hash.update(digest);
  return hash.digest();
}
