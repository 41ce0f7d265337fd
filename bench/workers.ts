// Request workers (issue 34): the service's `sign` for P-256 at 32 connections with `--workers 1` (one process, as
// before) and with more, in one run, beside raw SoftHSM on one thread; the CPU each process and each kind of thread
// used per signature (the event loops, the signing and store threads, V8's helpers, libuv's pool), from /proc.
// Run: npm run bench:workers (BENCH_WORKERS=1,2 the counts, a row each, in that order; BENCH_SECONDS per row,
// BENCH_WARMUP_SECONDS; BENCH_SERVICE_CONFIG: a config file for the service; BENCH_WRITE=0: print only). `npm run
// bench` runs it too (its "Request workers" section; BENCH_WORKERS_SECTION=0 skips it).
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { packagePath } from '../src/paths.js';
import { createApiKeyCli, postAction, startServerProcess } from '../test/helpers/cli.js';
import { makeTempDir } from '../test/helpers/service.js';
import { signLoad } from './sign-load.js';

const log = (message: string) => process.stderr.write(`[bench:workers] ${message}\n`);

/** CPU ms by thread (utime + stime, clock ticks of 10 ms), with the thread's name. */
function threadCpu(pid: number): Map<number, { name: string; ms: number }> {
  const out = new Map<number, { name: string; ms: number }>();
  let tids: string[] = [];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return out;
  }
  for (const tid of tids) {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      out.set(Number(tid), { name, ms: (Number(fields[11]) + Number(fields[12])) * 10 });
    } catch {
      // ended meanwhile
    }
  }
  return out;
}

/** The processes whose parent is `pid` (a primary's workers). */
function childrenOf(pid: number): number[] {
  return readdirSync('/proc')
    .filter((entry) => /^\d+$/.test(entry))
    .filter((entry) => {
      try {
        const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
        return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pid;
      } catch {
        return false;
      }
    })
    .map(Number);
}

/** Thread names as the rows name them: Node's event loop is MainThread, worker_threads are WorkerThread. */
const THREAD_KIND: Record<string, string> = {
  MainThread: 'event loop',
  WorkerThread: 'signing / store threads',
  'libuv-worker': "libuv's pool",
  V8Worker: "V8's helpers (GC, compiler)",
};

type CpuByKind = Map<string, number>;

/** Counts CPU from now; the returned function gives ms per role ('primary', 'workers') and thread kind. */
function countThreads(primary: number, workers: number[]): () => Map<string, CpuByKind> {
  const roles = [
    { role: workers.length > 0 ? 'primary' : 'service', pids: [primary] },
    { role: 'workers', pids: workers },
  ];
  const before = roles.map(({ pids }) => pids.map(threadCpu));
  return () => {
    const result = new Map<string, CpuByKind>();
    roles.forEach(({ role, pids }, r) => {
      const byKind: CpuByKind = new Map();
      pids.forEach((pid, p) => {
        for (const [tid, { name, ms }] of threadCpu(pid)) {
          const kind = THREAD_KIND[name] ?? 'other';
          const was = before[r]?.[p]?.get(tid)?.ms ?? 0;
          byKind.set(kind, (byKind.get(kind) ?? 0) + ms - was);
        }
      });
      if (pids.length > 0) result.set(role, byKind);
    });
    return result;
  };
}

/** Raw SoftHSM, one thread, C_SignInit + C_Sign: the first P-256 line of bench/raw-softhsm.ts. */
function rawSoftHsmP256(seconds: number): number {
  const out = execFileSync(
    process.execPath,
    [packagePath('dist', 'bench', 'raw-softhsm.js'), makeTempDir('sb-bench-raw-'), String(seconds)],
    { encoding: 'utf8' },
  );
  const row = out
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as { path: string; spec: string; perSecond: number })
    .find((r) => r.path === 'softhsm-direct' && r.spec === 'ECC_NIST_P256');
  if (!row) throw new Error('raw-softhsm printed no P-256 row');
  return row.perSecond;
}

interface Row {
  workers: number;
  perSecond: number;
  p50Ms: number;
  p99Ms: number;
  errors: number;
  /** µs of CPU per signature, by role and thread kind; the load generator's too. */
  cpu: Map<string, CpuByKind>;
  loadUs: number;
}

