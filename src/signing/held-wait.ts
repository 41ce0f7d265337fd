// A held request waited on within one call: the KMS and Vault transit endpoints cannot answer 202 (their clients know
// only a signature or an error), so such a call waits a bounded time for a person's decision, reading the request's
// state the way the requester's own collect does (every instance sees the decision: it is in the store). Transport-
// free; what a timeout becomes on the wire is the endpoint's (docs/kms-api.md, "Held for approval").

import { setTimeout as sleep } from 'node:timers/promises';
import type { Pending, SignOutcome } from './sign-outcome.js';

/** How often a waiting call reads its request again. */
export const HELD_POLL_MS = 500;

export interface HeldWaitOptions {
  /** The longest the call waits for a decision (0: not at all). */
  waitMs: number;
  pollMs?: number;
  /** Aborted when the client went away: waiting on would serve nobody. */
  signal?: AbortSignal;
}

/** Reads a held request's outcome as its requester collects it: one digest's (`collect`) or a batch's. */
export interface Collector<Outcome = SignOutcome> {
  collect(tenantId: string, requestId: string, digest: Buffer): Promise<Outcome | Pending>;
}

/**
 * The outcome once decided: the signature (or a batch's signatures) when approved, the error of a rejection,
 * expiry or a denial at approval (collect's errors), or the still pending outcome when `waitMs` passed first.
 */
export async function waitForDecision<Outcome = SignOutcome>(
  signing: Collector<Outcome>,
  tenantId: string,
  first: Outcome | Pending,
  digest: Buffer,
  options: HeldWaitOptions,
): Promise<Outcome | Pending> {
  let outcome = first;
  const until = Date.now() + options.waitMs;
  const poll = options.pollMs ?? HELD_POLL_MS;
  while (isPending(outcome)) {
    const left = until - Date.now();
    if (left <= 0 || options.signal?.aborted) return outcome;
    try {
      await sleep(Math.min(poll, left), undefined, options.signal ? { signal: options.signal } : {});
    } catch {
      return outcome; // aborted
    }
    outcome = await signing.collect(tenantId, outcome.requestId, digest);
  }
  return outcome;
}

function isPending(outcome: unknown): outcome is Pending {
  return (outcome as { kind?: string }).kind === 'pending';
}
