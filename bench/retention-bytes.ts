// Bytes on disk per signature, per table, before and after pruning (docs/deployment.md, "Retention"). The real
// service in-process (SoftHSM, the transparency log integrating, one webhook subscription delivered by the real
// dispatcher to a receiver on 127.0.0.1) signs N signatures, each with an Idempotency-Key as the daemon sends; then
// the clock moves past the retry window and the idempotency lifetime and the pruner runs until it finds nothing.
// SQLite: per-table pages from the dbstat virtual table (tables and their indexes), the free list after pruning.
// PostgreSQL (a private cluster, when installed): pg_total_relation_size (heap, indexes, TOAST) of each table.
// Run alone: `npm run bench:retention` (BENCH_RETENTION_SIGNATURES, default 20000; BENCH_RETENTION_POSTGRES=0 skips
// PostgreSQL). It prints markdown tables, then the measurements as one JSON line.
// Each signature's own signature.signed event is in the figures: an outbox row for a batch's signatures, none for
// a signature made at once, whose event the dispatcher reads from its `signed` entry (docs/events.md); the bench
// fails if a batch's is missing.
// BENCH_RETENTION_BATCH=N signs through POST /v1/sign_batch, N digests a request (issue 46: bytes per batched
// signature; a batch is one audit entry with its batch_items rows), instead of one POST /v1/sign each.
import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { sql } from 'kysely';
import { buildApp } from '../src/app.js';
import { createApiKey } from '../src/auth/api-keys.js';
import { destinations } from '../src/events/destinations.js';
import { addSubscription } from '../src/events/subscription-service.js';
import { checkSubscriptionUrl } from '../src/events/webhook-sender.js';
import { KeyStores } from '../src/keys/key-store.js';
import { Pkcs11KeyStore } from '../src/keys/pkcs11/pkcs11-key-store.js';
import { embeddedSoftHsmOptions } from '../src/keys/pkcs11/softhsm.js';
import { SoftwareKeyStore } from '../src/keys/software/software-key-store.js';
import type { Pruner } from '../src/retention/pruner.js';
import { RETENTION_DEFAULTS } from '../src/retention/retention-settings.js';
import type { KyselyStore } from '../src/store/kysely-store.js';
import { openPostgresStore } from '../src/store/postgres/postgres-store.js';
import { openSqliteStore } from '../src/store/sqlite/sqlite-store.js';
import { postgresBinDir, startPostgresCluster } from '../test/helpers/postgres.js';
import { makeTempDir } from '../test/helpers/service.js';

const log = (msg: string) => process.stderr.write(`[bench:retention] ${msg}\n`);
const HOUR = 3600_000;
const SIGNATURES = Number(process.env.BENCH_RETENTION_SIGNATURES ?? 20_000);
const CONCURRENCY = 16;
/** Digests per sign_batch request; 0: one POST /v1/sign a signature. */
const BATCH = Number(process.env.BENCH_RETENTION_BATCH ?? 0);

/** The tables a signature adds rows to, in the order the docs list them; the rest are summed as "other". */
const TABLES = [
  'audit_log',
  // the words of packed entries (migration 0032): a few rows for all signatures
  'audit_words',
  'signatures',
  'signature_lookups',
  'batch_items',
  'log_tiles',
  'event_outbox',
  'event_deliveries',
  'sign_idempotency',
  'pending_requests',
] as const;
/** Kept for ever: what a signature costs for good. */
const PERMANENT = new Set(['audit_log', 'audit_words', 'signatures', 'signature_lookups', 'batch_items', 'log_tiles']);

interface Measure {
  /** Bytes per table, indexes included. */
  tables: Record<string, number>;
  /** SQLite: pages on the free list, as bytes (reused by later writes, never given back to the file system). */
  freeBytes?: number;
  fileBytes?: number;
}

interface StoreRun {
  store: 'sqlite' | 'postgres';
  signatures: number;
  eventsPerSignature: number;
  before: Measure;
  after: Measure;
  pruned: { deliveries: number; events: number; requests: number; idempotencyKeys: number };
}

async function sqliteMeasure(store: KyselyStore): Promise<Measure> {
  const db = (store as unknown as { db: import('kysely').Kysely<unknown> }).db;
  const rows = (
    await sql<{ tbl: string; bytes: number }>`
      SELECT coalesce(s.tbl_name, d.name) AS tbl, sum(d.pgsize) AS bytes
      FROM dbstat d LEFT JOIN sqlite_schema s ON s.name = d.name
      GROUP BY tbl`.execute(db)
  ).rows;
  const pages = (await sql<{ n: number }>`SELECT page_count AS n FROM pragma_page_count()`.execute(db)).rows[0]?.n ?? 0;
  const free = (await sql<{ n: number }>`SELECT freelist_count AS n FROM pragma_freelist_count()`.execute(db)).rows[0]
    ?.n;
  const pageSize =
    (await sql<{ n: number }>`SELECT page_size AS n FROM pragma_page_size()`.execute(db)).rows[0]?.n ?? 0;
  return {
    tables: Object.fromEntries(rows.map((r) => [r.tbl, Number(r.bytes)])),
    freeBytes: Number(free ?? 0) * pageSize,
    fileBytes: Number(pages) * pageSize,
  };
}

