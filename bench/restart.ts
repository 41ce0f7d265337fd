// `node dist/bench/restart.js` (not part of the test run; issue 44): how long a service instance takes to answer
// signatures again after it was ended under load and started again, on PostgreSQL (a private cluster, fsync on) or
// SQLite. One instance on a fixed port signs for RESTART_CLIENTS concurrent clients (default 16, P-256); after
// RESTART_LOAD_SECONDS (default 3) it is ended with RESTART_SIGNAL (SIGKILL or SIGTERM) and started again at once
// with the same arguments, while the clients keep asking. Per round: how long the old process took to go, from the
// new process's spawn to its "listening" line, and to the first signature answered 200. RESTART_STORE=postgres
// (default) or sqlite; RESTART_ROUNDS (default 3); RESTART_WORKERS sets SIGNBRIDGE_WORKERS (default 1). With
// RESTART_TIMING=1 the new process prints where its start-up went (SIGNBRIDGE_START_TIMING, src/start-timing.ts).
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';
import { CLI, listeningUrlIn, runCli } from '../test/helpers/cli.js';
import { freePort, startPostgresCluster } from '../test/helpers/postgres.js';
import { makeTempDir } from '../test/helpers/service.js';

const store = process.env.RESTART_STORE ?? 'postgres';
const signal = (process.env.RESTART_SIGNAL ?? 'SIGKILL') as NodeJS.Signals;
const rounds = Number(process.env.RESTART_ROUNDS ?? 3);
const clients = Number(process.env.RESTART_CLIENTS ?? 16);
const loadSeconds = Number(process.env.RESTART_LOAD_SECONDS ?? 3);
const workers = process.env.RESTART_WORKERS ?? '1';
const log = (m: string) => process.stderr.write(`[restart] ${m}\n`);

interface Instance {
  child: ChildProcessWithoutNullStreams;
  spawnedAt: number;
  listening: Promise<number>;
  exited: Promise<void>;
}

