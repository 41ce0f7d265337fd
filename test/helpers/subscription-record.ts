// A webhook subscription record as the store keeps it, for tests and benches that write subscriptions straight into
// the store (the service makes them through src/events/subscription-service.ts). Only what a test cares about is
// given; the rest is a fresh, unpaused, never-failed subscription.
import type { SubscriptionRecord } from '../../src/store/events/event-store.js';

export const TEST_WEBHOOK_SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';

export function subscriptionRecord(
  s: Pick<SubscriptionRecord, 'id' | 'tenantId'> & Partial<SubscriptionRecord>,
): SubscriptionRecord {
  return {
    url: `https://hooks.example/${s.id}`,
    format: 'standard',
    eventKinds: null,
    secret: TEST_WEBHOOK_SECRET,
    createdAt: new Date().toISOString(),
    createdBy: 'test',
    pausedAt: null,
    pauseReason: null,
    lastError: null,
    lastErrorAt: null,
    lastDeliveredAt: null,
    failuresInARow: 0,
    ...s,
  };
}
