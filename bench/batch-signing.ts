// Batch signing (issue 34: "a batch of 100 P-256 hashes ≥ 5x the single-request rate"): a `signbridge server`
// process (SQLite + SoftHSM, the defaults) signing P-256 digests through POST /v1/sign at 32 connections, and through
// POST /v1/sign_batch with 100 digests a request at 4 connections, alternated A/B/A/B; signatures per second and the
// service's CPU per signature, in one run on this machine. Run alone: `npm run bench:batch` (BENCH_SECONDS per run,
// default 8; BENCH_BATCH_ROUNDS, default 2); it rewrites its section of docs/benchmarks.md.
import { readFileSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import autocannon from 'autocannon';
import { packagePath } from '../src/paths.js';
import { createApiKeyCli, postAction, startServerProcess } from '../test/helpers/cli.js';
import { makeTempDir } from '../test/helpers/service.js';
import { countCpu } from './cpu.js';

const log = (msg: string) => process.stderr.write(`[bench:batch] ${msg}\n`);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 8);
const ROUNDS = Number(process.env.BENCH_BATCH_ROUNDS ?? 2);
const BATCH = 100;

interface Run {
  signaturesPerSecond: number;
  serviceUs: number;
}

const fmt = (n: number, digits = 0) => n.toFixed(digits).replace(/\B(?=(\d{3})+(?!\d))/g, ',');

const dataDir = makeTempDir('sb-bench-batch-');
const operator = createApiKeyCli(dataDir, 'operator');
const server = await startServerProcess(['--data-dir', dataDir], { SIGNBRIDGE_LOG_LEVEL: 'warn' });
const single: Run[] = [];
const batched: Run[] = [];
try {
  await postAction(server.url, 'create_tenant', operator, { tenant_id: 'bench', key_spec: 'ECC_NIST_P256' });
  const signer = createApiKeyCli(dataDir, 'signer', 'bench');
  const headers = { authorization: `Bearer ${signer}`, 'content-type': 'application/json' };
  const hash = Buffer.alloc(32, 5).toString('base64');
  const one = {
    url: `${server.url}/v1/sign`,
    method: 'POST',
    headers,
    body: JSON.stringify({ action: 'sign', tenant_id: 'bench', algorithm: 'ECDSA_SHA_256', hash }),
    connections: 32,
  };
  const many = {
    url: `${server.url}/v1/sign_batch`,
    method: 'POST',
    headers,
    body: JSON.stringify({
      action: 'sign_batch',
      tenant_id: 'bench',
      algorithm: 'ECDSA_SHA_256',
      hashes: Array.from({ length: BATCH }, () => hash),
    }),
    connections: 4,
  };
  const measure = async (options: typeof one, perRequest: number): Promise<Run> => {
    const cpu = countCpu([server.child.pid as number]);
    const r = await autocannon({ ...options, duration: SECONDS });
    if (r.non2xx > 0 || r.errors > 0) throw new Error(`${options.url}: ${r.non2xx} non-2xx, ${r.errors} errors`);
    const signatures = r.requests.total * perRequest;
    return { signaturesPerSecond: signatures / r.duration, serviceUs: cpu(signatures, r.duration).serviceUs };
  };
  await autocannon({ ...one, duration: 3 }); // warm-up (unrecorded)
  await autocannon({ ...many, duration: 3 });
  for (let round = 0; round < ROUNDS; round++) {
    log(`round ${round + 1}: POST /v1/sign, 32 connections, ${SECONDS} s`);
    single.push(await measure(one, 1));
    log(`round ${round + 1}: POST /v1/sign_batch of ${BATCH}, 4 connections, ${SECONDS} s`);
    batched.push(await measure(many, BATCH));
  }
} finally {
  await server.stop();
}

const mean = (runs: Run[], f: (r: Run) => number) => runs.reduce((a, r) => a + f(r), 0) / runs.length;
const ratio = mean(batched, (r) => r.signaturesPerSecond) / mean(single, (r) => r.signaturesPerSecond);
const section = [
  '<!-- bench:batch:start -->',
  `Measured ${new Date().toISOString().slice(0, 10)} on ${cpus().length} × ${cpus()[0]?.model ?? 'unknown CPU'}, Node ${process.version}; the service, SoftHSM and autocannon share the cores; ${SECONDS} s per run, ${ROUNDS} rounds alternated.`,
  '',
  '| P-256, SQLite + SoftHSM | signatures/s (each round) | service CPU µs per signature |',
  '|---|---|---|',
  `| \`POST /v1/sign\`, 32 connections | ${single.map((r) => fmt(r.signaturesPerSecond)).join(', ')} | ${fmt(mean(single, (r) => r.serviceUs))} |`,
  `| \`POST /v1/sign_batch\` of ${BATCH} digests, 4 connections | ${batched.map((r) => fmt(r.signaturesPerSecond)).join(', ')} | ${fmt(mean(batched, (r) => r.serviceUs))} |`,
  '',
  `Batches of ${BATCH}: **${fmt(ratio, 2)}x** the single-request rate (aim: at least 5x).`,
  '<!-- bench:batch:end -->',
].join('\n');
const docPath = packagePath('docs', 'benchmarks.md');
let doc = readFileSync(docPath, 'utf8');
if (!doc.includes('<!-- bench:batch:start -->')) {
  doc += '\n## Batch signing (`POST /v1/sign_batch`)\n\n<!-- bench:batch:start -->\n<!-- bench:batch:end -->\n';
}
writeFileSync(docPath, doc.replace(/<!-- bench:batch:start -->[\s\S]*<!-- bench:batch:end -->/, section));
process.stdout.write(`${section}\n`);