/** CPU seconds (user + system) used so far by `pid` and its children, live or ended, from /proc (Linux). */
function cpuSeconds(pid: number): number {
  const ticks = (p: number) => {
    try {
      const fields = readFileSync(`/proc/${p}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
      // utime + stime, and cutime + cstime: what its children that ended (a killed client's backends) used.
      const [utime, stime, cutime, cstime] = [11, 12, 13, 14].map((i) => Number(fields[i]));
      return { ppid: Number(fields[1]), own: (utime ?? 0) + (stime ?? 0), ended: (cutime ?? 0) + (cstime ?? 0) };
    } catch {
      return { ppid: -1, own: 0, ended: 0 };
    }
  };
  const self = ticks(pid);
  let total = self.own + self.ended;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const child = ticks(Number(entry));
    if (child.ppid === pid) total += child.own;
  }
  return total / 100;
}

function startInstance(args: string[]): Instance {
  const spawnedAt = performance.now();
  const spawnedClock = Date.now();
  const child = spawn(process.execPath, [CLI, 'server', ...args], {
    env: {
      ...process.env,
      SIGNBRIDGE_LOG_LEVEL: 'warn',
      SIGNBRIDGE_WORKERS: workers,
      ...(process.env.RESTART_TIMING === '1' && { SIGNBRIDGE_START_TIMING: '1' }),
    },
  });
  let out = '';
  const listening = new Promise<number>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      out += chunk.toString();
      for (const line of chunk.toString().split('\n')) {
        const timing = /start timing: (.*) \(clock (\d+)\)/.exec(line);
        if (timing) log(`  +${Number(timing[2]) - spawnedClock} ms: ${timing[1]}`);
      }
      if (listeningUrlIn(out)) resolve(performance.now());
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.once('exit', (code) => reject(new Error(`server exited with ${code}:\n${out}`)));
  });
  listening.catch(() => undefined);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return { child, spawnedAt, listening, exited };
}

const cluster = store === 'postgres' ? await startPostgresCluster() : undefined;
try {
  const dataDir = makeTempDir('sb-restart-');
  const storeArgs = cluster ? ['--database', cluster.createDatabase('restart')] : [];
  const port = await freePort();
  const args = ['--data-dir', dataDir, '--listen', `127.0.0.1:${port}`, ...storeArgs];
  const admin = (...a: string[]) => runCli(['admin', ...a, '--data-dir', dataDir, ...storeArgs]);
  let instance = startInstance(args);
  await instance.listening;
  const postmaster = cluster
    ? Number(readFileSync(join(cluster.dir, 'data', 'postmaster.pid'), 'utf8').split('\n')[0])
    : undefined;
  const operator = admin('api-key', 'create', '--role', 'operator').stdout.trim();
  const pool = new Pool(`http://127.0.0.1:${port}`, { connections: clients, pipelining: 1 });
  const post = async (action: string, token: string, body: object) => {
    const res = await pool.request({
      path: `/v1/${action}`,
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ action, ...body }),
      headersTimeout: 30_000,
    });
    await res.body.text();
    return res.statusCode;
  };
  await post('create_tenant', operator, { tenant_id: 'restart', key_spec: 'ECC_NIST_P256' });
  const signer = admin('api-key', 'create', '--role', 'signer', '--tenant', 'restart').stdout.trim();

  let stop = false;
  let signed = 0;
  let failed = 0;
  /** When a signature was last answered 200 (the clients keep asking through the restart). */
  let lastOk = 0;
  let n = 0;
  const client = async () => {
    while (!stop) {
      const hash = createHash('sha256').update(`restart ${n++}`).digest('base64');
      const status = await post('sign', signer, { tenant_id: 'restart', hash, algorithm: 'ECDSA_SHA_256' }).catch(
        () => 0,
      );
      if (status === 200) {
        signed++;
        lastOk = performance.now();
      } else {
        failed++;
        await new Promise((r) => setTimeout(r, 20));
      }
    }
  };
  const running = Array.from({ length: clients }, client);

  const results: { gone: number; listening: number; answering: number }[] = [];
  for (let round = 1; round <= rounds; round++) {
    const before = signed;
    await new Promise((r) => setTimeout(r, loadSeconds * 1000));
    const killedAt = performance.now();
    instance.child.kill(signal);
    await instance.exited;
    const goneAt = performance.now();
    // What the database server's processes (the postmaster's children) spend while the service starts again: on a
    // machine they share, the database's work after a burst of writes competes with the start for the cores.
    const databaseCpuBefore = postmaster ? cpuSeconds(postmaster) : 0;
    instance = startInstance(args);
    const listeningAt = await instance.listening;
    while (lastOk < instance.spawnedAt) await new Promise((r) => setTimeout(r, 5));
    const serviceCpu = cpuSeconds(instance.child.pid ?? 0);
    const databaseCpu = postmaster ? cpuSeconds(postmaster) - databaseCpuBefore : 0;
    const result = {
      gone: Math.round(goneAt - killedAt),
      listening: Math.round(listeningAt - instance.spawnedAt),
      answering: Math.round(lastOk - instance.spawnedAt),
    };
    results.push(result);
    log(
      `round ${round}: ${signal} -> gone in ${result.gone} ms; new process listening after ${result.listening} ms, ` +
        `first signature after ${result.answering} ms (${signed - before} signatures in the round before); ` +
        `CPU meanwhile: service ${serviceCpu.toFixed(1)} s, database ${databaseCpu.toFixed(1)} s`,
    );
  }
  stop = true;
  await Promise.all(running);
  await pool.close();
  instance.child.kill('SIGTERM');
  await instance.exited;
  const answering = results.map((r) => r.answering).sort((a, b) => a - b);
  process.stdout.write(
    `${store}, ${signal}, ${workers} worker(s), ${clients} clients: first signature after restart ` +
      `${answering.join(' / ')} ms (${signed} signed, ${failed} refused or failed while down)\n`,
  );
} finally {
  cluster?.stop();
}
