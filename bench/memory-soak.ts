// Memory under sustained load (issue 34: RSS at most 300 MB per worker and flat over a 10-minute soak): a `signbridge
// server` process (and, with workers, each of its worker processes) signing P-256 at autocannon's full speed with
// 256 connections for BENCH_SOAK_SECONDS (default 600); the resident set of every process of the service sampled
// every 10 s from /proc. Flat means the last third's mean is within 10% of the middle third's: the first third is
// warm-up (caches, pools, JIT, SQLite's page cache). Run alone: `node dist/bench/memory-soak.js`; prints a
// markdown table and one JSON line. Linux only (/proc). `BENCH_WORKERS=2 BENCH_SOAK_CONNECTIONS=64` is issue 46's
// case. Every process of the service also loads bench/memory-probe.ts, so the report splits each one's resident
// set into V8's heap (its young and old generations), what V8 knows of outside it, and the native rest.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createApiKeyCli, postAction, startServerProcess } from '../test/helpers/cli.js';
import { makeTempDir } from '../test/helpers/service.js';
import type { MemorySample } from './memory-probe.js';
import { signLoad } from './sign-load.js';

const log = (msg: string) => process.stderr.write(`[bench:soak] ${msg}\n`);
const SECONDS = Number(process.env.BENCH_SOAK_SECONDS ?? 600);
const CONNECTIONS = Number(process.env.BENCH_SOAK_CONNECTIONS ?? 256);
const SAMPLE_MS = 10_000;
// Thirds and a slope need a few samples: at least 30 s (four samples, one every 10 s).
const refusal = !(SECONDS >= 30)
  ? `BENCH_SOAK_SECONDS must be a number of seconds, 30 or more (got ${process.env.BENCH_SOAK_SECONDS})`
  : !(Number.isInteger(CONNECTIONS) && CONNECTIONS >= 1)
    ? `BENCH_SOAK_CONNECTIONS must be a whole number, 1 or more (got ${process.env.BENCH_SOAK_CONNECTIONS})`
    : undefined;
if (refusal) {
  process.stderr.write(`[bench:soak] ${refusal}\n`);
  process.exit(2);
}

/** VmRSS of a process in MB, or undefined once it ended. */
function rssMb(pid: number): number | undefined {
  try {
    const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
    return kb === undefined ? undefined : Number(kb) / 1024;
  } catch {
    return undefined;
  }
}

/** The process and its descendants (the service's workers, with --workers). */
function family(root: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const ppid = Number(readFileSync(`/proc/${entry}/stat`, 'utf8').split(') ').at(-1)?.split(' ')[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(entry)]);
    } catch {
      // ended meanwhile
    }
  }
  const out: number[] = [];
  const walk = (pid: number) => {
    out.push(pid);
    for (const c of children.get(pid) ?? []) walk(c);
  };
  walk(root);
  return out;
}

interface Sample {
  atS: number;
  byPid: Map<number, number>;
}

const dataDir = makeTempDir('sb-bench-soak-');
const operator = createApiKeyCli(dataDir, 'operator');
const workers = process.env.BENCH_WORKERS;
const probeFile = join(dataDir, 'memory-probe.jsonl');
const probe = fileURLToPath(new URL('./memory-probe.js', import.meta.url));
const server = await startServerProcess(['--data-dir', dataDir, ...(workers ? ['--workers', workers] : [])], {
  SIGNBRIDGE_LOG_LEVEL: 'warn',
  // The probe's path must hold no space (startServerProcess splits the arguments on spaces).
  SIGNBRIDGE_SERVER_NODE_ARGS: `${process.env.SIGNBRIDGE_SERVER_NODE_ARGS ?? ''} --import ${probe}`,
  SIGNBRIDGE_MEMORY_PROBE_FILE: probeFile,
  SIGNBRIDGE_MEMORY_PROBE_MS: String(SAMPLE_MS),
});
const samples: Sample[] = [];
let total = 0;
try {
  await postAction(server.url, 'create_tenant', operator, { tenant_id: 'soak', key_spec: 'ECC_NIST_P256' });
  const signer = createApiKeyCli(dataDir, 'signer', 'soak');
  const root = server.child.pid as number;
  const started = Date.now();
  const sample = () => {
    const byPid = new Map<number, number>();
    for (const pid of family(root)) {
      const mb = rssMb(pid);
      if (mb !== undefined) byPid.set(pid, mb);
    }
    samples.push({ atS: (Date.now() - started) / 1000, byPid });
  };
  sample();
  const timer = setInterval(sample, SAMPLE_MS);
  log(`${CONNECTIONS} connections for ${SECONDS} s`);
  const result = await signLoad({
    url: server.url,
    signer,
    tenantId: 'soak',
    connections: CONNECTIONS,
    duration: SECONDS,
    fill: 3,
  });
  clearInterval(timer);
  sample();
  total = result.requests.total;
} finally {
  await server.stop();
}

const largest = samples.map((s) => Math.max(...s.byPid.values()));
const third = Math.max(1, Math.floor(samples.length / 3));
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const middle = mean(largest.slice(third, 2 * third));
const last = mean(largest.slice(-third));
const growth = (last / middle - 1) * 100;
// The slope over the last two thirds (least squares, MB per second), per million signatures at the run's mean rate:
// a leak of a few bytes a signature stays "flat" by the thirds but shows here.
const tail = samples.slice(third).map((s, i) => ({ t: s.atS, mb: largest[third + i] as number }));
const meanT = mean(tail.map((p) => p.t));
const meanMb = mean(tail.map((p) => p.mb));
const slope =
  tail.reduce((a, p) => a + (p.t - meanT) * (p.mb - meanMb), 0) / tail.reduce((a, p) => a + (p.t - meanT) ** 2, 0);
