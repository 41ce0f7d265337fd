// The transparency log's costs (docs/benchmarks.md, "The transparency log"): integrating 1M audit entries, proof
// generation and checkpoint signing at 1M entries, on the embedded default (SQLite + SoftHSM); and the signing
// path's throughput with the integrator running against an instance that leaves integrating to others
// (log.integrateEveryMs: 0), alternated A/B/A/B so drift on a shared machine hits both alike.
// Run alone: `npm run bench:log` (BENCH_SECONDS per throughput run, default 8; BENCH_LOG_ROUNDS of the signing path
// with and without the integrator, default 4; BENCH_LOG_ENTRIES, default 1048576).
// `npm run bench` runs it too unless BENCH_LOG=0.
import { readFileSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import autocannon, { type Result } from 'autocannon';
import { KeyStores } from '../src/keys/key-store.js';
import { Pkcs11KeyStore } from '../src/keys/pkcs11/pkcs11-key-store.js';
import { embeddedSoftHsmOptions } from '../src/keys/pkcs11/softhsm.js';
import { packagePath } from '../src/paths.js';
import { chainAuditRows } from '../src/store/audit/audit-chain.js';
import { openSqlite } from '../src/store/sqlite/sqlite-driver.js';
import { openSqliteStore } from '../src/store/sqlite/sqlite-store.js';
import { DEFAULT_BATCH, LogService } from '../src/transparency/log-service.js';
import { createApiKeyCli, postAction, startServerProcess } from '../test/helpers/cli.js';
import { makeTempDir } from '../test/helpers/service.js';
import { countCpu } from './cpu.js';
import { summarise } from './stats.js';

const log = (msg: string) => process.stderr.write(`[bench:log] ${msg}\n`);
const fmt = (n: number | undefined, digits = 0) =>
  n === undefined || Number.isNaN(n) ? 'n/a' : n.toFixed(digits).replace(/\B(?=(\d{3})+(?!\d))/g, ',');

export interface LogBenchResult {
  entries: number;
  insertS: number;
  integrateS: number;
  integrateUsPerEntry: number;
  /** CPU time of this process per entry while integrating: unlike the wall time, not inflated by others' load. */
  integrateCpuUsPerEntry: number;
  inclusion: { p50Ms: number; p99Ms: number };
  consistency: { p50Ms: number; p99Ms: number };
  checkpoint: { p50Ms: number; p99Ms: number };
  throughput: { withIntegrator: Run[]; without: Run[] };
  inclusionLatency: InclusionLatency;
}

interface InclusionLatency {
  rate: number;
  perSecond: number;
  signatures: number;
  /** Answers whose entry no checkpoint held by the end (should be 0). */
  missing: number;
  checkpoints: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

interface Run {
  perSecond: number;
  /** The service process's CPU µs per signature. */
  serviceUs: number;
}

/** 1M entries: fill the audit log directly (setup, not measured), then time the integrator, proofs and signing. */
async function atScale(entries: number): Promise<Omit<LogBenchResult, 'throughput' | 'inclusionLatency'>> {
  const dir = makeTempDir('sb-bench-log-');
  const path = join(dir, 'signbridge.db');
  const store = openSqliteStore(path);
  await store.migrate();
  log(`writing ${fmt(entries)} audit entries (setup)`);
  const t0 = performance.now();
  const db = openSqlite(path);
  const insert = db.prepare(
    'INSERT INTO audit_log (seq, at, tenant_id, actor, action, outcome, details, prev_hash, hash) ' +
      'VALUES (@seq, @at, @tenant_id, @actor, @action, @outcome, @details, @prev_hash, @hash)',
  );
  let head: { seq: number; hash: string } | undefined;
  const chunk = 10_000;
  for (let done = 0; done < entries; done += chunk) {
    const batch = Array.from({ length: Math.min(chunk, entries - done) }, (_, i) => ({
      at: new Date(Date.UTC(2026, 10, 1) + (done + i) * 10).toISOString(),
      tenantId: `t${(done + i) % 7}`,
      actor: 'key_bench',
      action: 'sign',
      outcome: 'signed',
      details: {
        algorithm: 'ECDSA_SHA_256',
        hash: Buffer.alloc(32, (done + i) % 251).toString('base64'),
        key_store: 'pkcs11',
        signature_id: `sig_${done + i}`,
      },
    }));
    const rows = chainAuditRows(head, batch);
    db.transaction(() => {
      for (const r of rows) insert.run(r);
    })();
    const last = rows[rows.length - 1];
    if (last) head = { seq: last.seq, hash: last.hash };
  }
  db.close();
  const insertS = (performance.now() - t0) / 1000;

  const keyStore = Pkcs11KeyStore.open(embeddedSoftHsmOptions(dir));
  const service = new LogService({
    store: store.log,
    keyStores: new KeyStores([keyStore]),
    settings: { checkpointEveryEntries: 10_000_000, checkpointEverySeconds: 86_400, public: false, intervalMs: 0 },
  });
  try {
    await service.ensureKey();
    log(`integrating them (batches of ${DEFAULT_BATCH}, as the service does)`);
    const t1 = performance.now();
    const cpu1 = process.cpuUsage();
    await service.checkpointNow();
    const integrateS = (performance.now() - t1) / 1000;
    const cpuUsed = process.cpuUsage(cpu1);

    const timeAsync = async (n: number, op: (i: number) => Promise<unknown>) => {
      for (let i = 0; i < 5; i++) await op(i); // warm-up
      const latencies: number[] = [];
      const start = performance.now();
      for (let i = 0; i < n; i++) {
        const t = performance.now();
        await op(i);
        latencies.push(performance.now() - t);
      }
      const s = summarise(latencies, (performance.now() - start) / 1000);
      return { p50Ms: s.p50Ms, p99Ms: s.p99Ms };
    };
    const random = (max: number) => Math.floor(Math.random() * max);
    log('inclusion proofs at 1M (random leaves, tiles read from the store)');
    const inclusion = await timeAsync(1000, () => service.inclusion(random(entries)));
    log('consistency proofs to 1M (random older sizes)');
    const consistency = await timeAsync(1000, () => service.consistency(1 + random(entries - 1), entries));
    log('checkpoint signing at 1M (one new entry each: integrate, root, consistency check, sign, store)');
    const one = store.audit.append.bind(store.audit);
    const checkpoint = await timeAsync(50, async (i) => {
      await one({
        at: new Date().toISOString(),
        tenantId: null,
        actor: 'bench',
        action: 'sign',
        outcome: 'signed',
        details: { i },
      });
      await service.checkpointNow();
    });
    return {
      entries,
      insertS,
      integrateS,
      integrateUsPerEntry: (integrateS * 1e6) / entries,
      integrateCpuUsPerEntry: (cpuUsed.user + cpuUsed.system) / entries,
      inclusion,
      consistency,
      checkpoint,
    };
  } finally {
    await service.stop();
    await keyStore.close();
    await store.close();
  }
}

/** P-256 signatures/s at concurrency 32 against a fresh server, with or without its integrator. */
/** A `signbridge server` with a P-256 tenant, and the autocannon request that signs with it (32 connections). */
async function signingServer(dataDir: string, args: string[]) {
  const operator = createApiKeyCli(dataDir, 'operator');
  const server = await startServerProcess(args, { SIGNBRIDGE_LOG_LEVEL: 'warn' });
  try {
    await postAction(server.url, 'create_tenant', operator, { tenant_id: 'bench', key_spec: 'ECC_NIST_P256' });
  } catch (err) {
    await server.stop();
    throw err;
  }
  const signer = createApiKeyCli(dataDir, 'signer', 'bench');
  const request = {
    url: `${server.url}/v1/sign`,
    method: 'POST' as const,
    headers: { authorization: `Bearer ${signer}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      action: 'sign',
      tenant_id: 'bench',
      algorithm: 'ECDSA_SHA_256',
      hash: Buffer.alloc(32, 7).toString('base64'),
    }),
    connections: 32,
  };
  return { server, request };
}

async function throughput(integrate: boolean, seconds: number): Promise<Run> {
  const dataDir = makeTempDir('sb-bench-logtp-');
  const config = join(dataDir, 'config.yaml');
  // Without: the log is served, but this instance leaves integrating to others (nobody, here).
  // With: the defaults (integrateEveryMs 250, a checkpoint at most every second).
  writeFileSync(config, `dataDir: ${dataDir}\nlog:\n  integrateEveryMs: ${integrate ? 250 : 0}\n`);
  const { server, request } = await signingServer(dataDir, ['--config', config]);
  try {
    await autocannon({ ...request, duration: 3 }); // warm-up (unrecorded)
    const cpu = countCpu([server.child.pid as number]);
    const result = await autocannon({ ...request, duration: seconds });
    return {
      perSecond: result.requests.total / result.duration,
      serviceUs: cpu(result.requests.total, result.duration).serviceUs,
    };
  } finally {
    await server.stop();
  }
}

/**
 * Time to inclusion: signatures at a fixed rate (autocannon overallRate) against a service with the log's defaults;
 * for each answer, its Signbridge-Log-Index and the time it arrived; afterwards, from the service's database, the
 * first checkpoint whose tree holds that index and when it was made. The checkpoint's created_at is taken before
 * its commit (a few ms early): a proof against it can be served from that commit on.
 */
async function timeToInclusion(rate: number, seconds: number): Promise<InclusionLatency> {
  const dataDir = makeTempDir('sb-bench-loglat-');
  const { server, request } = await signingServer(dataDir, ['--data-dir', dataDir]);
  const answered: Array<{ index: number; at: number }> = [];
  let result: Result;
  try {
    await autocannon({ ...request, duration: 3 }); // warm-up (unrecorded)
    result = await autocannon({
      ...request,
      duration: seconds,
      overallRate: rate,
      requests: [
        {
          onResponse: (_status: number, _body: string, _context: unknown, headers: Record<string, string>) => {
            const index = Number(headers['signbridge-log-index']);
            if (Number.isInteger(index)) answered.push({ index, at: Date.now() });
          },
        },
      ],
    });
    // Let the last answers' checkpoint come (at most ~1.25 s with the defaults).
    await new Promise((resolve) => setTimeout(resolve, 3000));
  } finally {
    await server.stop();
  }
  const db = openSqlite(join(dataDir, 'signbridge.db'), { readonly: true });
  const checkpoints = (
    db.prepare('SELECT tree_size, created_at FROM log_checkpoints ORDER BY tree_size').all() as Array<{
      tree_size: number;
      created_at: string;
    }>
  ).map((c) => ({ size: Number(c.tree_size), at: Date.parse(c.created_at) }));
  db.close();
  const delays: number[] = [];
  let missing = 0;
  let c = 0;
  for (const a of [...answered].sort((x, y) => x.index - y.index)) {
    while (c < checkpoints.length && (checkpoints[c] as { size: number }).size <= a.index) c++;
    const cp = checkpoints[c];
    if (!cp) {
      missing++;
      continue;
    }
    delays.push(Math.max(0, cp.at - a.at));
  }
  const s = summarise(delays, seconds);
  return {
    rate,
    perSecond: result.requests.total / result.duration,
    signatures: answered.length,
    missing,
    checkpoints: checkpoints.length,
    p50Ms: s.p50Ms,
    p99Ms: s.p99Ms,
    maxMs: Math.max(...delays),
  };
}

export async function measureTransparencyLog(seconds: number): Promise<LogBenchResult> {
  const entries = Number(process.env.BENCH_LOG_ENTRIES ?? 1_048_576);
  const scale = await atScale(entries);
  const withIntegrator: Run[] = [];
  const without: Run[] = [];
  // Alternated rounds: this machine's throughput drifts by more than the aim between runs minutes apart.
  const rounds = Number(process.env.BENCH_LOG_ROUNDS ?? 4);
  for (let round = 0; round < rounds; round++) {
    log(`signing path, P-256, 32 connections, ${seconds} s: without the integrator (round ${round + 1})`);
    without.push(await throughput(false, seconds));
    log(`signing path, P-256, 32 connections, ${seconds} s: with the integrator (round ${round + 1})`);
    withIntegrator.push(await throughput(true, seconds));
  }
  const rate = Number(process.env.BENCH_LOG_INCLUSION_RATE ?? 1000);
  log(`time to inclusion: ${rate} signatures/s for ${seconds} s, the log's defaults`);
  const inclusionLatency = await timeToInclusion(rate, seconds);
  return { ...scale, throughput: { withIntegrator, without }, inclusionLatency };
}

export function logSection(r: LogBenchResult, seconds: number): string {
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const rate = (runs: Run[]) => mean(runs.map((x) => x.perSecond));
  const cpuOf = (runs: Run[]) => mean(runs.map((x) => x.serviceUs));
  const drop = (1 - rate(r.throughput.withIntegrator) / rate(r.throughput.without)) * 100;
  const cpuMore = (cpuOf(r.throughput.withIntegrator) / cpuOf(r.throughput.without) - 1) * 100;
  const runs = (xs: Run[]) => xs.map((x) => `${fmt(x.perSecond)}/s (${fmt(x.serviceUs)} µs)`).join(', ');
  // Each round's two runs were minutes apart at most: the median of the per-round drops is less swayed by the
  // machine's drift and by one outlying run than the ratio of the means.
  const pairedDrops = r.throughput.withIntegrator.map(
    (w, i) => (1 - w.perSecond / (r.throughput.without[i]?.perSecond ?? Number.NaN)) * 100,
  );
  const sortedDrops = [...pairedDrops].sort((a, b) => a - b);
  const median = sortedDrops[Math.floor((sortedDrops.length - 1) / 2)] ?? Number.NaN;
  // What the integration itself costs a signature, each signature being one audit entry to integrate.
  const share = (r.integrateCpuUsPerEntry / cpuOf(r.throughput.without)) * 100;
  const measured = `Measured ${new Date().toISOString().slice(0, 10)} on ${cpus().length} × ${cpus()[0]?.model ?? 'unknown CPU'}, Node ${process.version}.`;
  return [
    '<!-- bench:log:start -->',
    measured,
    '',
    `| at ${fmt(r.entries)} entries (SQLite + SoftHSM) | p50 ms | p99 ms |`,
    '|---|---|---|',
    `| inclusion proof (tiles read from the store, entry read, leaf checked) | ${fmt(r.inclusion.p50Ms, 2)} | ${fmt(r.inclusion.p99Ms, 2)} |`,
    `| consistency proof (random older size to ${fmt(r.entries)}) | ${fmt(r.consistency.p50Ms, 2)} | ${fmt(r.consistency.p99Ms, 2)} |`,
    `| checkpoint (integrate 1 entry, root, consistency check with the last checkpoint, ECDSA sign in SoftHSM, store) | ${fmt(r.checkpoint.p50Ms, 2)} | ${fmt(r.checkpoint.p99Ms, 2)} |`,
    '',
    `Integrating ${fmt(r.entries)} entries from scratch: ${fmt(r.integrateS, 1)} s, ${fmt(r.integrateUsPerEntry, 1)} µs per entry of wall time and ${fmt(r.integrateCpuUsPerEntry, 1)} µs of CPU (read, chain check, leaf hash, tiles, in batches of ${fmt(DEFAULT_BATCH)}).`,
    '',
    `Signing path (service \`sign\`, P-256, autocannon 32 connections, ${seconds} s per run, runs alternated; the service's CPU µs per signature in brackets): without the integrator ${runs(r.throughput.without)}; with it ${runs(r.throughput.withIntegrator)}: ${drop >= 0 ? `${fmt(drop, 1)}% fewer` : `${fmt(-drop, 1)}% more`} signatures/s and ${fmt(cpuMore, 1)}% more CPU per signature with the integrator; per round, the median drop is ${fmt(median, 1)}% (round by round: ${pairedDrops.map((d) => fmt(d, 1)).join(', ')}). Integrating one entry (${fmt(r.integrateCpuUsPerEntry, 1)} µs) is ${fmt(share, 1)}% of a signature's service CPU without the integrator (aim: less than 5% fewer).`,
    '',
    inclusionLine(r.inclusionLatency, seconds),
    '<!-- bench:log:end -->',
  ].join('\n');
}

function inclusionLine(l: InclusionLatency, seconds: number): string {
  return (
    `Time to inclusion (the log's defaults: integrateEveryMs 250, checkpointEverySeconds 1; autocannon at a fixed ${fmt(l.rate)} signatures/s, 32 connections, ${seconds} s; ${fmt(l.perSecond)}/s answered): ` +
    `from each answer to the first signed checkpoint holding its entry, p50 ${fmt(l.p50Ms)} ms, **p99 ${fmt(l.p99Ms)} ms** (aim: at most 1,500 ms), max ${fmt(l.maxMs)} ms, over ${fmt(l.signatures)} signatures and ${fmt(l.checkpoints)} checkpoints` +
    (l.missing > 0 ? `; ${fmt(l.missing)} answers had no checkpoint by the end` : '') +
    '.'
  );
}

export function writeLogSection(section: string): void {
  const docPath = packagePath('docs', 'benchmarks.md');
  let doc = readFileSync(docPath, 'utf8');
  if (!doc.includes('<!-- bench:log:start -->')) {
    doc += '\n## The transparency log\n\n<!-- bench:log:start -->\n<!-- bench:log:end -->\n';
  }
  doc = doc.replace(/<!-- bench:log:start -->[\s\S]*<!-- bench:log:end -->/, section);
  writeFileSync(docPath, doc);
}

// Run directly (npm run bench:log).
if (process.argv[1]?.endsWith('transparency.js')) {
  const seconds = Number(process.env.BENCH_SECONDS ?? 8);
  const result = await measureTransparencyLog(seconds);
  const section = logSection(result, seconds);
  writeLogSection(section);
  process.stdout.write(`${section}\n`);
}
