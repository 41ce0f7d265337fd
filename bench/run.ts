// `npm run bench`: measures, in one run on this machine, raw SoftHSM signing, the software key store's arithmetic
// (ML-DSA-65, SM2) and the service's `sign` over HTTP (autocannon at concurrency 1 and 32) for RSA-2048, P-256,
// ML-DSA-65 and SM2, ML-DSA-65 on each Node runtime (bench/ml-dsa-runtimes.ts: noble and, on Node 24, node:crypto
// and the service's native addon),
// and writes docs/benchmarks.md.
// BENCH_POSTGRES=0 skips the PostgreSQL rows.
// Environment: BENCH_SECONDS (default 8) per measurement; BENCH_WARMUP_SECONDS (default 3) of unrecorded load per key
// on each Node stack before its rows; BENCH_PATHS=0 skips the bridge paths (their section is left as it was);
// BENCH_ML_DSA=0 skips ML-DSA-65 per runtime (noble, node:crypto and the service's addon; likewise left as it was);
// BENCH_COALESCE=0 skips the daemon's coalescing section (bench/coalescing.ts).
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import http from 'node:http';
import { cpus } from 'node:os';
import { performance } from 'node:perf_hooks';
import autocannon from 'autocannon';
import { inputLength } from '../src/crypto/algorithms.js';
import { packagePath } from '../src/paths.js';
import { createApiKeyCli, postAction, runCli, type ServerProcess, startServerProcess } from '../test/helpers/cli.js';
import { startPostgresCluster } from '../test/helpers/postgres.js';
import { makeTempDir } from '../test/helpers/service.js';
import { coalescingSection, measureCoalescing, writeCoalescingSection } from './coalescing.js';
import { type CpuShare, countCpu } from './cpu.js';
import { awsKeyFor, signedKmsSign, sigv4CheckMicros } from './kms-sign.js';
import { measureMlDsaRuntimes, mlDsaRuntimeSection, writeMlDsaRuntimeSection } from './ml-dsa-runtimes.js';
import { measurePaths } from './paths.js';
import { measureSoftwareSigning } from './raw-software.js';
import { summarise } from './stats.js';
import { logSection, measureTransparencyLog, writeLogSection } from './transparency.js';
import { measureWorkers, writeWorkersSection } from './workers.js';

/** A whole number of seconds from the environment, or the default; anything else stops the run with a message. */
function secondsFromEnv(name: string, fallback: number, min: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!/^\s*\d+\s*$/.test(raw) || value < min) {
    process.stderr.write(`bench: ${name} must be a whole number of seconds, at least ${min}; got "${raw}"\n`);
    process.exit(2);
  }
  return value;
}
const seconds = secondsFromEnv('BENCH_SECONDS', 8, 1);
const warmUpSeconds = secondsFromEnv('BENCH_WARMUP_SECONDS', 3, 0);
interface Row {
  path: string;
  spec: string;
  concurrency: number;
  perSecond: number;
  p50Ms: number;
  p99Ms: number;
  errors: number;
  /** CPU per signature by process (concurrency-32 rows of the service on SQLite and on PostgreSQL). */
  cpu?: CpuShare;
}
const rows: Row[] = [];
const log = (msg: string) => process.stderr.write(`[bench] ${msg}\n`);

log(`raw SoftHSM (pkcs11js loop, ${seconds} s per key)`);
const raw = execFileSync(
  process.execPath,
  [packagePath('dist', 'bench', 'raw-softhsm.js'), makeTempDir('sb-bench-raw-'), String(seconds)],
  {
    encoding: 'utf8',
  },
);
for (const line of raw.trim().split('\n')) {
  const r = JSON.parse(line);
  const path =
    r.path === 'key-store-thread'
      ? 'service key store alone (1 in flight, always on a signing thread)'
      : r.path === 'key-store-inline'
        ? 'service key store alone (1 in flight, default: inline while the threads are idle)'
        : r.path === 'key-store'
          ? `service key store alone (${r.threads} in flight)`
          : 'SoftHSM direct (pkcs11js, 1 thread)';
  rows.push({
    path,
    spec: r.spec,
    concurrency: r.threads,
    perSecond: r.perSecond,
    p50Ms: r.p50Ms,
    p99Ms: r.p99Ms,
    errors: 0,
  });
}

