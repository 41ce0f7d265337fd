// The bridge's four paths, measured by one C client (build/native/sbp11_bench) at 1, 2 and 4 threads:
//   1. SoftHSM direct;
//   2. p11-kit-client.so -> `p11-kit server` -> SoftHSM (the peer forwarder);
//   3. libsignbridge-pkcs11.so -> daemon, in-process mode -> SoftHSM;
//   4. libsignbridge-pkcs11.so -> daemon -> service over HTTP -> SoftHSM.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { MODULE_PATH } from '../src/cli/module-path.js';
import { findSoftHsmModule } from '../src/keys/pkcs11/softhsm.js';
import { packagePath } from '../src/paths.js';
import { CLI, createApiKeyCli, postAction, type ServerProcess, startServerProcess } from '../test/helpers/cli.js';
import { makeTempDir } from '../test/helpers/service.js';
import { countPathCpu } from './cpu.js';

export interface PathRow {
  path: string;
  key: 'RSA_2048' | 'ECC_NIST_P256';
  threads: number;
  perSecond: number;
  p50Ms: number;
  p99Ms: number;
  /** With `cpuOf`: CPU microseconds per signature of each process of the path and of the client (bench/cpu.ts). */
  cpu?: Record<string, number>;
}

const BENCH = packagePath('build', 'native', 'sbp11_bench');
export const P11KIT_CLIENT = '/usr/lib/x86_64-linux-gnu/pkcs11/p11-kit-client.so';
const log = (msg: string) => process.stderr.write(`[bench] ${msg}\n`);
export const REMOTE_PATH = 'signbridge module -> daemon -> service (HTTP) -> SoftHSM';
const LOCAL_PATH = 'signbridge module -> daemon (in-process) -> SoftHSM';
export const BENCH_TENANTS = { rsa: 'bench-rsa', ec: 'bench-ec' };
export const P11KIT_PATH = 'p11-kit-client -> p11-kit server -> SoftHSM';

export function measure(
  path: string,
  module: string,
  token: string,
  pin: string,
  kind: 'rsa' | 'ec',
  seconds: number,
  env: NodeJS.ProcessEnv,
  threadCounts: readonly number[] = [1, 2, 4],
  cpuOf?: Record<string, number>,
): PathRow[] {
  const rows: PathRow[] = [];
  for (const threads of threadCounts) {
    log(`${path}: ${kind}, ${threads} thread(s)`);
    const cpu = cpuOf && countPathCpu(cpuOf);
    const out = execFileSync(BENCH, [module, token, pin, kind, String(seconds), String(threads)], {
      env: { ...process.env, ...env },
      encoding: 'utf8',
    });
    const r = JSON.parse(out) as { perSecond: number; p50Ms: number; p99Ms: number; count?: number };
    const key = kind === 'rsa' ? 'RSA_2048' : 'ECC_NIST_P256';
    rows.push({ path, key, threads, ...r, ...(cpu && { cpu: cpu(r.count ?? r.perSecond * seconds) }) });
  }
  return rows;
}

/**
 * Runs both key types through a stack for `seconds` each, unrecorded. The daemon and the service are long-running
 * processes: in the first seconds after a start V8 still runs much of their code in its baseline tiers, and the
 * first timed row came out up to 40% slower than the same row run again.
 */
export function warmUp(
  path: string,
  module: string,
  tenants: Record<'rsa' | 'ec', string>,
  seconds: number,
  env: NodeJS.ProcessEnv,
) {
  if (seconds <= 0) return;
  log(`${path}: warming up (${seconds} s per key, unrecorded)`);
  for (const kind of ['rsa', 'ec'] as const) {
    execFileSync(BENCH, [module, tenants[kind], '0000', kind, String(seconds), '2'], {
      env: { ...process.env, ...env },
      encoding: 'utf8',
    });
  }
}

async function waitForFile(path: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!existsSync(path)) {
    if (Date.now() > deadline) throw new Error(`${path} did not appear`);
    await new Promise((r) => setTimeout(r, 100));
  }
  await new Promise((r) => setTimeout(r, 200));
}

export function stop(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}

/** A SoftHSM token of its own ("bench", PIN 1234) with an RSA-2048 and a P-256 key made by pkcs11-tool. */
export function makeBenchToken(dir: string): { softhsm: string; hsmEnv: NodeJS.ProcessEnv } {
  const softhsm = findSoftHsmModule();
  mkdirSync(join(dir, 'tokens'), { mode: 0o700 });
  writeFileSync(
    join(dir, 'softhsm2.conf'),
    `directories.tokendir = ${join(dir, 'tokens')}\nobjectstore.backend = file\nlog.level = ERROR\n`,
  );
  const hsmEnv = { SOFTHSM2_CONF: join(dir, 'softhsm2.conf') };
  const run = (cmd: string, args: string[]) =>
    execFileSync(cmd, args, { env: { ...process.env, ...hsmEnv }, stdio: 'ignore' });
  run('softhsm2-util', ['--init-token', '--free', '--label', 'bench', '--pin', '1234', '--so-pin', '5678']);
  const p11 = ['--module', softhsm, '--token-label', 'bench', '--login', '--pin', '1234', '--keypairgen'];
  run('pkcs11-tool', [...p11, '--key-type', 'rsa:2048', '--label', 'rsa', '--id', '01']);
  run('pkcs11-tool', [...p11, '--key-type', 'EC:prime256v1', '--label', 'ec', '--id', '02']);
  return { softhsm, hsmEnv };
}

