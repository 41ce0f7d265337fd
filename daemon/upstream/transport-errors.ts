// How a request to the service failed on the way (remote-upstream.ts): no answer in time, no connection, an answer
// too large to be one of the service's; each as the wire status the module should see.
import { WireStatus } from '../../wire/wire.js';
import { UpstreamError } from './upstream.js';

/** The largest answer read from the service; its real answers are a few KB (a public key, a certificate chain). */
export const MAX_ANSWER_BYTES = 1024 * 1024;
/** Room per digest of a sign_batch answer: its signature (ML-DSA-87: 4,627 bytes, 6.2 KB in base64) and fields. */
export const MAX_BATCH_ITEM_BYTES = 8 * 1024;
/**
 * More room per digest when the answer carries log proofs (`Prefer: wait-for-log`): the entry, the inclusion path
 * and the checkpoint with its cosignatures, a few KB each where a witness cosigns with ML-DSA.
 */
export const MAX_LOG_PROOF_BYTES = 32 * 1024;
export const DEADLINE_CODE = 'SIGNBRIDGE_DEADLINE';
const TIMEOUT_CODES = new Set([
  DEADLINE_CODE,
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'UND_ERR_CONNECT_TIMEOUT',
]);

/** An answer over its limit (read as it comes, never whole). */
export class AnswerTooLarge extends Error {
  constructor(readonly limit: number) {
    super(`answer larger than ${limit} bytes`);
  }
}

export function networkError(err: unknown, where: string, timeoutMs: number): UpstreamError {
  if (err instanceof AnswerTooLarge) {
    return new UpstreamError(WireStatus.INTERNAL, `the service at ${where} answered with more than ${err.limit} bytes`);
  }
  const e = err as Error & { code?: string };
  if (e.code !== undefined && TIMEOUT_CODES.has(e.code)) {
    return new UpstreamError(WireStatus.TIMEOUT, `the service at ${where} did not answer within ${timeoutMs} ms`);
  }
  const detail = e.code ?? e.message;
  return new UpstreamError(WireStatus.UNAVAILABLE, `cannot reach the service at ${where}: ${detail}`);
}
