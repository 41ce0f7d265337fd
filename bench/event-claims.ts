// The dispatcher's lease query at a backlog (docs/benchmarks.md, "Leasing event deliveries"): a store is filled with
// N pending, due deliveries (4 subscriptions of 4 tenants, events without an order key, as signature.signed and
// signature.denied are), and claimDeliveries is timed leasing 16 at a time, on SQLite and on PostgreSQL. Each claim
// leases different rows (the ones leased before are under lease), so the backlog stays about N.
//
// `npm run bench:events` (or node dist/bench/event-claims.js) prints the rows and rewrites the section;
// BENCH_EVENT_BACKLOGS (default 0,10000,100000), BENCH_EVENT_CLAIMS (default 60 per backlog), BENCH_POSTGRES=0.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { packagePath } from '../src/paths.js';
import { openPostgresStore } from '../src/store/postgres/postgres-store.js';
import type { EventInput } from '../src/store/records/event-kinds.js';
import { openSqliteStore } from '../src/store/sqlite/sqlite-store.js';
import type { Store } from '../src/store/store.js';
import { startPostgresCluster } from '../test/helpers/postgres.js';
import { subscriptionRecord } from '../test/helpers/subscription-record.js';
import { summarise } from './stats.js';

const TENANTS = ['t1', 't2', 't3', 't4'];
const LEASE = 16;
const log = (msg: string) => process.stderr.write(`[bench:events] ${msg}\n`);

export interface ClaimRow {
  store: string;
  backlog: number;
  p50Ms: number;
  p99Ms: number;
  leased: number;
}

/** Adds events and fans them out until `store` has `total` pending deliveries. */
async function fill(store: Store, total: number, have: number, at: string): Promise<void> {
  for (let n = have; n < total; ) {
    const batch = Math.min(1000, total - n);
    const events: EventInput[] = [];
    for (let i = 0; i < batch; i++) {
      const tenant = TENANTS[(n + i) % TENANTS.length] as string;
      events.push({ type: 'signature.denied', data: { tenant_id: tenant, n: n + i } });
    }
    await store.events.appendEvents(events, at);
    while ((await store.events.fanOut(2000, at)) > 0) {}
    n += batch;
  }
}

async function measure(name: string, store: Store, backlogs: number[], claims: number): Promise<ClaimRow[]> {
  await store.migrate();
  for (const tenant of TENANTS) {
    await store.events.addSubscription(
      subscriptionRecord({ id: `wh_${tenant}`, tenantId: tenant, createdBy: 'bench' }),
    );
  }
  const rows: ClaimRow[] = [];
  const t0 = Date.now();
  let have = 0;
  let leasedSoFar = 0;
  for (const backlog of backlogs) {
    // Every delivery is due at t0; the claims run "at" t0 + 1 s with a lease far beyond the run.
    await fill(store, backlog + leasedSoFar, have, new Date(t0).toISOString());
    have = backlog + leasedSoFar;
    log(`${name}: ${backlog} pending, ${claims} claims of ${LEASE}`);
    const now = new Date(t0 + 1000).toISOString();
    const leaseUntil = new Date(t0 + 3600_000).toISOString();
    // As the dispatcher asks: every subscription, up to 16 each, 16 in all.
    const wants = TENANTS.map((t) => ({ subscriptionId: `wh_${t}`, limit: LEASE }));
    const latencies: number[] = [];
    let leased = 0;
    for (let i = 0; i < claims + 5; i++) {
      const started = performance.now();
      const got = await store.events.claimDeliveries('bench', now, leaseUntil, wants, LEASE);
      if (i >= 5) latencies.push(performance.now() - started); // the first few warm the caches and the JIT
      leased += got.length;
    }
    leasedSoFar += leased;
    const s = summarise(latencies, 1);
    rows.push({ store: name, backlog, p50Ms: s.p50Ms, p99Ms: s.p99Ms, leased: Math.round(leased / (claims + 5)) });
  }
  return rows;
}

export async function measureEventClaims(): Promise<ClaimRow[]> {
  const backlogs = (process.env.BENCH_EVENT_BACKLOGS ?? '0,10000,100000').split(',').map(Number);
  const claims = Number(process.env.BENCH_EVENT_CLAIMS ?? 60);
  const rows: ClaimRow[] = [];
  const dir = mkdtempSync(join(tmpdir(), 'sb-bench-events-'));
  try {
    const sqlite = openSqliteStore(join(dir, 'state.db'));
    try {
      rows.push(...(await measure('SQLite', sqlite, backlogs, claims)));
    } finally {
      await sqlite.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  if (process.env.BENCH_POSTGRES !== '0') {
    const cluster = await startPostgresCluster();
    try {
      const postgres = openPostgresStore(cluster.createDatabase('bench_events'));
      try {
        rows.push(...(await measure('PostgreSQL', postgres, backlogs, claims)));
      } finally {
        await postgres.close();
      }
    } finally {
      cluster.stop();
    }
  }
  return rows;
}

const fmt = (n: number, digits = 0) =>
  n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });

export function eventClaimsSection(rows: ClaimRow[]): string {
  const measured = `Measured ${new Date().toISOString().slice(0, 10)} on ${cpus().length} × ${cpus()[0]?.model ?? 'unknown CPU'}, Node ${process.version}.`;
  return [
    '<!-- bench:events:start -->',
    measured,
    '',
    `| store | pending, due deliveries | claimDeliveries p50 ms | p99 ms | leased per claim |`,
    '|---|---|---|---|---|',
    ...rows.map(
      (r) => `| ${r.store} | ${fmt(r.backlog)} | ${fmt(r.p50Ms, 2)} | ${fmt(r.p99Ms, 2)} | ${fmt(r.leased)} |`,
    ),
    '<!-- bench:events:end -->',
  ].join('\n');
}

export function writeEventClaimsSection(section: string): void {
  const docPath = packagePath('docs', 'benchmarks.md');
  let doc = readFileSync(docPath, 'utf8');
  if (!doc.includes('<!-- bench:events:start -->')) {
    doc += '\n## Leasing event deliveries\n\n<!-- bench:events:start -->\n<!-- bench:events:end -->\n';
  }
  doc = doc.replace(/<!-- bench:events:start -->[\s\S]*<!-- bench:events:end -->/, section);
  writeFileSync(docPath, doc);
}

// Run directly (npm run bench:events).
if (process.argv[1]?.endsWith('event-claims.js')) {
  const rows = await measureEventClaims();
  const section = eventClaimsSection(rows);
  if (process.env.BENCH_WRITE !== '0') writeEventClaimsSection(section);
  process.stdout.write(`${section}\n`);
}
