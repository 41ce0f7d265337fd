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

/** One digest's signature from the key store, not yet recorded, or why it alone failed. */
export type MadeSignature = { kind: 'made'; signature: Buffer } | { kind: 'failed'; error: unknown };

/**
 * Signs every digest at once. One that fails (the signature recorder recorded why: a sign_failed entry or the
 * outage's count) is answered with its error; the others are signed regardless, and recorded together after.
 */
export function signEach(
  digests: readonly Buffer[],
  sign: (digest: Buffer, index: number) => Promise<Buffer>,
): Promise<MadeSignature[]> {
  return Promise.all(
    digests.map(async (digest, index): Promise<MadeSignature> => {
      try {
        return { kind: 'made', signature: await sign(digest, index) };
      } catch (error) {
        return { kind: 'failed', error };
      }
    }),
  );
}
