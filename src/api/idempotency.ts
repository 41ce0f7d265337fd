// Idempotent signing: a client that lost the connection before it saw the answer (the daemon, a CI script) sends
// its sign again with the same `Idempotency-Key` header and gets the first answer again, whichever instance
// answers, instead of a second signature or a second pending request. Keys are per caller and live 24 hours
// (the IETF httpapi Idempotency-Key draft's shape: same key + same request = same answer; same key + other
// request = 422; still in progress = 409 with Retry-After).
import { createHash } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import { ApiError } from '../errors.js';
import type { Store } from '../store/store.js';

export interface IdempotentReply {
  status: number;
  body: unknown;
  /** Signbridge-Log-Index of a signature handed out: kept so that a replay sends it again. */
  logIndex?: number;
}

const KEY_PATTERN = /^[\x21-\x7e]{1,255}$/;
/** How long a key is remembered. */
export const IDEMPOTENCY_LIFETIME_MS = 24 * 3600 * 1000;
/** A claim not finished after this was left by a process that died: a retry may take it over. */
export const IDEMPOTENCY_STALE_MS = 2 * 60 * 1000;

/** The request's Idempotency-Key, checked; undefined when it has none. */
export function idempotencyKeyOf(request: FastifyRequest): string | undefined {
  const raw = request.headers['idempotency-key'];
  if (raw === undefined) return undefined;
  const key = Array.isArray(raw) ? raw[0] : raw;
  if (key === undefined || !KEY_PATTERN.test(key)) {
    throw new ApiError('invalid_request', 'Idempotency-Key must be 1 to 255 printable ASCII characters, no spaces');
  }
  return key;
}

/**
 * Runs `answer` once per (caller, key): a replay of a request already answered gets the stored answer. Only
 * answers that hand something out (200 and 202) are kept; an error releases the key, so the retry runs afresh (a
 * denial is evaluated again and signs nothing).
 */
export async function answerOnce(
  store: Store,
  callerId: string,
  key: string,
  request: { action: string; body: unknown },
  now: Date,
  answer: () => Promise<IdempotentReply>,
): Promise<IdempotentReply> {
  const fingerprint = createHash('sha256')
    .update(JSON.stringify([request.action, request.body]))
    .digest('hex');
  const claim = await store.idempotency.claim({
    callerId,
    key,
    fingerprint,
    at: now.toISOString(),
    staleBefore: new Date(now.getTime() - IDEMPOTENCY_STALE_MS).toISOString(),
    expiredBefore: new Date(now.getTime() - IDEMPOTENCY_LIFETIME_MS).toISOString(),
  });
  if (claim.state === 'done') return JSON.parse(claim.reply) as IdempotentReply;
  if (claim.state === 'mismatch') {
    throw new ApiError(
      'idempotency_key_reused',
      'this Idempotency-Key was used with a different request; use a new key',
    );
  }
  if (claim.state === 'in_progress') {
    throw new ApiError('idempotency_key_in_use', 'the first request with this Idempotency-Key is still being answered');
  }
  let reply: IdempotentReply;
  try {
    reply = await answer();
  } catch (err) {
    await store.idempotency.release(callerId, key).catch(() => undefined);
    throw err;
  }
  // The answer exists (a signature is already recorded): hand it out even if remembering it fails. A retry then
  // finds the key in progress (409) until it goes stale, rather than losing this answer now.
  await store.idempotency
    .complete(callerId, key, JSON.stringify(reply), new Date().toISOString())
    .catch(() => undefined);
  return reply;
}
