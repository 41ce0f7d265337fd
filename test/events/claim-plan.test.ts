// The dispatcher's lease query reads about as many rows as it leases, whatever the backlog (issue 31): before, it
// sorted every pending, due delivery to take 16 (280-350 ms at 100k, held on SQLite's writer each pass). The claim
// now reads each subscription's due deliveries through event_deliveries_claim (subscription, next attempt, event),
// in the order it takes them. Shown by the query plans, on SQLite (EXPLAIN QUERY PLAN) and PostgreSQL (EXPLAIN),
// of the very statement claimDeliveries runs, at a backlog of 20,000 pending deliveries with the tables analysed:
// every subscription's branch is an index search in order under a LIMIT, with no sort of the backlog and no scan of
// the whole table. (bench/event-claims.ts times it at 100k: docs/benchmarks.md, "Leasing event deliveries".)
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Kysely, sql } from 'kysely';
import { afterAll, describe, expect, it } from 'vitest';
import type { DeliveryWant } from '../../src/store/events/event-store.js';
import { openPostgresStore } from '../../src/store/postgres/postgres-store.js';
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { Store } from '../../src/store/store.js';
import { createTestDatabase, testPostgresUrl } from '../helpers/postgres.js';
import { subscriptionRecord } from '../helpers/subscription-record.js';

const BACKLOG = 20_000;
const TENANTS = ['t0', 't1', 't2', 't3'];
const dirs: string[] = [];
const stores: Store[] = [];
afterAll(async () => {
  for (const s of stores) await s.close();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

async function openSqlite(): Promise<Store> {
  const dir = mkdtempSync(join(tmpdir(), 'sb-claim-plan-'));
  dirs.push(dir);
  return openSqliteStore(join(dir, 'state.db'));
}
const openPostgres = async (): Promise<Store> => openPostgresStore(createTestDatabase('claim_plan'));

/** A store with 4 subscriptions and BACKLOG pending, due deliveries (a third with an order key), analysed. */
async function withBacklog(open: () => Promise<Store>): Promise<Store> {
  const store = await open();
  stores.push(store);
  await store.migrate();
  for (const tenant of TENANTS) {
    await store.events.addSubscription(
      subscriptionRecord({ id: `wh_${tenant}`, tenantId: tenant, createdAt: '2026-11-01T00:00:00.000Z' }),
    );
  }
  const db = (store as unknown as { db: Kysely<unknown> }).db;
  // Written in bulk (the same rows fanOut writes), so the backlog takes a moment rather than minutes.
  await sql`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${BACKLOG})
    INSERT INTO event_outbox (id, tenant_id, type, timestamp, data, order_key, fanned_out)
    SELECT 'evt_' || i, 't' || (i % 4), 'signature.denied', '2026-11-01T00:00:00.000Z', '{}',
      CASE WHEN i % 3 = 0 THEN 'request:' || i END, 1
    FROM n`.execute(db);
  await sql`INSERT INTO event_deliveries (event_seq, subscription_id, order_key, status, attempts, next_attempt_at,
      created_at)
    SELECT seq, 'wh_' || tenant_id, order_key, 'pending', 0, timestamp, timestamp FROM event_outbox`.execute(db);
  await sql`ANALYZE`.execute(db);
  expect(await store.events.countPendingDeliveries()).toBe(BACKLOG);
  return store;
}

/** As the dispatcher asks: each subscription's free slots, and one paused subscription's probe. */
const wants: DeliveryWant[] = [
  ...TENANTS.slice(0, 3).map((t) => ({ subscriptionId: `wh_${t}`, limit: 16 })),
  { subscriptionId: 'wh_t3', limit: 1, probe: true },
];
const NOW = '2026-11-01T00:00:01.000Z';

describe('the lease query at a backlog of 20,000', () => {
  it('on SQLite searches each subscription through event_deliveries_claim in order, with no sort', async () => {
    const store = await withBacklog(openSqlite);
    const plan = await store.events.explainClaim(wants, NOW);
    const text = plan.join('\n');
    // Each subscription's branch is an index search in the index's order (SQLite may plan the row-value IN twice:
    // once to find the rows, once to test them), and no temporary B-tree sorts for an ORDER BY.
    const searches = plan.filter((l) => /^SEARCH d /.test(l));
    expect(searches.length, text).toBeGreaterThanOrEqual(wants.length);
    for (const l of searches) expect(l).toMatch(/^SEARCH d USING INDEX event_deliveries_claim \(subscription_id=\?/);
    expect(text).not.toMatch(/TEMP B-TREE/);
    // The rows to update are found by their key, not by scanning the table.
    expect(
      plan.some((l) => /^SEARCH event_deliveries USING .*INDEX/.test(l)),
      text,
    ).toBe(true);
    expect(
      plan.filter((l) => /^SCAN (d|event_deliveries)\b/.test(l)),
      text,
    ).toEqual([]);
    // And it leases what was asked: 16 of each subscription's, and the probe's one.
    const claimed = await store.events.claimDeliveries('plan', NOW, '2026-11-01T00:01:00.000Z', wants, 64);
    expect(claimed).toHaveLength(3 * 16 + 1);
  });

  it.skipIf(testPostgresUrl() === undefined)(
    'on PostgreSQL scans event_deliveries_claim under a LIMIT per subscription, with no sort and no full scan',
    async () => {
      const store = await withBacklog(openPostgres);
      const plan = await store.events.explainClaim(wants, NOW);
      const text = plan.join('\n');
      expect(
        plan.filter((l) => /Index Scan using event_deliveries_claim on event_deliveries d(_\d+)?\b/.test(l)),
        text,
      ).toHaveLength(wants.length);
      expect(plan.filter((l) => /->\s+Limit/.test(l)).length, text).toBeGreaterThanOrEqual(wants.length);
      expect(text).not.toMatch(/\bSort\b/);
      expect(text).not.toMatch(/Seq Scan on event_deliveries/);
      const claimed = await store.events.claimDeliveries('plan', NOW, '2026-11-01T00:01:00.000Z', wants, 64);
      expect(claimed).toHaveLength(3 * 16 + 1);
    },
  );
});