const perMillion = total > 0 ? (slope * SECONDS * 1e6) / total : 0;
const rows = samples.map(
  (s) => `| ${s.atS.toFixed(0)} | ${[...s.byPid.values()].map((v) => v.toFixed(0)).join(' / ')} |`,
);
process.stdout.write(
  [
    `Soak: P-256 \`sign\`, ${CONNECTIONS} connections, ${SECONDS} s, ${total.toLocaleString('en')} signatures` +
      (workers ? `, --workers ${workers}` : '') +
      `; RSS of each process of the service (MB), sampled every ${SAMPLE_MS / 1000} s:`,
    '',
    '| s | RSS per process (MB) |',
    '|---|---|',
    ...rows,
    '',
    `Largest process: peak ${Math.max(...largest).toFixed(0)} MB (aim: at most 300), mean of the last third ${last.toFixed(0)} MB ` +
      `against ${middle.toFixed(0)} MB in the middle third: ${growth >= 0 ? '+' : ''}${growth.toFixed(1)}% (flat: within 10%); ` +
      `slope over the last two thirds ${perMillion.toFixed(1)} MB per million signatures (${((perMillion * 2 ** 20) / 1e6).toFixed(1)} B each).`,
    '',
  ].join('\n'),
);

// Per process (the primary, each worker by its cluster id): its resident set over the run and, at its last sample,
// where it goes. A worker that was replaced shows under its pid's role again (the role names the cluster id).
const probes: MemorySample[] = existsSync(probeFile)
  ? readFileSync(probeFile, 'utf8')
      .trim()
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line) as MemorySample)
  : [];
const mb = (bytes: number) => bytes / 2 ** 20;
const byProcess = new Map<string, MemorySample[]>();
// Each thread's last sample, by its process: the heaps of its isolates, taken out of the process's native rest.
const lastOfThread = new Map<string, MemorySample>();
for (const p of probes) {
  if (p.role.startsWith('thread ')) {
    lastOfThread.set(`${p.pid} ${p.role}`, p);
    continue;
  }
  const key = `${p.role} (pid ${p.pid})`;
  byProcess.set(key, [...(byProcess.get(key) ?? []), p]);
}
const threadsOf = (pid: number) => [...lastOfThread.values()].filter((t) => t.pid === pid);
const perProcess = [...byProcess].map(([name, list]) => {
  const rss = list.map((p) => mb(p.rss));
  const n = Math.max(1, Math.floor(rss.length / 3));
  const end = list.at(-1) as MemorySample;
  const threads = threadsOf(end.pid);
  const threadHeaps = threads.reduce((sum, t) => sum + t.heapTotal + t.external, 0);
  return {
    name,
    samples: rss.length,
    firstMb: rss[0] as number,
    middleMb: mean(rss.slice(n, 2 * n)),
    lastMb: mean(rss.slice(-n)),
    peakMb: Math.max(...rss),
    privatePeakMb: Math.max(...list.map((p) => mb(p.rssAnon))),
    end: {
      rss: mb(end.rss),
      young: mb(end.newSpace),
      old: mb(end.oldSpace),
      heapTotal: mb(end.heapTotal),
      heapUsed: mb(end.heapUsed),
      external: mb(end.external),
      threads: threads.length,
      threadHeaps: mb(threadHeaps),
      threadYoung: mb(threads.reduce((sum, t) => sum + t.newSpace, 0)),
      native: mb(end.rss - end.heapTotal - end.external - threadHeaps),
    },
  };
});
const f = (x: number) => x.toFixed(0);
process.stdout.write(
  [
    "Per process: resident set (MB) over the run, its private part's peak (RssAnon: less the node binary's and the",
    "libraries' pages, which every process of the host shares), and where it went at the last sample (V8 heap = young + old +",
    "V8's other spaces; threads: the heaps and external memory of its threads' isolates (signing, SQLite), their",
    'young generations in brackets; native = RSS - heap - external - threads: Node, SQLite, SoftHSM, malloc):',
    '',
    '| process | first | middle third | last third | peak | private peak | last: heap (young / old) | heap used | external | threads (young) | native |',
    '|---|---|---|---|---|---|---|---|---|---|---|',
    ...perProcess.map(
      (p) =>
        `| ${p.name} | ${f(p.firstMb)} | ${f(p.middleMb)} | ${f(p.lastMb)} | ${f(p.peakMb)} | ${f(p.privatePeakMb)} | ` +
        `${f(p.end.heapTotal)} (${f(p.end.young)} / ${f(p.end.old)}) | ${f(p.end.heapUsed)} | ${f(p.end.external)} | ` +
        `${f(p.end.threadHeaps)} in ${p.end.threads} (${f(p.end.threadYoung)}) | ${f(p.end.native)} |`,
    ),
    '',
  ].join('\n'),
);
process.stdout.write(
  `${JSON.stringify({ seconds: SECONDS, connections: CONNECTIONS, signatures: total, peakMb: Math.max(...largest), middleMb: middle, lastMb: last, mbPerMillionSignatures: perMillion, perProcess })}\n`,
);
