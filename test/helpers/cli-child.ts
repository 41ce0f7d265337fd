// The compiled CLI in a child process without blocking this process's event loop (a service or a stand-in answers
// from here), with its output as it comes: a test can wait for a line, then send a signal.
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { join } from 'node:path';
import { CLI } from './cli.js';

/**
 * The environment of a build host that signs in with `signbridge login`: its own config folder under `dir` (where
 * login writes the key), and none of the variables that would give the daemon or the CLI a key, a service URL or a
 * browser from the developer's own environment.
 */
export function loginEnv(dir: string): NodeJS.ProcessEnv {
  return {
    XDG_CONFIG_HOME: join(dir, 'config'),
    SIGNBRIDGE_SERVICE_URL: '',
    SIGNBRIDGE_API_KEY: '',
    SIGNBRIDGE_API_KEY_FILE: '',
    BROWSER: '',
    DISPLAY: '',
  };
}

export interface CliChild {
  child: ChildProcessWithoutNullStreams;
  stdout: () => string;
  stderr: () => string;
  /** Resolves when stderr matches `pattern` (rejects if the process ends first or after `timeoutMs`). */
  waitForStderr(pattern: RegExp, timeoutMs?: number): Promise<void>;
  done: Promise<{ code: number | null; stdout: string; stderr: string }>;
}

export function startCli(args: string[], env: NodeJS.ProcessEnv = {}): CliChild {
  const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, ...env } });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c: Buffer) => {
    stdout += c.toString();
  });
  child.stderr.on('data', (c: Buffer) => {
    stderr += c.toString();
  });
  const done = new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) =>
    child.on('close', (code) => resolve({ code, stdout, stderr })),
  );
  return {
    child,
    stdout: () => stdout,
    stderr: () => stderr,
    done,
    waitForStderr(pattern, timeoutMs = 30_000) {
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no ${pattern} on stderr:\n${stderr}`)), timeoutMs);
        const check = () => {
          if (pattern.test(stderr)) {
            clearTimeout(timer);
            child.stderr.off('data', check);
            resolve();
          }
        };
        child.stderr.on('data', check);
        void done.then(() => {
          clearTimeout(timer);
          if (pattern.test(stderr)) resolve();
          else reject(new Error(`process ended without ${pattern} on stderr:\n${stderr}`));
        });
        check();
      });
    },
  };
}

export function runCliChild(args: string[], env: NodeJS.ProcessEnv = {}) {
  return startCli(args, env).done;
}
