// The CI token exchange's per-address limit. The exchange has two doors, POST /oauth/token (RFC 8693) and STS's
// AssumeRoleWithWebIdentity, and one allowance: a job that switches protocol gets no second one. Both doors count
// here, under the one counter `tokenExchange` (src/store/records/counter-names.ts), each answering in its own shape.
import { counterKey } from '../store/records/counter-names.js';
import type { Store } from '../store/store.js';

export interface ExchangeLimit {
  max: number;
  windowMs: number;
}

/** workload.exchangeLimit's default: 60 exchanges a minute per client address. */
export const DEFAULT_EXCHANGE_LIMIT: ExchangeLimit = { max: 60, windowMs: 60_000 };

/**
 * Counts one exchange asked for by `address`. Over the limit: the seconds until the address's window ends (at
 * least 1); else undefined.
 */
export async function countTokenExchange(
  store: Store,
  address: string,
  limit: ExchangeLimit,
  nowMs: number,
): Promise<number | undefined> {
  const { count, windowStartMs } = await store.requestCounts.count(
    counterKey('tokenExchange', address),
    nowMs,
    limit.windowMs,
  );
  if (count <= limit.max) return undefined;
  return Math.max(1, Math.ceil((windowStartMs + limit.windowMs - nowMs) / 1000));
}
