import { type ChildProcessWithoutNullStreams, spawn, spawnSync } from 'node:child_process';
import { packagePath } from '../../src/paths.js';

export const CLI = packagePath('bin', 'signbridge.js');

/**
 * Output a CLI run may print before it is taken for a runaway. spawnSync's default (1 MiB) cut an audit export off
 * as soon as a fast machine had signed ~2,000 signatures in a test's window: the child was killed and the test saw
 * `code: null`. The size of what a test makes must never depend on how fast the machine is.
 */
const CLI_MAX_OUTPUT = 1024 ** 3;

export function runCli(args: string[], env: NodeJS.ProcessEnv = {}, options: RunAs = {}) {
  const [command, argv] = asUser(options.runAs, [process.execPath, CLI, ...args]);
  const res = spawnSync(command, argv, {
    encoding: 'utf8',
    env: { ...process.env, ...env },
    maxBuffer: CLI_MAX_OUTPUT,
  });
  // A child that could not run or was killed (ENOBUFS, a signal) is the harness's failure, never a CLI exit code.
  if (res.error) throw new Error(`signbridge ${args.join(' ')} could not run: ${res.error.message}`);
  if (res.signal) throw new Error(`signbridge ${args.join(' ')} was killed by ${res.signal}:\n${res.stderr}`);
  return { code: res.status, stdout: res.stdout, stderr: res.stderr };
}

/**
 * runCli without holding the test's event loop while the child runs. A test that runs the CLI many times in a row
 * with runCli holds its worker's loop for all of it (awaits on synchronous stores settle as microtasks, never a
 * turn of the loop); past 60 s vitest's own report to its main process times out ("Timeout calling onTaskUpdate").
 */
export function runCliAsync(
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, ...env } });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => {
    stdout += d;
  });
  child.stderr.setEncoding('utf8').on('data', (d: string) => {
    stderr += d;
  });
  return new Promise((resolve, reject) => {
    child.once('error', (err) => reject(new Error(`signbridge ${args.join(' ')} could not run: ${err.message}`)));
    child.once('close', (code, signal) => {
      if (signal) reject(new Error(`signbridge ${args.join(' ')} was killed by ${signal}:\n${stderr}`));
      else resolve({ code, stdout, stderr });
    });
  });
}

export interface RunAs {
  /** Run as this user (the tests run as root): an unprivileged service, whose file permissions matter. */
  runAs?: { uid: number; gid: number };
}

/** `command` as the user, through setpriv, which execs it (the child's pid is the program's, signals reach it). */
function asUser(user: RunAs['runAs'], command: string[]): [string, string[]] {
  if (!user) return [command[0] as string, command.slice(1)];
  const ids = [`--reuid=${user.uid}`, `--regid=${user.gid}`, '--clear-groups'];
  return ['setpriv', [...ids, '--', ...command]];
}

/**
 * The URL of `signbridge server`'s "listening on" line in `text`, once the whole URL is there: the line ends after it
 * (a space or the newline), so a chunk that stops inside the port does not give a truncated URL.
 */
export function listeningUrlIn(text: string): string | undefined {
  return /signbridge server listening on (http:\/\/\S+)\s/.exec(text)?.[1];
}

export interface ServerProcess {
  child: ChildProcessWithoutNullStreams;
  url: string;
  output: () => string;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/**
 * Starts `signbridge server` on an ephemeral port and waits for its "ready" log line. Node's own flags for it come
 * from SIGNBRIDGE_SERVER_NODE_ARGS in `env` (e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof` to profile a bench run;
 * NODE_OPTIONS refuses --cpu-prof).
 */
export async function startServerProcess(
  args: string[],
  env: NodeJS.ProcessEnv = {},
  options: RunAs = {},
): Promise<ServerProcess> {
  const nodeArgs = (env.SIGNBRIDGE_SERVER_NODE_ARGS ?? process.env.SIGNBRIDGE_SERVER_NODE_ARGS ?? '')
    .split(' ')
    .filter(Boolean);
  const [command, argv] = asUser(options.runAs, [
    process.execPath,
    ...nodeArgs,
    CLI,
    'server',
    '--listen',
    '127.0.0.1:0',
    ...args,
  ]);
  const child = spawn(command, argv, { env: { ...process.env, ...env } });
  let out = '';
  let listening = false;
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${out}`)), 30_000);
    const onData = (chunk: Buffer) => {
      // Only the new text (and the line it may finish) is searched, and nothing once the line was seen: the output
      // of a server logging every request grows by MBs a minute, and searching all of it on each chunk made this
      // process the bound of a 5-minute bench (docs/benchmarks.md, issue 46's events row).
      const from = Math.max(0, out.length - 200);
      out += chunk.toString();
      if (listening) return;
      const found = listeningUrlIn(out.slice(from));
      if (found) {
        listening = true;
        clearTimeout(timer);
        resolve(found);
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code}:\n${out}`));
    });
  });
  return {
    child,
    url,
    output: () => out,
    stop(signal: NodeJS.Signals = 'SIGTERM') {
      return new Promise((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve(child.exitCode);
        child.once('exit', (code) => resolve(code));
        child.kill(signal);
      });
    },
  };
}

export interface ActionResult {
  status: number;
  headers: Headers;
  body: Record<string, unknown>;
}

/** POST {base}/v1/<action> with a Bearer API key over real HTTP (the JSON API as any client uses it). */
export async function postAction(base: string, action: string, token: string, body: object): Promise<ActionResult> {
  const res = await fetch(`${base}/v1/${action}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ action, ...body }),
  });
  return { status: res.status, headers: res.headers, body: (await res.json()) as Record<string, unknown> };
}

/** `signbridge admin api-key create` as an operator runs it; returns the key printed on stdout. */
export function createApiKeyCli(dataDir: string, role: string, tenant?: string): string {
  const res = runCli([
    'admin',
    'api-key',
    'create',
    '--data-dir',
    dataDir,
    '--role',
    role,
    ...(tenant ? ['--tenant', tenant] : []),
  ]);
  if (res.code !== 0) throw new Error(`api-key create ${role}: ${res.stderr}`);
  return res.stdout.trim();
}

/** An audit entry as `signbridge admin audit export` writes it (one JSON object per line). */
export interface ExportedAuditEntry {
  seq: number;
  at: string;
  tenant_id: string | null;
  actor: string;
  action: string;
  outcome: string;
  details: Record<string, unknown>;
}

/** The whole audit log through `admin audit export`, with the store options (`--data-dir D` or `--database URL`). */
export function exportAudit(storeArgs: string[]): ExportedAuditEntry[] {
  const res = runCli(['admin', 'audit', 'export', ...storeArgs]);
  if (res.code !== 0) throw new Error(`admin audit export failed: ${res.stderr}`);
  return res.stdout
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as ExportedAuditEntry);
}
