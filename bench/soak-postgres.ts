// `npm run soak:postgres` (not part of the test run): two service instances on one PostgreSQL database (a private
// cluster, fsync on), 64 concurrent clients split over both, RSA-2048 and P-256 signatures mixed, for SOAK_SECONDS
// (default 600). At the end: errors (must be 0), audit `signed` entries equal to signatures issued, the instances'
// memory over time (must be flat), and `admin audit verify`. Prints a Markdown summary for docs/benchmarks.md.

import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { closeSync, createReadStream, openSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { Pool } from 'undici';
import { CLI, runCli, startServerProcess } from '../test/helpers/cli.js';
import { startPostgresCluster } from '../test/helpers/postgres.js';
import { makeTempDir } from '../test/helpers/service.js';

const seconds = Number(process.env.SOAK_SECONDS ?? 600);
const concurrency = Number(process.env.SOAK_CONCURRENCY ?? 64);
const log = (m: string) => process.stderr.write(`[soak] ${m}\n`);

/** Resident memory of a process in MiB (Linux /proc). */
function rssMiB(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('VmRSS:'));
  return Math.round(Number(line?.replace(/\D+/g, '') ?? 0) / 1024);
}

/**
 * `signbridge admin audit export` as an operator runs it, into a file (a soak's log is hundreds of MB, past any
 * pipe buffer), then its `signed` entries counted line by line.
 */
async function countExportedSigned(database: string): Promise<number> {
  const file = join(makeTempDir('sb-soak-export-'), 'audit.jsonl');
  const out = openSync(file, 'w', 0o600);
  const res = spawnSync(process.execPath, [CLI, 'admin', 'audit', 'export', '--database', database], {
    stdio: ['ignore', out, 'pipe'],
  });
  closeSync(out);
  if (res.status !== 0) throw new Error(`audit export failed: ${res.stderr}`);
  let signed = 0;
  for await (const line of createInterface({ input: createReadStream(file) })) {
    if (line.includes('"outcome":"signed"')) signed++;
  }
  return signed;
}

const cluster = await startPostgresCluster();
try {
  const database = cluster.createDatabase('soak');
  const dataDir = makeTempDir('sb-soak-');
  // The first instance makes the token; the second starts after it (same data dir: instances on one machine).
  const one = await startServerProcess(['--data-dir', dataDir, '--database', database], {
    SIGNBRIDGE_LOG_LEVEL: 'warn',
  });
  const two = await startServerProcess(['--data-dir', dataDir, '--database', database], {
    SIGNBRIDGE_LOG_LEVEL: 'warn',
  });
  const admin = (...args: string[]) => runCli(['admin', ...args, '--database', database]);
  const operator = admin('api-key', 'create', '--role', 'operator').stdout.trim();
  const specs = [
    ['soak-rsa', 'RSA_2048', 'RSASSA_PKCS1_V1_5_SHA_256'],
    ['soak-p256', 'ECC_NIST_P256', 'ECDSA_SHA_256'],
  ] as const;
  const signers = new Map<string, string>();
  const pools = [one, two].map((s) => new Pool(s.url, { connections: concurrency }));
  for (const [tenant, spec] of specs) {
    const res = await pools[0]?.request({
      path: '/v1/create_tenant',
      method: 'POST',
      headers: { authorization: `Bearer ${operator}`, 'content-type': 'application/json' },
      body: JSON.stringify({ action: 'create_tenant', tenant_id: tenant, key_spec: spec }),
    });
    await res?.body.text();
    signers.set(tenant, admin('api-key', 'create', '--role', 'signer', '--tenant', tenant).stdout.trim());
  }
  let issued = 0;
  let errors = 0;
  const errorSamples: string[] = [];
  const memory: { at: number; one: number; two: number }[] = [];
  const started = performance.now();
  const end = started + seconds * 1000;
  const sampler = setInterval(() => {
    memory.push({
      at: Math.round((performance.now() - started) / 1000),
      one: rssMiB(one.child.pid ?? 0),
      two: rssMiB(two.child.pid ?? 0),
    });
  }, 10_000);
  let n = 0;
  const client = async (i: number) => {
    const pool = pools[i % 2] as Pool;
    while (performance.now() < end) {
      const [tenant, , algorithm] = specs[n % 2] as (typeof specs)[number];
      const hash = createHash('sha256').update(`soak ${n++}`).digest('base64');
      try {
        const res = await pool.request({
          path: '/v1/sign',
          method: 'POST',
          headers: { authorization: `Bearer ${signers.get(tenant)}`, 'content-type': 'application/json' },
          body: JSON.stringify({ action: 'sign', tenant_id: tenant, hash, algorithm }),
        });
        const text = await res.body.text();
        if (res.statusCode === 200) issued++;
        else {
          errors++;
          if (errorSamples.length < 5) errorSamples.push(`${res.statusCode} ${text}`);
        }
      } catch (err) {
        errors++;
        if (errorSamples.length < 5) errorSamples.push(String(err));
      }
    }
  };
  log(`${concurrency} clients over two instances, RSA-2048 and P-256 mixed, ${seconds} s`);
  const progress = setInterval(
    () => log(`${Math.round((performance.now() - started) / 1000)} s: ${issued} signed, ${errors} errors`),
    30_000,
  );
  await Promise.all(Array.from({ length: concurrency }, (_, i) => client(i)));
  clearInterval(progress);
  clearInterval(sampler);
  const elapsed = (performance.now() - started) / 1000;
  for (const p of pools) await p.close();
  const signedEntries = await countExportedSigned(database);
  const verify = admin('audit', 'verify');
  await one.stop();
  await two.stop();
  const first = memory[1] ?? memory[0];
  const last = memory.at(-1);
  process.stdout.write(
    [
      `| soak, 2 instances on PostgreSQL, c=${concurrency}, RSA-2048 + P-256 mixed | ${elapsed.toFixed(0)} s |`,
      `| signatures issued | ${issued} (${(issued / elapsed).toFixed(0)}/s) |`,
      `| errors | ${errors}${errorSamples.length ? ` (${errorSamples.join('; ')})` : ''} |`,
      `| audit entries "signed" | ${signedEntries} (${signedEntries === issued ? 'equal to the signatures issued' : 'DIFFERENT'}) |`,
      `| instance RSS MiB (at ${first?.at} s -> ${last?.at} s) | one ${first?.one} -> ${last?.one}, two ${first?.two} -> ${last?.two} |`,
      `| admin audit verify | ${verify.stdout.trim() || verify.stderr.trim()} |`,
      '',
    ].join('\n'),
  );
  if (errors > 0 || signedEntries !== issued || verify.code !== 0) process.exitCode = 1;
} finally {
  cluster.stop();
}
