// Issue 46's "less per request" figures, one round: raw SoftHSM (P-256 and RSA-2048, 2 threads, the C client), the
// service's `sign` at concurrency 32 (autocannon, with the service's CPU per signature), and the full path (module ->
// daemon -> service over HTTP) at 1 and 2 client threads, with the CPU per signature of the daemon, the service and
// the client on each full-path row. Each line of stdout is one JSON row. Run it from two
// builds (the tree before and after) alternately to compare them on a shared machine:
//   node dist/bench/less-per-request.js
// BENCH_SECONDS (default 6) per row, BENCH_WARMUP_SECONDS (default 3) unrecorded per stack; BENCH_PROFILE_DIR
// writes a .cpuprofile of the service and of the daemon there (`node --cpu-prof`) as each stops; BENCH_SERVICE=0 and
// BENCH_FULL_PATH=0 skip those rows; BENCH_DAEMON_YAML adds settings to the daemon's file (`busyPollMs: 0\n`).

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import autocannon from 'autocannon';
import { makeTempDir } from '../test/helpers/service.js';
import { countCpu } from './cpu.js';
import {
  BENCH_TENANTS,
  makeBenchToken,
  measure,
  measureModule,
  REMOTE_PATH,
  startBenchService,
  withRemoteDaemon,
} from './paths.js';

const seconds = Number(process.env.BENCH_SECONDS ?? 6);
const warmUpSeconds = Number(process.env.BENCH_WARMUP_SECONDS ?? 3);
const profileDir = process.env.BENCH_PROFILE_DIR;
const nodeArgs = profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : [];
const log = (msg: string) => process.stderr.write(`[bench] ${msg}\n`);
const emit = (row: object) => process.stdout.write(`${JSON.stringify(row)}\n`);

const dir = makeTempDir('sb-less-');
const token = makeBenchToken(dir);
for (const kind of ['ec', 'rsa'] as const) {
  for (const row of measure('SoftHSM direct', token.softhsm, 'bench', '1234', kind, seconds, token.hsmEnv, [2]))
    emit(row);
}

const server = await startBenchService(dir, join(dir, 'svc'), nodeArgs);
try {
  for (const [kind, algorithm] of process.env.BENCH_SERVICE === '0'
    ? []
    : ([
        ['ec', 'ECDSA_SHA_256'],
        ['rsa', 'RSASSA_PKCS1_V1_5_SHA_256'],
      ] as const)) {
    const tenant = BENCH_TENANTS[kind];
    const signer = readFileSync(join(dir, `${tenant}.key`), 'utf8').trim();
    const load = (duration: number) =>
      autocannon({
        url: `${server.url}/v1/sign`,
        method: 'POST',
        headers: { authorization: `Bearer ${signer}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          action: 'sign',
          tenant_id: tenant,
          algorithm,
          hash: Buffer.alloc(32, 7).toString('base64'),
        }),
        connections: 32,
        duration,
      });
    if (warmUpSeconds > 0) await load(warmUpSeconds);
    log(`service sign ${kind}, 32 connections, ${seconds} s`);
    const cpu = countCpu([server.child.pid as number]);
    const result = await load(seconds);
    emit({
      path: 'service sign c=32',
      key: kind === 'ec' ? 'ECC_NIST_P256' : 'RSA_2048',
      perSecond: Math.round(result.requests.total / result.duration),
      errors: result.non2xx + result.errors,
      ...cpu(result.requests.total, result.duration),
    });
  }
  if (process.env.BENCH_FULL_PATH !== '0') {
    await withRemoteDaemon(
      dir,
      server.url,
      process.env.BENCH_DAEMON_YAML ?? '',
      (socket, daemonPid) => {
        // CPU per signature of the daemon, the service and the C client: their sum over 2 cores bounds the rate.
        const cpuOf = { daemon: daemonPid, service: server.child.pid as number };
        for (const row of measureModule(REMOTE_PATH, socket, seconds, warmUpSeconds, [1, 2], cpuOf)) {
          if (row.key === 'ECC_NIST_P256') emit(row);
        }
      },
      nodeArgs,
    );
  }
} finally {
  await server.stop();
}