/** `p11-kit server` in front of the bench token while `fn` runs; fn gets the client module's environment. */
export async function withP11Kit<T>(
  dir: string,
  token: { softhsm: string; hsmEnv: NodeJS.ProcessEnv },
  fn: (clientEnv: NodeJS.ProcessEnv) => T | Promise<T>,
): Promise<T> {
  const p11sock = join(dir, 'p11kit.sock');
  const p11kit = spawn('p11-kit', ['server', '-f', '-n', p11sock, '--provider', token.softhsm, 'pkcs11:token=bench'], {
    env: { ...process.env, ...token.hsmEnv },
    stdio: 'ignore',
  });
  try {
    await waitForFile(p11sock);
    return await fn({ P11_KIT_SERVER_ADDRESS: `unix:path=${p11sock}` });
  } finally {
    await stop(p11kit);
  }
}

/** The embedded service on `dataDir`, one tenant per key spec, each with a signer key in `<dir>/<tenant>.key`. */
export async function startBenchService(dir: string, dataDir: string, nodeArgs: string[] = []): Promise<ServerProcess> {
  const server = await startServerProcess(['--data-dir', dataDir], {
    SIGNBRIDGE_LOG_LEVEL: 'warn',
    ...(nodeArgs.length > 0 ? { SIGNBRIDGE_SERVER_NODE_ARGS: nodeArgs.join(' ') } : {}),
  });
  const operator = createApiKeyCli(dataDir, 'operator');
  for (const [tenant, spec] of [
    ['bench-rsa', 'RSA_2048'],
    ['bench-ec', 'ECC_NIST_P256'],
  ] as const) {
    const res = await postAction(server.url, 'create_tenant', operator, { tenant_id: tenant, key_spec: spec });
    if (res.status !== 201) throw new Error(`create_tenant: ${JSON.stringify(res.body)}`);
    writeFileSync(join(dir, `${tenant}.key`), `${createApiKeyCli(dataDir, 'signer', tenant)}\n`, { mode: 0o600 });
  }
  return server;
}

/**
 * `signbridge daemon` in front of the bench service while `fn` runs; `extraYaml` adds settings to its file,
 * `nodeArgs` go to its Node (e.g. `--cpu-prof`).
 */
export async function withRemoteDaemon<T>(
  dir: string,
  serviceUrl: string,
  extraYaml: string,
  fn: (socket: string, daemonPid: number) => T | Promise<T>,
  nodeArgs: string[] = [],
): Promise<T> {
  const socket = join(makeTempDir('sbp-'), 'run', 'd.sock');
  const configFile = join(dir, `daemon-${Date.now()}.yaml`);
  writeFileSync(
    configFile,
    `socket: ${socket}\nlogLevel: warn\nservice:\n  url: ${serviceUrl}\ntenants:\n  - id: bench-rsa\n    apiKeyFile: ${join(dir, 'bench-rsa.key')}\n  - id: bench-ec\n    apiKeyFile: ${join(dir, 'bench-ec.key')}\n${extraYaml}`,
  );
  const daemon = spawn(process.execPath, [...nodeArgs, CLI, 'daemon', '--config', configFile], { stdio: 'ignore' });
  try {
    await waitForFile(socket);
    return await fn(socket, daemon.pid as number);
  } finally {
    await stop(daemon);
  }
}

/**
 * Both keys through the module at each thread count, after the stack's warm-up; with `cpuOf` (the daemon's and the
 * service's pids), each row's CPU per signature of each.
 */
export function measureModule(
  path: string,
  socket: string,
  seconds: number,
  warmUpSeconds: number,
  threadCounts?: readonly number[],
  cpuOf?: Record<string, number>,
): PathRow[] {
  const env = { SIGNBRIDGE_SOCKET: socket };
  warmUp(path, MODULE_PATH, BENCH_TENANTS, warmUpSeconds, env);
  return (['rsa', 'ec'] as const).flatMap((kind) =>
    measure(path, MODULE_PATH, BENCH_TENANTS[kind], '0000', kind, seconds, env, threadCounts, cpuOf),
  );
}

export async function measurePaths(seconds: number, warmUpSeconds: number): Promise<PathRow[]> {
  if (!existsSync(BENCH) || !existsSync(MODULE_PATH)) throw new Error('build the native code first (scripts/setup.sh)');
  const rows: PathRow[] = [];

  // 1 and 2: a SoftHSM token of its own, keys made by pkcs11-tool.
  const dir = makeTempDir('sb-paths-');
  const token = makeBenchToken(dir);
  for (const kind of ['rsa', 'ec'] as const)
    rows.push(...measure('SoftHSM direct', token.softhsm, 'bench', '1234', kind, seconds, token.hsmEnv));
  await withP11Kit(dir, token, (clientEnv) => {
    for (const kind of ['rsa', 'ec'] as const)
      rows.push(...measure(P11KIT_PATH, P11KIT_CLIENT, 'bench', '1234', kind, seconds, clientEnv));
  });

  // 3 and 4: the embedded service's data dir, one tenant per key spec.
  const dataDir = join(dir, 'svc');
  const server = await startBenchService(dir, dataDir);
  try {
    await withRemoteDaemon(dir, server.url, '', (socket) => {
      rows.push(...measureModule(REMOTE_PATH, socket, seconds, warmUpSeconds));
    });
  } finally {
    await server.stop();
  }

  const localSock = join(makeTempDir('sbp-'), 'run', 'd.sock');
  const local = spawn(
    process.execPath,
    [
      CLI,
      'daemon',
      '--in-process',
      dataDir,
      '--socket',
      localSock,
      '--tenant',
      'bench-rsa',
      '--tenant',
      'bench-ec',
      '--log-level',
      'warn',
    ],
    { stdio: 'ignore' },
  );
  try {
    await waitForFile(localSock);
    rows.push(...measureModule(LOCAL_PATH, localSock, seconds, warmUpSeconds));
  } finally {
    await stop(local);
  }
  return rows;
}