log(
  `the software key store's arithmetic alone (ML-DSA-65 as the key store signs it here, SM2; 1 thread, ${seconds} s per key)`,
);
const softwareCpuMs = new Map<string, number>();
for (const { cpuMs, library, ...r } of measureSoftwareSigning(seconds)) {
  rows.push({ path: `library direct (${library}, 1 thread)`, concurrency: 1, errors: 0, ...r });
  softwareCpuMs.set(r.spec, cpuMs);
}

// BENCH_ML_DSA=0 skips ML-DSA-65 per runtime (its section is left as it was).
const mlDsaRuntimeRows = process.env.BENCH_ML_DSA === '0' ? undefined : measureMlDsaRuntimes(seconds, log);

log('starting the service (embedded default)');
/** CPU µs of one SigV4 check (bench/kms-sign.ts), measured beside the KMS row. */
let sigv4Us: number | undefined;
const dataDir = makeTempDir('sb-bench-svc-');
const operator = createApiKeyCli(dataDir, 'operator');
const server = await startServerProcess(['--data-dir', dataDir], { SIGNBRIDGE_LOG_LEVEL: 'warn' });
try {
  const specs = [
    ['bench-rsa', 'RSA_2048', 'RSASSA_PKCS1_V1_5_SHA_256'],
    ['bench-p256', 'ECC_NIST_P256', 'ECDSA_SHA_256'],
    ['bench-mldsa65', 'ML_DSA_65', 'ML_DSA_SHAKE_256'],
    ['bench-sm2', 'SM2', 'SM2DSA'],
  ] as const;
  const requests = new Map<string, { signer: string; body: string }>();
  for (const [tenant, spec, algorithm] of specs) {
    const created = await postAction(server.url, 'create_tenant', operator, { tenant_id: tenant, key_spec: spec });
    if (created.status !== 201) throw new Error(`create_tenant ${tenant}: ${JSON.stringify(created.body)}`);
    const signer = createApiKeyCli(dataDir, 'signer', tenant);
    const body = JSON.stringify({
      action: 'sign',
      tenant_id: tenant,
      algorithm,
      // μ (64 bytes) for ML-DSA, e (32) for SM2: opaque to the service, so a constant one costs what any does.
      hash: Buffer.alloc(inputLength(algorithm), 7).toString('base64'),
    });
    requests.set(spec, { signer, body });
  }
  // A long-running service is warm: in its first seconds V8 runs much of the request path in baseline tiers.
  for (const [, spec] of specs) {
    if (warmUpSeconds <= 0) break;
    log(`warming up: ${spec}, 8 connections, ${warmUpSeconds} s (unrecorded)`);
    const { signer, body } = requests.get(spec) as { signer: string; body: string };
    await autocannon({
      url: `${server.url}/v1/sign`,
      method: 'POST',
      headers: { authorization: `Bearer ${signer}`, 'content-type': 'application/json' },
      body,
      connections: 8,
      duration: warmUpSeconds,
    });
  }
  for (const [, spec] of specs) {
    const { signer, body } = requests.get(spec) as { signer: string; body: string };
    // One connection: a sequential client timing each request to the microsecond (autocannon reports whole
    // milliseconds, too coarse for the "within 1 ms of raw" aim).
    log(`service sign ${spec}, 1 connection (sequential, precise timing), ${seconds} s`);
    const one = await sequentialPosts(`${server.url}/v1/sign`, signer, body, seconds);
    rows.push({
      path: 'service `sign` over HTTP (1 client, sequential)',
      spec,
      concurrency: 1,
      ...summarise(one.latencies, seconds),
      errors: one.errors,
    });
    for (const connections of [32]) {
      log(`service sign ${spec}, ${connections} connection(s), ${seconds} s`);
      const cpuUsed = countCpu([server.child.pid as number]);
      const result = await autocannon({
        url: `${server.url}/v1/sign`,
        method: 'POST',
        headers: { authorization: `Bearer ${signer}`, 'content-type': 'application/json' },
        body,
        connections,
        duration: seconds,
      });
      rows.push({
        path: 'service `sign` over HTTP (autocannon)',
        spec,
        concurrency: connections,
        perSecond: result.requests.total / result.duration,
        p50Ms: result.latency.p50,
        p99Ms: result.latency.p99,
        errors: result.non2xx + result.errors,
        cpu: cpuUsed(result.requests.total, result.duration),
      });
    }
  }
  // The same P-256 signature through the KMS endpoint (bench/kms-sign.ts): a SigV4-signed request, replayed.
  const kmsCredentials = awsKeyFor(dataDir, 'bench-p256');
  const kmsRequest = await signedKmsSign(server.url, 'bench-p256', kmsCredentials);
  log('the SigV4 check alone (in this process)');
  sigv4Us = await sigv4CheckMicros(kmsRequest, kmsCredentials, Math.min(seconds, 3));
  const kmsLoad = (duration: number) =>
    autocannon({
      url: `${server.url}${kmsRequest.path}`,
      method: 'POST',
      // autocannon writes Host and Content-Length itself (the same values the SDK signed); twice would not verify.
      headers: Object.fromEntries(
        Object.entries(kmsRequest.headers).filter(([name]) => !['host', 'content-length'].includes(name.toLowerCase())),
      ),
      body: kmsRequest.body,
      connections: 32,
      duration,
    });
  if (warmUpSeconds > 0) await kmsLoad(warmUpSeconds);
  log(`service KMS Sign ECC_NIST_P256, 32 connections, ${seconds} s`);
  const kmsCpu = countCpu([server.child.pid as number]);
  const kms = await kmsLoad(seconds);
  rows.push({
    path: 'service KMS `Sign` over HTTP (SigV4, autocannon)',
    spec: 'ECC_NIST_P256',
    concurrency: 32,
    perSecond: kms.requests.total / kms.duration,
    p50Ms: kms.latency.p50,
    p99Ms: kms.latency.p99,
    errors: kms.non2xx + kms.errors,
    cpu: kmsCpu(kms.requests.total, kms.duration),
  });
} finally {
  await server.stop();
}

