// Migration 0021 (issue 31) on a database written by the version before it: a subscription that the old
// dispatcher paused for failing too many attempts in a row is probed by the new one (its next probe is due at
// once, and its failing streak starts where its errors did), while one paused for another reason (410 Gone, a
// person) stays paused until a person resumes it. The rows are written as the old dispatcher wrote them (its pause
// reasons, word for word from the old code); on SQLite, and on PostgreSQL when the run has a cluster.
import { describe, expect, it } from 'vitest';
import { migrateTo, oldVersionBackends } from '../helpers/old-version-database.js';

const BEFORE = '0020_workload_token_rules';
const PAUSED_AT = '2026-11-20T10:00:00.000Z';
const FIRST_ERROR_AT = '2026-11-20T09:00:00.000Z';

const subscription = (id: string, pauseReason: string | null, failures: number) => ({
  id,
  tenant_id: 'acme',
  url: `https://hooks.example.test/${id}`,
  format: 'standard',
  event_kinds: null,
  secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
  created_at: '2026-11-01T00:00:00.000Z',
  created_by: 'cli:root',
  paused_at: pauseReason ? PAUSED_AT : null,
  pause_reason: pauseReason,
  last_error: failures ? 'connect ECONNREFUSED 10.0.0.7:443' : null,
  last_error_at: failures ? FIRST_ERROR_AT : null,
  last_delivered_at: null,
  failures_in_a_row: failures,
});

const backends = oldVersionBackends('migration_0021');

describe.each(backends)('migration 0021 on %s', (_name, make) => {
  it('probes the subscriptions the old dispatcher paused for failures in a row; the others wait for a person', async () => {
    const backend = make();
    const old = backend.raw();
    await migrateTo(old, BEFORE);
    await old
      .insertInto('webhook_subscriptions' as never)
      .values([
        // The old dispatcher's pause after its failure limit (src/events/dispatcher.ts before issue 31).
        subscription('failing', '10 attempts in a row failed: connect ECONNREFUSED 10.0.0.7:443', 10),
        // Its pause for a receiver that answered 410 Gone: the receiver asked to be forgotten.
        subscription('gone', 'the receiver answered 410 Gone: unsubscribed', 1),
        subscription('active', null, 0),
      ] as never)
      .execute();
    await old.destroy();

    const store = backend.store();
    try {
      await store.migrate();
      const failing = await store.events.getSubscription('failing');
      expect(failing).toMatchObject({ pausedAt: PAUSED_AT, nextProbeAt: PAUSED_AT, failingSince: FIRST_ERROR_AT });
      expect(await store.events.getSubscription('gone')).toMatchObject({
        pausedAt: PAUSED_AT,
        nextProbeAt: null,
        failingSince: null,
      });
      expect(await store.events.getSubscription('active')).toMatchObject({ pausedAt: null, nextProbeAt: null });

      // The new dispatcher's question: whose probe is due now? Only the one paused for failing.
      const now = new Date().toISOString();
      const until = new Date(Date.now() + 60_000).toISOString();
      expect(await store.events.takeProbe('failing', now, until)).toBe(true);
      expect(await store.events.takeProbe('gone', now, until)).toBe(false);
      expect(await store.events.takeProbe('active', now, until)).toBe(false);
    } finally {
      await store.close();
    }
  });
});