async function measure(workers: number, seconds: number, warmUpSeconds: number): Promise<Row> {
  const dataDir = makeTempDir('sb-bench-workers-');
  const operator = createApiKeyCli(dataDir, 'operator');
  const config = process.env.BENCH_SERVICE_CONFIG;
  const server = await startServerProcess(
    ['--data-dir', dataDir, '--workers', String(workers), ...(config ? ['--config', config] : [])],
    {
      SIGNBRIDGE_LOG_LEVEL: 'warn',
    },
  );
  try {
    const made = await postAction(server.url, 'create_tenant', operator, {
      tenant_id: 'bench-p256',
      key_spec: 'ECC_NIST_P256',
    });
    if (made.status !== 201) throw new Error(`create_tenant: ${JSON.stringify(made.body)}`);
    const signer = createApiKeyCli(dataDir, 'signer', 'bench-p256');
    const load = (connections: number, duration: number) =>
      signLoad({ url: server.url, signer, tenantId: 'bench-p256', connections, duration });
    if (warmUpSeconds > 0) {
      log(`--workers ${workers}: warming up, 8 connections, ${warmUpSeconds} s`);
      await load(8, warmUpSeconds);
    }
    log(`--workers ${workers}: P-256 sign, 32 connections, ${seconds} s`);
    const primary = server.child.pid as number;
    const counted = countThreads(primary, workers > 1 ? childrenOf(primary) : []);
    const loadCpu = process.cpuUsage();
    const result = await load(32, seconds);
    const cpuMs = counted();
    const loadUsed = process.cpuUsage(loadCpu);
    const perSig = (ms: number) => (ms * 1000) / Math.max(result.requests.total, 1);
    const cpu = new Map(
      [...cpuMs].map(([role, byKind]) => [role, new Map([...byKind].map(([k, ms]) => [k, perSig(ms)]))] as const),
    );
    return {
      workers,
      perSecond: result.requests.total / result.duration,
      p50Ms: result.latency.p50,
      p99Ms: result.latency.p99,
      errors: result.non2xx + result.errors,
      cpu,
      loadUs: perSig((loadUsed.user + loadUsed.system) / 1000),
    };
  } finally {
    await server.stop();
  }
}

/**
 * The section's text: `--workers` at each of `counts` (a row each, in that order), beside raw SoftHSM on one thread
 * measured in the same run, with the CPU per signature by process and thread kind.
 */
export async function measureWorkers(counts: number[], seconds: number, warmUpSeconds: number): Promise<string> {
  log(`raw SoftHSM, P-256, 1 thread, ${seconds} s`);
  const raw = rawSoftHsmP256(seconds);
  const rows: Row[] = [];
  for (const workers of counts) rows.push(await measure(workers, seconds, warmUpSeconds));

  const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits });
  const sum = (m: CpuByKind | undefined) => [...(m?.values() ?? [])].reduce((a, b) => a + b, 0);
  const kinds = [...Object.values(THREAD_KIND), 'other'];
  const lines = [
    `Measured ${new Date().toISOString().slice(0, 10)} on ${cpus().length} × ${cpus()[0]?.model ?? 'unknown CPU'}, Node ${process.version}, ${seconds} s per row; raw SoftHSM P-256 on one thread in the same run: ${fmt(raw)}/s.`,
    '',
    '| workers | signatures/s | vs `--workers 1` | vs raw SoftHSM (1 thread) | p50 ms | p99 ms | errors | service CPU µs/signature | load generator µs |',
    '|---|---|---|---|---|---|---|---|---|',
    ...rows.map((r) => {
      const serviceUs = [...r.cpu.values()].reduce((a, m) => a + sum(m), 0);
      const base = rows[0]?.perSecond ?? Number.NaN;
      return `| ${r.workers} | ${fmt(r.perSecond)} | ${fmt(r.perSecond / base, 2)}x | ${fmt(r.perSecond / raw, 2)}x | ${fmt(r.p50Ms, 1)} | ${fmt(r.p99Ms, 1)} | ${r.errors} | ${fmt(serviceUs)} | ${fmt(r.loadUs)} |`;
    }),
    '',
    'CPU µs per signature by process and thread kind:',
    '',
    `| workers | process | ${kinds.join(' | ')} |`,
    `|---|---|${kinds.map(() => '---').join('|')}|`,
    ...rows.flatMap((r) =>
      [...r.cpu].map(
        ([role, byKind]) => `| ${r.workers} | ${role} | ${kinds.map((k) => fmt(byKind.get(k) ?? 0)).join(' | ')} |`,
      ),
    ),
  ];
  return `<!-- bench:workers:start -->\n${lines.join('\n')}\n<!-- bench:workers:end -->`;
}

/** Replaces the section between its markers in docs/benchmarks.md (under "Request workers"). */
export function writeWorkersSection(section: string): void {
  const docPath = packagePath('docs', 'benchmarks.md');
  let doc = readFileSync(docPath, 'utf8');
  if (!doc.includes('<!-- bench:workers:start -->')) {
    doc += '\n## Request workers\n\n<!-- bench:workers:start -->\n<!-- bench:workers:end -->\n';
  }
  doc = doc.replace(/<!-- bench:workers:start -->[\s\S]*<!-- bench:workers:end -->/, section);
  writeFileSync(docPath, doc);
}

// Run directly.
if (process.argv[1]?.endsWith('workers.js')) {
  const section = await measureWorkers(
    (process.env.BENCH_WORKERS ?? '1,2').split(',').map(Number),
    Number(process.env.BENCH_SECONDS || 8),
    Number(process.env.BENCH_WARMUP_SECONDS || 3),
  );
  if (process.env.BENCH_WRITE !== '0') writeWorkersSection(section);
  process.stdout.write(`${section}\n`);
}
