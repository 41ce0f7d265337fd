// Idempotent signing: a client that lost the connection before it saw the answer (the daemon, a CI script) sends
// its sign again with the same `Idempotency-Key` header and gets the first answer again, whichever instance
// answers, instead of a second signature or a second pending request. Keys are per caller and live 24 hours
// (the IETF httpapi Idempotency-Key draft's shape: same key + same request = same answer; same key + other
// request = 422; still in progress = 409 with Retry-After).
import { createHash } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import { ApiError } from '../errors.js';
import { answerIdempotently, type IdempotentRequest } from '../signing/idempotent-request.js';
import type { KeptReply, Store } from '../store/store.js';

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

/** The keys this process is answering, per store: a concurrent duplicate on the same instance gets 409. */
const inFlight = new WeakMap<Store, Set<string>>();

/**
 * Runs `answer` once per (caller, key): a replay of a request already answered gets the stored answer. Only
 * answers that hand something out (200 and 202) are kept; an error keeps nothing, so the retry runs afresh (a
 * denial is evaluated again and signs nothing).
 *
 * Issue 46: nothing is written before the answer. A signature made at once writes the record in the commit of its
 * `signed` entry (`replyOf` words the reply from the signatures: src/signing/idempotent-request.ts), so a process
 * killed before that commit leaves neither; any other answer to keep (a 202, a batch with a failed digest) is
 * written after it, on its own. A duplicate while the first is answered gets 409 from this instance; one that
 * reaches another instance meanwhile signs too, and the record keeps the answer committed first, which every later
 * retry gets (docs/api.md).
 */
export async function answerOnce(
  store: Store,
  callerId: string,
  key: string,
  request: { action: string; body: unknown },
  now: Date,
  answer: () => Promise<IdempotentReply>,
  replyOf: IdempotentRequest['replyOf'],
): Promise<IdempotentReply> {
  const fingerprint = createHash('sha256')
    .update(JSON.stringify([request.action, request.body]))
    .digest('hex');
  const lookup = {
    callerId,
    key,
    fingerprint,
    staleBefore: new Date(now.getTime() - IDEMPOTENCY_STALE_MS).toISOString(),
    expiredBefore: new Date(now.getTime() - IDEMPOTENCY_LIFETIME_MS).toISOString(),
  };
  const answering = inFlight.get(store) ?? new Set<string>();
  inFlight.set(store, answering);
  const id = `${callerId}\n${key}`;
  if (answering.has(id)) throw inUse();
  const kept = await store.idempotency.look(lookup);
  if (kept.state === 'done') return replayOf(kept);
  if (kept.state === 'mismatch') {
    throw new ApiError(
      'idempotency_key_reused',
      'this Idempotency-Key was used with a different request; use a new key',
    );
  }
  if (kept.state === 'in_progress' || answering.has(id)) throw inUse();
  const pending: IdempotentRequest = {
    record: {
      caller_id: callerId,
      idem_key: key,
      fingerprint,
      created_at: now.toISOString(),
      expired_before: lookup.expiredBefore,
      stale_before: lookup.staleBefore,
    },
    replyOf,
  };
  answering.add(id);
  let reply: IdempotentReply;
  try {
    reply = await answerIdempotently(pending, answer);
  } finally {
    answering.delete(id);
  }
  if (pending.taken === undefined) {
    // The answer exists (a pending request is already open): hand it out even if remembering it fails. A retry
    // then opens no second request either (the service finds the open one by its digest).
    await store.idempotency.remember({ ...pending.record, reply: JSON.stringify(reply) }).catch(() => undefined);
  }
  return reply;
}

function inUse(): ApiError {
  return new ApiError('idempotency_key_in_use', 'the first request with this Idempotency-Key is still being answered');
}

/**
 * A kept answer as it was first sent: a reply written in its `signed` entry's commit gets the entry's log index
 * back (the Signbridge-Log-Index of a signature, each signed item's log_index in a batch).
 */
function replayOf({ reply, logSeq }: KeptReply): IdempotentReply {
  const kept = JSON.parse(reply) as IdempotentReply;
  if (logSeq === null) return kept;
  const logIndex = logSeq - 1;
  const results = (kept.body as { results?: unknown } | null)?.results;
  if (!Array.isArray(results)) return { ...kept, logIndex };
  return {
    ...kept,
    body: {
      ...(kept.body as object),
      results: results.map((r: object) => ('signature' in r ? { ...r, log_index: logIndex } : r)),
    },
  };
}
