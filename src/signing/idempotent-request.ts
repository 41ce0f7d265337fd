// The request with an Idempotency-Key being answered (src/api/idempotency.ts), as the signature recorder sees it: a
// request that signs at once writes its idempotency record in the commit of its `signed` entry (migration 0033,
// issue 46), instead of a claim and an answer of their own. The door sets it around its answer and words the reply;
// the recorder, several calls below, takes it for the one entry that answers the request. Async context rather than
// a parameter: it only rides from the door to the recorder, and no layer between does anything with it.
import { AsyncLocalStorage } from 'node:async_hooks';
import type { IdempotencyRecordRow } from '../store/store.js';
import type { Signed } from './sign-outcome.js';

export interface IdempotentRequest {
  /** The record as the commit writes it, less its reply. */
  record: Omit<IdempotencyRecordRow, 'reply'>;
  /**
   * The door's reply (JSON) for the signatures a `signed` entry records, without their log index (the commit
   * assigns it: sign_idempotency.log_seq); undefined where the reply needs more than them (a batch with a digest that
   * failed), whose record the door then writes on its own.
   */
  replyOf: (signed: readonly Signed[], batchId: string | undefined) => string | undefined;
  /** The reply a `signed` entry's write took, once one did: at most one entry answers a request. */
  taken?: string;
}

const answering = new AsyncLocalStorage<IdempotentRequest>();

/** Runs the door's answer with `request` as the request being answered. */
export function answerIdempotently<T>(request: IdempotentRequest, answer: () => Promise<T>): Promise<T> {
  return answering.run(request, answer);
}

/** Whether the request being answered has an Idempotency-Key (its entry then waits for its signature). */
export function answeringIdempotently(): boolean {
  return answering.getStore() !== undefined;
}

/**
 * The idempotency record to write with the `signed` entry of these signatures, taken by the first such entry of the
 * request being answered; undefined without an Idempotency-Key, after another entry took it, or when the door
 * cannot word its reply from them.
 */
export function idempotencyRecordOf(signed: readonly Signed[], batchId?: string): IdempotencyRecordRow | undefined {
  const request = answering.getStore();
  if (request === undefined || request.taken !== undefined) return undefined;
  const reply = request.replyOf(signed, batchId);
  if (reply === undefined) return undefined;
  request.taken = reply;
  return { ...request.record, reply };
}
