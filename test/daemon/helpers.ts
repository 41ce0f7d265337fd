// Shared setup for the daemon tests: the peer-credential addon, temp socket folders, a daemon on a real socket.
import { type ChildProcessWithoutNullStreams, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmdirSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll } from 'vitest';
import type { DaemonConfig } from '../../daemon/config.js';
import { type ApiKeySource, apiKeyFromEnv } from '../../daemon/credentials.js';
import { type RunningDaemon, type StartDaemonOptions, startDaemon } from '../../daemon/daemon.js';
import { silentLogger } from '../../daemon/logger.js';
import { PEERCRED_ADDON_PATH } from '../../daemon/peercred.js';
import { packagePath } from '../../src/paths.js';
import { CLI } from '../helpers/cli.js';

/**
 * Builds daemon/native/peercred once. Test files run in parallel processes, so a mkdir lock keeps two builds from
 * writing the same folder. (scripts/setup.sh builds it too; then this returns at once.)
 */
export function ensurePeercredBuilt(): void {
  const lock = packagePath('daemon', 'native', 'peercred', '.build-lock');
  const deadline = Date.now() + 120_000;
  for (;;) {
    try {
      mkdirSync(lock);
      break;
    } catch {
      // A lock older than two minutes was left by a killed run.
      if (existsSync(lock) && Date.now() - statSync(lock).mtimeMs > 120_000) rmdirSync(lock);
      if (Date.now() > deadline) throw new Error(`peercred build lock ${lock} held too long`);
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 200);
    }
  }
  try {
    execFileSync('bash', [packagePath('daemon', 'native', 'peercred', 'build.sh')], { stdio: 'inherit' });
  } finally {
    rmdirSync(lock);
  }
  if (!existsSync(PEERCRED_ADDON_PATH)) throw new Error(`peercred addon missing after build: ${PEERCRED_ADDON_PATH}`);
}

const tempDirs: string[] = [];
// Registered while the importing test file is collected, so it runs after that file's own afterAll hooks.
afterAll(() => {
  for (const dir of tempDirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** A fresh private folder under /tmp (short paths: sun_path is 108 bytes), removed when the test file ends. */
export function tempDir(prefix = 'sbd-'): string {
  const dir = mkdtempSync(join('/tmp', prefix));
  tempDirs.push(dir);
  return dir;
}

/** A socket path in a fresh private temp folder; the daemon creates the `run` folder itself. */
export function tempSocketPath(): string {
  return join(tempDir(), 'run', 'daemon.sock');
}

export const keySource = (token: string): ApiKeySource => apiKeyFromEnv(token);

export function remoteConfig(
  url: string,
  tenants: Array<{ tenantId: string; label?: string; apiKey: string; certificates?: Record<string, string> }>,
  overrides: Partial<DaemonConfig> & { timeoutMs?: number } = {},
): DaemonConfig {
  const { timeoutMs, ...rest } = overrides;
  return {
    socketPath: tempSocketPath(),
    certificateDir: join(tempDir(), 'certificates'),
    logLevel: 'silent',
    upstream: {
      type: 'remote',
      url,
      apiKey: undefined,
      tenantApiKeys: new Map(tenants.map((t) => [t.tenantId, keySource(t.apiKey)])),
      timeoutMs: timeoutMs ?? 10_000,
    },
    tenants: tenants.map((t) => ({
      tenantId: t.tenantId,
      label: t.label ?? t.tenantId,
      certificates: t.certificates ?? {},
    })),
    cacheTtlMs: 60_000,
    approvalWaitMs: 300,
    sbomMaxBytes: 1024 * 1024,
    ...rest,
  };
}

export async function startTestDaemon(
  config: DaemonConfig,
  options: Partial<StartDaemonOptions> = {},
): Promise<RunningDaemon> {
  return startDaemon(config, { log: silentLogger(), ...options });
}

/** `signbridge daemon ARGS` as a child process, once it says it listens; `stop()` signals it and gives its exit code. */
export async function startDaemonProcess(args: string[], env: NodeJS.ProcessEnv = {}) {
  const child: ChildProcessWithoutNullStreams = spawn(process.execPath, [CLI, 'daemon', ...args], {
    env: { ...process.env, SIGNBRIDGE_API_KEY: '', ...env },
  });
  let out = '';
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`daemon did not start:\n${out}`)), 30_000);
    const onData = (chunk: Buffer) => {
      out += chunk.toString();
      if (/signbridge daemon listening on /.test(out)) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stderr.on('data', onData);
    child.stdout.on('data', onData);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`daemon exited with ${code}:\n${out}`));
    });
  });
  return {
    output: () => out,
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      child.kill(signal);
      return exited;
    },
  };
}
