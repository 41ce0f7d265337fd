// A waiting request's expiry, one definition for both ways it happens: when somebody reads the request after its
// lifetime (SigningService) and when the event sweep finds it first (events/event-sweeps.ts, handed
// expireOverdueRequests by app.ts), so signature.expired is told when it happens. The compare-and-set on the
// request's status lets exactly one of several readers, sweeps or instances expire it, and only that one writes the
// event and the audit entry.

import type { EventBuilder } from '../events/event-builder.js';
import type { PendingRequestRecord, Store } from '../store/store.js';

/** Expires `request` if it is still in the status it was read in; false when someone else decided it meanwhile. */
export async function expireRequest(
  store: Store,
  events: EventBuilder,
  request: PendingRequestRecord,
  iso: string,
): Promise<boolean> {
  const expired = await store.requests.update(request.id, request.status, { status: 'expired', updatedAt: iso }, [
    await events.request('signature.expired', request, { status: 'expired' }),
  ]);
  if (expired) {
    await store.audit.append({
      at: iso,
      tenantId: request.tenantId,
      actor: 'service',
      action: 'approve_sign',
      outcome: 'expired',
      details: { request_id: request.id, expires_at: request.expiresAt },
    });
  }
  return expired;
}

/**
 * Expires waiting requests whose lifetime ended before `iso`, up to `limit` of them, on the store it is given (the
 * background one on PostgreSQL). Returns how many this pass expired; another instance's sweep may win some.
 */
export async function expireOverdueRequests(
  store: Store,
  events: EventBuilder,
  iso: string,
  limit = 100,
): Promise<number> {
  let expired = 0;
  for (const request of await store.requests.listWaitingExpiringBefore(iso, limit)) {
    if (await expireRequest(store, events, request, iso)) expired++;
  }
  return expired;
}
