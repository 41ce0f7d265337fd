// The events nobody's request causes, found by a sweep at the start of each dispatcher pass: waiting requests that
// expired (signature.expired), approvers' one reminder before a request expires (signature.reminder), and
// exceptions that expire within a day (exception.expiring). Each is marked in the transaction that writes its
// event, with a compare-and-set, so of several instances sweeping at once exactly one tells of it.

import type { Store } from '../store/store.js';
import type { EventBuilder } from './event-builder.js';

export interface SweepSettings {
  /** Remind approvers this long before a waiting request expires (default 1 h; 0: no reminders). */
  remindBeforeMs?: number;
  /** Warn of an exception's expiry this long before (default 24 h). */
  exceptionWarnMs?: number;
  /** Least time between two sweeps (default 15 s). */
  everyMs?: number;
}

/**
 * Expires the waiting requests whose lifetime ended before `iso` (src/signing/request-expiry.ts, on this sweep's
 * store): the signing layer's rule, handed down by app.ts since events sit below signing.
 */
export type ExpireOverdueRequests = (iso: string) => Promise<number>;

export function eventSweeps(
  store: Store,
  events: EventBuilder,
  expireOverdueRequests: ExpireOverdueRequests,
  settings: SweepSettings = {},
  now: () => Date = () => new Date(),
): () => Promise<void> {
  const everyMs = settings.everyMs ?? 15_000;
  let lastMs = Number.NEGATIVE_INFINITY;
  return async () => {
    const at = now();
    if (at.getTime() - lastMs < everyMs) return;
    lastMs = at.getTime();
    const iso = at.toISOString();
    await expireOverdueRequests(iso);
    const remindBeforeMs = settings.remindBeforeMs ?? 3600_000;
    if (remindBeforeMs > 0) {
      const before = new Date(at.getTime() + remindBeforeMs).toISOString();
      for (const request of await store.requests.listToRemind(before, 100)) {
        if (request.expiresAt <= iso) continue; // expired: told as such, not reminded of
        await store.requests.markReminded(request.id, iso, [await events.request('signature.reminder', request)]);
      }
    }
    const warnBefore = new Date(at.getTime() + (settings.exceptionWarnMs ?? 24 * 3600_000)).toISOString();
    for (const exception of await store.exceptions.listToWarn(iso, warnBefore, 100)) {
      await store.exceptions.markWarned(exception.id, iso, [await events.exception('exception.expiring', exception)]);
    }
  };
}
