// What one attempt's outcome does to its delivery and its subscription (docs/events.md, "Delivery"): delivered,
// retried on an exponential back-off with jitter (or the receiver's Retry-After), failed once retries would go past
// retryForMs, gone (paused without probes), and a subscription failing for pauseAfterFailingMs paused and probed.
// The dispatcher (dispatcher.ts) decides when to send; this decides what an answer means for what comes next.
import type { DeliveryClaim } from '../store/events/event-store.js';
import type { Store } from '../store/store.js';

/** What happened to one attempt (src/events/webhook-sender.ts and the mailer classify their answers so). */
export type DeliveryResult =
  | { outcome: 'delivered'; status?: number }
  | { outcome: 'retry'; status?: number; retryAfterMs?: number; error: string }
  | { outcome: 'gone'; status?: number; error: string }
  | { outcome: 'failed'; status?: number; error: string };

/** The retry and pause schedule (DispatcherSettings' part of it). */
export interface RetrySchedule {
  /** First retry delay; doubled each attempt (default 5 s). */
  retryBaseMs?: number;
  /** Longest retry delay, and longest wait between a paused subscription's probes (default 1 h). */
  retryMaxMs?: number;
  /** Retries stop this long after the event (default 24 h); the delivery is then failed. */
  retryForMs?: number;
  /** A subscription whose attempts failed for this long with no success in between is paused (default 1 h). */
  pauseAfterFailingMs?: number;
  /** Longest Retry-After honoured (default 1 h). */
  maxRetryAfterMs?: number;
}

/** Records `result` for `claim`'s delivery at `at`: delivered, retried, failed or gone, pausing its subscription if due. */
export async function recordOutcome(
  store: Store,
  settings: RetrySchedule,
  claim: DeliveryClaim,
  result: DeliveryResult,
  at: Date,
): Promise<void> {
  const events = store.events;
  const iso = at.toISOString();
  if (result.outcome === 'delivered') {
    await events.markDelivered(claim, result.status ?? null, iso);
    return;
  }
  const status = result.status ?? null;
  const error = result.error.slice(0, 1000);
  if (result.outcome === 'gone') {
    // Gone for good (Standard Webhooks: disable the endpoint): paused without probes, until a person resumes it.
    await events.markFailedAttempt(
      claim,
      { status, error, retryAt: null, pauseReason: `the receiver answered ${status ?? 410} Gone: ${error}` },
      iso,
    );
    return;
  }
  const retryAt = result.outcome === 'retry' ? retryTime(settings, claim, result.retryAfterMs, at) : null;
  const retryForMs = settings.retryForMs ?? 24 * 3600_000;
  const failingSince = claim.subscription.failingSince ?? iso;
  const probeAt = probeTime(settings, failingSince, at);
  const state = await events.markFailedAttempt(
    claim,
    {
      status,
      error,
      retryAt,
      // A paused subscription's probe failed: the next one on the back-off schedule.
      ...(claim.subscription.pausedAt !== null && { probeAt }),
      ...(retryAt === null &&
        result.outcome === 'retry' && {
          pauseReason: `deliveries kept failing for ${Math.round(retryForMs / 3600_000)} h: ${error}`,
          probeAt,
        }),
    },
    iso,
  );
  if (!state || state.pausedAt !== null) return;
  const failingMs = at.getTime() - Date.parse(state.failingSince);
  const pauseAfterMs = settings.pauseAfterFailingMs ?? 3600_000;
  if (failingMs >= pauseAfterMs) {
    await events.pauseSubscription(
      claim.subscription.id,
      `attempts failed for ${describeMs(failingMs)} without a delivery (${state.failuresInARow} in a row): ${error}`,
      iso,
      probeTime(settings, state.failingSince, at),
    );
  }
}

/**
 * When a paused subscription is probed next: after a wait as long as it has been failing, from retryBaseMs up
 * to retryMaxMs (what the doubling back-off comes to), with the same equal jitter as retries.
 */
function probeTime(settings: RetrySchedule, failingSince: string, at: Date): string {
  const base = settings.retryBaseMs ?? 5000;
  const max = settings.retryMaxMs ?? 3600_000;
  const step = Math.min(max, Math.max(base, at.getTime() - Date.parse(failingSince)));
  return new Date(at.getTime() + step / 2 + Math.random() * (step / 2)).toISOString();
}

/** Exponential backoff with jitter, or the receiver's Retry-After; null once retries would go past retryForMs. */
function retryTime(
  settings: RetrySchedule,
  claim: DeliveryClaim,
  retryAfterMs: number | undefined,
  at: Date,
): string | null {
  const base = settings.retryBaseMs ?? 5000;
  const max = settings.retryMaxMs ?? 3600_000;
  const exponential = Math.min(max, base * 2 ** Math.min(30, claim.attempts - 1));
  // "Equal jitter": at least half the delay, so retries of many deliveries spread out but never come early.
  const jittered = exponential / 2 + Math.random() * (exponential / 2);
  const honoured = retryAfterMs === undefined ? 0 : Math.min(retryAfterMs, settings.maxRetryAfterMs ?? 3600_000);
  const delay = Math.max(jittered, honoured);
  const next = at.getTime() + delay;
  if (next - Date.parse(claim.createdAt) > (settings.retryForMs ?? 24 * 3600_000)) return null;
  return new Date(next).toISOString();
}

/** A duration in words for a pause reason: "1 h", "12 min", "40 s". */
function describeMs(ms: number): string {
  if (ms >= 3600_000) return `${Math.round((ms / 3600_000) * 10) / 10} h`;
  if (ms >= 60_000) return `${Math.round(ms / 60_000)} min`;
  return `${Math.round(ms / 1000)} s`;
}
