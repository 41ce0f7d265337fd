// The full path (module -> daemon -> service over HTTP -> SoftHSM) with the daemon's coalescing off and on, at 1,
// 2 and 16 client threads, beside raw SoftHSM at the same thread counts and p11-kit's forwarder at 2 threads (issue
// 34's aims). Run by `npm run bench` unless BENCH_COALESCE=0, or alone: `node dist/bench/coalescing.js`
// (BENCH_SECONDS, BENCH_WARMUP_SECONDS; BENCH_WRITE=0 prints without writing docs/benchmarks.md).
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { MODULE_PATH } from '../src/cli/module-path.js';
import { packagePath } from '../src/paths.js';
import { makeTempDir } from '../test/helpers/service.js';
import {
  makeBenchToken,
  measure,
  measureModule,
  P11KIT_CLIENT,
  P11KIT_PATH,
  type PathRow,
  REMOTE_PATH,
  startBenchService,
  withP11Kit,
  withRemoteDaemon,
} from './paths.js';

const THREADS = [1, 2, 16] as const;
const DIRECT = 'SoftHSM direct';
const OFF = `${REMOTE_PATH}, coalescing off`;
const ON = `${REMOTE_PATH}, coalescing on`;
const KEYS = ['RSA_2048', 'ECC_NIST_P256'] as const;

export async function measureCoalescing(seconds: number, warmUpSeconds: number): Promise<PathRow[]> {
  if (!existsSync(MODULE_PATH)) throw new Error('build the native code first (scripts/setup.sh)');
  const dir = makeTempDir('sb-coalesce-');
  const token = makeBenchToken(dir);
  const rows: PathRow[] = [];
  for (const kind of ['rsa', 'ec'] as const) {
    rows.push(...measure(DIRECT, token.softhsm, 'bench', '1234', kind, seconds, token.hsmEnv, THREADS));
  }
  await withP11Kit(dir, token, (clientEnv) => {
    for (const kind of ['rsa', 'ec'] as const) {
      rows.push(...measure(P11KIT_PATH, P11KIT_CLIENT, 'bench', '1234', kind, seconds, clientEnv, [2]));
    }
  });
  const server = await startBenchService(dir, join(dir, 'svc'));
  try {
    for (const [path, yaml] of [
      [OFF, 'coalesce:\n  enabled: false\n'],
      [ON, 'coalesce:\n  enabled: true\n'],
    ] as const) {
      await withRemoteDaemon(dir, server.url, yaml, (socket) => {
        rows.push(...measureModule(path, socket, seconds, warmUpSeconds, THREADS));
      });
    }
  } finally {
    await server.stop();
  }
  return rows;
}

const fmt = (n: number | undefined, digits = 0) =>
  n === undefined || Number.isNaN(n)
    ? 'n/a'
    : n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });

export function coalescingSection(rows: PathRow[], seconds: number): string {
  const at = (path: string, key: string, threads: number) =>
    rows.find((r) => r.path === path && r.key === key && r.threads === threads);
  const ratio = (a: PathRow | undefined, b: PathRow | undefined) =>
    a && b && b.perSecond > 0 ? fmt(a.perSecond / b.perSecond, 2) : 'n/a';
  const table = [
    '| path | key | threads | signatures/s | p50 ms | p99 ms | × raw SoftHSM (same threads) |',
    '|---|---|---|---|---|---|---|',
    ...rows.map(
      (r) =>
        `| ${r.path} | ${r.key} | ${r.threads} | ${fmt(r.perSecond)} | ${fmt(r.p50Ms, 3)} | ${fmt(r.p99Ms, 2)} | ${ratio(r, at(DIRECT, r.key, r.threads))} |`,
    ),
  ].join('\n');
  const lines = KEYS.flatMap((key) => [
    `${key}, coalescing on over off: ${THREADS.map((t) => `${t} thread(s) ${ratio(at(ON, key, t), at(OFF, key, t))}x`).join(', ')}`,
    `${key} full path at 2 threads over p11-kit's forwarder at 2 threads: coalescing off ${ratio(at(OFF, key, 2), at(P11KIT_PATH, key, 2))}x, on ${ratio(at(ON, key, 2), at(P11KIT_PATH, key, 2))}x${key === 'ECC_NIST_P256' ? ' (aim: 0.6x)' : ''}`,
  ]);
  const cpu = cpus()[0]?.model ?? 'unknown CPU';
  const measured = `Measured ${new Date().toISOString().slice(0, 10)} on ${cpus().length} × ${cpu}, Node ${process.version}, ${seconds} s per row.`;
  return [
    '<!-- bench:coalescing:start -->',
    measured,
    '',
    table,
    '',
    ...lines.map((l) => `- ${l}`),
    '<!-- bench:coalescing:end -->',
  ].join('\n');
}

export function writeCoalescingSection(section: string): void {
  const docPath = packagePath('docs', 'benchmarks.md');
  let doc = readFileSync(docPath, 'utf8');
  if (!doc.includes('<!-- bench:coalescing:start -->')) {
    doc += '\n## The daemon coalescing signatures\n\n<!-- bench:coalescing:start -->\n<!-- bench:coalescing:end -->\n';
  }
  doc = doc.replace(/<!-- bench:coalescing:start -->[\s\S]*<!-- bench:coalescing:end -->/, section);
  writeFileSync(docPath, doc);
}

// Run directly.
if (process.argv[1]?.endsWith('coalescing.js')) {
  const seconds = Number(process.env.BENCH_SECONDS || 8);
  const warmUpSeconds = Number(process.env.BENCH_WARMUP_SECONDS || 3);
  const section = coalescingSection(await measureCoalescing(seconds, warmUpSeconds), seconds);
  if (process.env.BENCH_WRITE !== '0') writeCoalescingSection(section);
  process.stdout.write(`${section}\n`);
}