async function postgresMeasure(store: KyselyStore): Promise<Measure> {
  const db = (store as unknown as { db: import('kysely').Kysely<unknown> }).db;
  // Plain VACUUM (what autovacuum does): dead rows' space becomes reusable; the files keep their size.
  for (const table of TABLES) await sql`VACUUM ANALYZE ${sql.table(table)}`.execute(db);
  const rows = (
    await sql<{ tbl: string; bytes: string }>`
      SELECT c.relname AS tbl, pg_total_relation_size(c.oid) AS bytes
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE c.relkind = 'r' AND n.nspname = current_schema()`.execute(db)
  ).rows;
  return { tables: Object.fromEntries(rows.map((r) => [r.tbl, Number(r.bytes)])) };
}

async function waitUntil(what: string, check: () => Promise<boolean>, ms = 600_000): Promise<void> {
  const until = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function runOn(kind: 'sqlite' | 'postgres', database?: string): Promise<StoreRun> {
  const dir = makeTempDir('sb-bench-retention-');
  const store = kind === 'sqlite' ? openSqliteStore(join(dir, 'signbridge.db')) : openPostgresStore(database as string);
  await store.migrate();
  const keyStore = Pkcs11KeyStore.open(embeddedSoftHsmOptions(dir));
  const keyStores = new KeyStores([keyStore, new SoftwareKeyStore(keyStore, keyStore.description)]);
  const receiver = createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(204).end());
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  const webhooks = { allow: ['127.0.0.1'], timeoutMs: 10_000 };
  let offsetMs = 0;
  const now = () => new Date(Date.now() + offsetMs);
  const app = await buildApp({
    store,
    keyStore: keyStores,
    now,
    log: { checkpointEveryEntries: 1_000_000, checkpointEverySeconds: 3600, public: false, intervalMs: 50 },
    eventDelivery: { deliver: destinations(store, { webhooks }), settings: { pollMs: 20, perSubscription: 64 } },
    // The pruner's own timer stays out of the way: the bench runs its passes.
    retention: { intervalMs: 24 * HOUR },
  });
  await app.ready();
  try {
    const operator = (await createApiKey(store, 'operator', null, 'bench')).token;
    const made = await app.inject({
      method: 'POST',
      url: '/v1/create_tenant',
      headers: { authorization: `Bearer ${operator}` },
      payload: { action: 'create_tenant', tenant_id: 'bench', key_spec: 'ECC_NIST_P256' },
    });
    if (made.statusCode !== 201) throw new Error(`create_tenant: ${made.body}`);
    const signer = (await createApiKey(store, 'signer', 'bench', 'bench signer')).token;
    const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
    await addSubscription(
      store,
      { tenantId: 'bench', url, format: 'standard', eventKinds: [] },
      { actor: 'bench', via: 'cli' },
      async (u) => {
        const checked = await checkSubscriptionUrl(u, webhooks);
        return checked.ok ? undefined : checked.error;
      },
    );
    const eventsAtStart = await countRows(store, 'event_outbox');
    const how = BATCH > 0 ? `sign_batch of ${BATCH}` : 'sign';
    log(`${kind}: signing ${SIGNATURES} (ECDSA P-256, ${how}, an Idempotency-Key each, ${CONCURRENCY} at a time)`);
    const started = Date.now();
    let next = 0;
    const hashOf = (i: number) => Buffer.alloc(32, 0).fill(`${i}:`).toString('base64');
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next < SIGNATURES) {
          const i = next;
          const n = BATCH > 0 ? Math.min(BATCH, SIGNATURES - i) : 1;
          next += n;
          const res = await app.inject({
            method: 'POST',
            url: BATCH > 0 ? '/v1/sign_batch' : '/v1/sign',
            headers: { authorization: `Bearer ${signer}`, 'idempotency-key': randomUUID() },
            payload:
              BATCH > 0
                ? {
                    action: 'sign_batch',
                    tenant_id: 'bench',
                    algorithm: 'ECDSA_SHA_256',
                    hashes: Array.from({ length: n }, (_, k) => hashOf(i + k)),
                  }
                : { action: 'sign', tenant_id: 'bench', algorithm: 'ECDSA_SHA_256', hash: hashOf(i) },
          });
          if (res.statusCode !== 200) throw new Error(`${how}: ${res.statusCode} ${res.body}`);
        }
      }),
    );
    log(`${kind}: signed in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    const signedEvents = await countRows(store, 'event_outbox', sql`type = 'signature.signed'`);
    // A signature made at once, batched or not, is told of from its entry (migrations 0028 and 0031), with no
    // outbox row: the rows measured are the service's own.
    if (signedEvents !== 0) {
      throw new Error(`${kind}: ${signedEvents} signature.signed events for ${SIGNATURES} signatures`);
    }
    const events = (await countRows(store, 'event_outbox')) - eventsAtStart;
    await waitUntil('every event delivered', async () => {
      const unfanned = await countRows(store, 'event_outbox', sql`fanned_out = 0`);
      return unfanned === 0 && (await store.events.countPendingDeliveries()) === 0;
    });
    await waitUntil('the log integrated', async () => {
      const state = await store.log.state();
      return state.treeSize >= (await store.stats()).auditEntries;
    });
    const before = kind === 'sqlite' ? await sqliteMeasure(store) : await postgresMeasure(store);
    // Past the retry window (24 h) and the idempotency lifetime (24 h): everything finished may go.
    offsetMs = 25 * HOUR;
    const pruner = app.pruner as Pruner;
    const pruned = { deliveries: 0, events: 0, requests: 0, idempotencyKeys: 0 };
    for (;;) {
      const pass = await pruner.runOnce();
      for (const k of Object.keys(pruned) as Array<keyof typeof pruned>) pruned[k] += pass[k];
      if (pass.deliveries + pass.events + pass.requests + pass.idempotencyKeys === 0) break;
    }
    const after = kind === 'sqlite' ? await sqliteMeasure(store) : await postgresMeasure(store);
    return {
      store: kind,
      signatures: SIGNATURES,
      eventsPerSignature: events / SIGNATURES,
      before,
      after,
      pruned,
    };
  } finally {
    await app.close();
    await keyStores.close();
    await store.close();
    await new Promise((r) => receiver.close(r));
    // BENCH_RETENTION_KEEP=1 keeps the database for a closer look (sqlite3's dbstat per index).
    if (process.env.BENCH_RETENTION_KEEP === '1') log(`kept ${dir}`);
    else rmSync(dir, { recursive: true, force: true });
  }
}

async function countRows(store: KyselyStore, table: string, where = sql`1 = 1`): Promise<number> {
  const db = (store as unknown as { db: import('kysely').Kysely<unknown> }).db;
  const row = (await sql<{ n: number }>`SELECT count(*) AS n FROM ${sql.table(table)} WHERE ${where}`.execute(db))
    .rows[0];
  return Number(row?.n ?? 0);
}

function report(run: StoreRun): string {
  const per = (bytes: number | undefined) => (bytes === undefined ? 'n/a' : (bytes / run.signatures).toFixed(0));
  const lines = [
    `### ${run.store === 'sqlite' ? 'SQLite' : 'PostgreSQL'} (${run.signatures} signatures${BATCH > 0 ? `, sign_batch of ${BATCH}` : ''}, ${run.eventsPerSignature.toFixed(2)} events per signature)`,
    '',
    '| table (with its indexes) | B/signature before pruning | after | kept |',
    '|---|---:|---:|---|',
  ];
  let permanent = 0;
  let pruned = 0;
  let beforeTotal = 0;
  let afterTotal = 0;
  for (const table of TABLES) {
    const b = run.before.tables[table] ?? 0;
    const a = run.after.tables[table] ?? 0;
    beforeTotal += b;
    afterTotal += a;
    if (PERMANENT.has(table)) permanent += b;
    else pruned += b;
    lines.push(`| ${table} | ${per(b)} | ${per(a)} | ${PERMANENT.has(table) ? 'for ever' : 'its window'} |`);
  }
  lines.push(`| **total of these** | **${per(beforeTotal)}** | **${per(afterTotal)}** | |`);
  lines.push(`| **kept for ever** | **${per(permanent)}** | | |`);
  if (run.after.freeBytes !== undefined) {
    lines.push(
      '',
      `Free list after pruning: ${per(run.after.freeBytes)} B/signature (pages SQLite reuses; the file stays ${((run.after.fileBytes ?? 0) / 1e6).toFixed(1)} MB).`,
    );
  }
  const day = 1_000_000;
  lines.push(
    '',
    `At 1M signatures/day with the default windows: the permanent tables grow ${(((permanent / run.signatures) * day) / 1e9).toFixed(2)} GB/day; ` +
      `the pruned ones hold about ${(((pruned / run.signatures) * day) / 1e9).toFixed(2)} GB (a day of rows: the retry window and the idempotency lifetime are 24 h).`,
    `Pruned: ${run.pruned.deliveries} deliveries, ${run.pruned.events} events, ${run.pruned.idempotencyKeys} idempotency records, ${run.pruned.requests} requests.`,
  );
  return lines.join('\n');
}

async function main(): Promise<void> {
  const runs: StoreRun[] = [await runOn('sqlite')];
  if (process.env.BENCH_RETENTION_POSTGRES !== '0' && postgresBinDir()) {
    const cluster = await startPostgresCluster();
    try {
      runs.push(await runOn('postgres', cluster.createDatabase('bench_retention')));
    } finally {
      cluster.stop();
    }
  } else {
    log('PostgreSQL skipped (not installed, or BENCH_RETENTION_POSTGRES=0)');
  }
  process.stdout.write(`${runs.map(report).join('\n\n')}\n\n`);
  process.stdout.write(`${JSON.stringify({ defaults: RETENTION_DEFAULTS, runs })}\n`);
}

main().catch((err) => {
  process.stderr.write(`${(err as Error).stack ?? err}\n`);
  process.exit(1);
});