/** POSTs `body` one request at a time over one kept-alive connection for `seconds`; latencies in ms. */
async function sequentialPosts(url: string, token: string, body: string, seconds: number) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const latencies: number[] = [];
  let errors = 0;
  const post = () =>
    new Promise<number>((resolve, reject) => {
      const req = http.request(
        url,
        {
          method: 'POST',
          agent,
          headers: {
            authorization: `Bearer ${token}`,
            'content-type': 'application/json',
            'content-length': Buffer.byteLength(body),
          },
        },
        (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  for (let i = 0; i < 200; i++) await post(); // warm-up: JIT, caches, the connection
  const end = performance.now() + seconds * 1000;
  while (performance.now() < end) {
    const t0 = performance.now();
    const status = await post();
    latencies.push(performance.now() - t0);
    if (status !== 200) errors++;
  }
  agent.destroy();
  return { latencies, errors };
}

// Issue 16: the same `sign` at concurrency 32 with the state in PostgreSQL (a private cluster, fsync on): one
// instance, then two instances on one data dir (one token) splitting the 32 connections.
if (process.env.BENCH_POSTGRES !== '0') {
  log('PostgreSQL: a private cluster, then the service on it (1 instance, then 2)');
  const cluster = await startPostgresCluster();
  const pgDataDir = makeTempDir('sb-bench-pg-');
  const database = cluster.createDatabase('bench');
  const instances: ServerProcess[] = [];
  try {
    const start = () =>
      startServerProcess(['--data-dir', pgDataDir, '--database', database], { SIGNBRIDGE_LOG_LEVEL: 'warn' });
    instances.push(await start());
    const admin = (...args: string[]) => runCli(['admin', ...args, '--database', database]).stdout.trim();
    const pgOperator = admin('api-key', 'create', '--role', 'operator');
    const pgRequests = new Map<string, { signer: string; body: string }>();
    for (const [tenant, spec, algorithm] of [
      ['pg-rsa', 'RSA_2048', 'RSASSA_PKCS1_V1_5_SHA_256'],
      ['pg-p256', 'ECC_NIST_P256', 'ECDSA_SHA_256'],
    ] as const) {
      const made = await postAction(instances[0]?.url as string, 'create_tenant', pgOperator, {
        tenant_id: tenant,
        key_spec: spec,
      });
      if (made.status !== 201) throw new Error(`create_tenant ${tenant}: ${JSON.stringify(made.body)}`);
      const signer = admin('api-key', 'create', '--role', 'signer', '--tenant', tenant);
      const body = JSON.stringify({
        action: 'sign',
        tenant_id: tenant,
        algorithm,
        hash: Buffer.alloc(32, 7).toString('base64'),
      });
      pgRequests.set(spec, { signer, body });
    }
    /** autocannon against each instance at once, `connections` split evenly; the rates add up. */
    const load = async (spec: string, connections: number, duration: number) => {
      const { signer, body } = pgRequests.get(spec) as { signer: string; body: string };
      const cpuUsed = countCpu(instances.map((instance) => instance.child.pid as number));
      const results = await Promise.all(
        instances.map((instance) =>
          autocannon({
            url: `${instance.url}/v1/sign`,
            method: 'POST',
            headers: { authorization: `Bearer ${signer}`, 'content-type': 'application/json' },
            body,
            connections: connections / instances.length,
            duration,
          }),
        ),
      );
      return {
        perSecond: results.reduce((n, r) => n + r.requests.total / r.duration, 0),
        p50Ms: Math.max(...results.map((r) => r.latency.p50)),
        p99Ms: Math.max(...results.map((r) => r.latency.p99)),
        errors: results.reduce((n, r) => n + r.non2xx + r.errors, 0),
        cpu: cpuUsed(
          results.reduce((n, r) => n + r.requests.total, 0),
          duration,
        ),
      };
    };
    for (const count of [1, 2]) {
      if (count === 2) instances.push(await start());
      for (const spec of ['RSA_2048', 'ECC_NIST_P256']) {
        if (warmUpSeconds > 0) await load(spec, 8 * count, warmUpSeconds);
        log(`service sign ${spec} on PostgreSQL, ${count} instance(s), 32 connections, ${seconds} s`);
        const r = await load(spec, 32, seconds);
        rows.push({
          path: `service \`sign\` on PostgreSQL, ${count} instance${count > 1 ? 's' : ''}`,
          spec,
          concurrency: 32,
          ...r,
        });
      }
    }
  } finally {
    for (const instance of instances) await instance.stop();
    cluster.stop();
  }
}

const find = (path: string, spec: string, c: number) =>
  rows.find((r) => r.path.startsWith(path) && r.spec === spec && r.concurrency === c);
const rawRsa = find('SoftHSM', 'RSA_2048', 1);
const svcRsa32 = find('service `sign`', 'RSA_2048', 32);
const svcP256 = find('service `sign`', 'ECC_NIST_P256', 32);
const fmt = (n: number | undefined, d = 0) => (n === undefined ? 'n/a' : n.toFixed(d));
const goals = [
  `RSA-2048 at concurrency 32 vs single-thread raw SoftHSM: ${fmt(svcRsa32 && rawRsa ? svcRsa32.perSecond / rawRsa.perSecond : undefined, 2)}x (aim 1.5x)`,
  `P-256 at concurrency 32: ${fmt(svcP256?.perSecond)} signatures/s (aim 4,000)`,
  ...['RSA_2048', 'ECC_NIST_P256'].map((spec) => {
    const r = find('SoftHSM', spec, 1);
    const s = find('service `sign` over HTTP (1 client', spec, 1);
    return `${spec} median latency at concurrency 1: service ${fmt(s?.p50Ms, 2)} ms vs raw ${fmt(r?.p50Ms, 3)} ms (aim: within 1 ms)`;
  }),
  ...(find('service `sign` on PostgreSQL, 1', 'ECC_NIST_P256', 32)
    ? (() => {
        const sqlite = svcP256?.perSecond;
        const one = find('service `sign` on PostgreSQL, 1', 'ECC_NIST_P256', 32)?.perSecond;
        const two = find('service `sign` on PostgreSQL, 2', 'ECC_NIST_P256', 32)?.perSecond;
        return [
          `P-256 at concurrency 32 on PostgreSQL, 1 instance: ${fmt(one)}/s = ${fmt(one && sqlite ? (100 * one) / sqlite : undefined)}% of SQLite's ${fmt(sqlite)}/s (aim: at least 80%)`,
          `P-256 at concurrency 32 on PostgreSQL, 2 instances: ${fmt(two)}/s vs 1 instance ${fmt(one)}/s (aim: not slower)`,
        ];
      })()
    : []),
  (() => {
    const kmsRow = find('service KMS `Sign`', 'ECC_NIST_P256', 32);
    const plain = find('service `sign` over HTTP (autocannon)', 'ECC_NIST_P256', 32);
    const added =
      kmsRow?.cpu && plain?.cpu
        ? (100 * (kmsRow.cpu.serviceUs - plain.cpu.serviceUs)) / plain.cpu.serviceUs
        : undefined;
    const share = sigv4Us !== undefined && plain?.cpu ? (100 * sigv4Us) / plain.cpu.serviceUs : undefined;
    return (
      `the SigV4 check: ${fmt(sigv4Us, 1)} µs CPU per request = ${fmt(share, 1)}% of a P-256 signature's service CPU ` +
      `(${fmt(plain?.cpu?.serviceUs)} µs through POST /v1/sign at concurrency 32; aim: at most 20%). The whole KMS ` +
      `path at concurrency 32: ${fmt(kmsRow?.perSecond)}/s vs POST /v1/sign ${fmt(plain?.perSecond)}/s, service CPU ` +
      `${fmt(kmsRow?.cpu?.serviceUs)} vs ${fmt(plain?.cpu?.serviceUs)} µs per signature (${fmt(added, 1)}%: the check, ` +
      "the protocol's larger requests and answers, the audit entry's `via`)"
    );
  })(),
  // A software signature costs its CPU wherever it runs: the library's one-thread rate times the cores is the bound.
  ...['ML_DSA_65', 'SM2'].map((spec) => {
    const cpuMs = softwareCpuMs.get(spec);
    const s32 = find('service `sign` over HTTP (autocannon)', spec, 32);
    const bound = cpuMs ? (1000 / cpuMs) * cpus().length : undefined;
    return `${spec} at concurrency 32: ${fmt(s32?.perSecond)} signatures/s; bound: ${fmt(cpuMs, 2)} ms CPU per signature, ${cpus().length} cores: ${fmt(bound)}/s (reached ${fmt(s32 && bound ? (100 * s32.perSecond) / bound : undefined)}%)`;
  }),
];

const table = [
  '| path | key | concurrency | signatures/s | p50 ms | p99 ms | errors |',
  '|---|---|---|---|---|---|---|',
  ...rows.map(
    (r) =>
      `| ${r.path} | ${r.spec} | ${r.concurrency} | ${fmt(r.perSecond)} | ${fmt(r.p50Ms, 2)} | ${fmt(r.p99Ms, 2)} | ${r.errors} |`,
  ),
].join('\n');
// Where the CPU of the 2 cores went, per signature: the arithmetic behind the PostgreSQL aims.
const cpuRows = rows.filter((r) => r.cpu);
const cpuTable = [
  '| path | key | signatures/s | service µs/signature | PostgreSQL µs/signature | load generator µs/signature | cores busy |',
  '|---|---|---|---|---|---|---|',
  ...cpuRows.map((r) => {
    const c = r.cpu as CpuShare;
    return `| ${r.path} | ${r.spec} | ${fmt(r.perSecond)} | ${c.serviceUs} | ${c.postgresUs} | ${c.loadUs} | ${c.cores} |`;
  }),
].join('\n');
const cpu = cpus()[0]?.model ?? 'unknown CPU';
const measured = `Measured ${new Date().toISOString().slice(0, 10)} on ${cpus().length} × ${cpu}, Node ${process.version}, ${seconds} s per row.`;
const cpuSection = cpuRows.length
  ? `\n\nCPU time per signature at concurrency 32, by process (from /proc over the same seconds):\n\n${cpuTable}`
  : '';
const section = `<!-- bench:service:start -->\n${measured}\n\n${table}${cpuSection}\n\nAgainst the aims:\n${goals.map((g) => `- ${g}`).join('\n')}\n<!-- bench:service:end -->`;

const skipPaths = process.env.BENCH_PATHS === '0';
if (!skipPaths) log('the bridge paths (C client build/native/sbp11_bench)');
const paths = skipPaths ? [] : await measurePaths(seconds, warmUpSeconds);
const pathTable = [
  '| path | key | threads | signatures/s | p50 ms | p99 ms |',
  '|---|---|---|---|---|---|',
  ...paths.map(
    (r) => `| ${r.path} | ${r.key} | ${r.threads} | ${fmt(r.perSecond)} | ${fmt(r.p50Ms, 3)} | ${fmt(r.p99Ms, 2)} |`,
  ),
].join('\n');
const pathAt = (prefix: string, key: string, threads: number) =>
  paths.find((r) => r.path.startsWith(prefix) && r.key === key && r.threads === threads);
/** Throughput at 2 client threads over 1, as a signed percentage. */
const gain = (prefix: string, key: string) => {
  const one = pathAt(prefix, key, 1)?.perSecond;
  const two = pathAt(prefix, key, 2)?.perSecond;
  if (!one || !two) return 'n/a';
  const pct = Math.round((two / one - 1) * 100);
  return `${pct >= 0 ? '+' : ''}${pct}%`;
};
const direct = (key: string) => pathAt('SoftHSM direct', key, 1)?.p50Ms ?? Number.NaN;
const pathGoals = ['RSA_2048', 'ECC_NIST_P256'].flatMap((key) => [
  `${key} latency added per signature at 1 thread: in-process bridge ${fmt((pathAt('signbridge module -> daemon (in-process)', key, 1)?.p50Ms ?? Number.NaN) - direct(key), 3)} ms vs p11-kit ${fmt((pathAt('p11-kit', key, 1)?.p50Ms ?? Number.NaN) - direct(key), 3)} ms (aim: less than p11-kit)`,
  `${key} full path (module -> daemon -> service) at 1 thread: ${fmt(pathAt('signbridge module -> daemon -> service', key, 1)?.perSecond)} signatures/s (aim ${key === 'RSA_2048' ? '900' : '3,000'})`,
  `${key} gain from 1 to 2 client threads: p11-kit ${gain('p11-kit', key)}, in-process bridge ${gain('signbridge module -> daemon (in-process)', key)}, full path ${gain('signbridge module -> daemon -> service', key)} (aim: each bridge path at least p11-kit's)`,
]);
const pathSection = `<!-- bench:paths:start -->\n${measured}\n\n${pathTable}\n\nAgainst the aims:\n${pathGoals.map((g) => `- ${g}`).join('\n')}\n<!-- bench:paths:end -->`;
process.stdout.write(`\n${pathTable}\n\n${pathGoals.join('\n')}\n`);

const docPath = packagePath('docs', 'benchmarks.md');
let doc: string;
try {
  doc = (await import('node:fs')).readFileSync(docPath, 'utf8');
} catch {
  doc = '# Benchmarks\n\n<!-- bench:service:start -->\n<!-- bench:service:end -->\n';
}
doc = doc.replace(/<!-- bench:service:start -->[\s\S]*<!-- bench:service:end -->/, section);
if (!doc.includes('<!-- bench:paths:start -->'))
  doc += '\n## The bridge paths\n\n<!-- bench:paths:start -->\n<!-- bench:paths:end -->\n';
if (!skipPaths) doc = doc.replace(/<!-- bench:paths:start -->[\s\S]*<!-- bench:paths:end -->/, pathSection);
writeFileSync(docPath, doc);
if (mlDsaRuntimeRows) writeMlDsaRuntimeSection(mlDsaRuntimeSection(mlDsaRuntimeRows, seconds));
process.stdout.write(`${measured}\n\n${table}\n\n${goals.join('\n')}\n`);
log(`wrote ${docPath}`);
// The transparency log's own section (bench/transparency.ts; BENCH_LOG=0 skips it).
if (process.env.BENCH_LOG !== '0') {
  writeLogSection(logSection(await measureTransparencyLog(seconds), seconds));
  log(`wrote the transparency log section of ${docPath}`);
}
// The service by request workers (bench/workers.ts; BENCH_WORKERS_SECTION=0 skips it): one process against two
// (BENCH_WORKERS: the counts), with the CPU by process and thread kind.
if (process.env.BENCH_WORKERS_SECTION !== '0') {
  const counts = (process.env.BENCH_WORKERS ?? '1,2').split(',').map(Number);
  writeWorkersSection(await measureWorkers(counts, seconds, warmUpSeconds));
  log(`wrote the request workers section of ${docPath}`);
}
// The daemon coalescing concurrent signatures (bench/coalescing.ts; BENCH_COALESCE=0 skips it).
if (process.env.BENCH_COALESCE !== '0') {
  writeCoalescingSection(coalescingSection(await measureCoalescing(seconds, warmUpSeconds), seconds));
  log(`wrote the coalescing section of ${docPath}`);
}
