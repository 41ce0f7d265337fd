// The C sign loop (test/native/sign_loop.c): N threads signing through the real module until a stop file appears,
// printing "signed N failed F bad B" as they go. Tests count its progress, never time it.
import { spawn } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import { packagePath } from '../../src/paths.js';

const SIGN_LOOP = packagePath('build', 'native', 'test', 'sbp11_sign_loop');

export interface SignLoopProgress {
  signed: number;
  failed: number;
  bad: number;
}

export interface SignLoop {
  progress(): SignLoopProgress;
  /** Resolves once the threads have received `n` signatures in all; throws if the loop ends first. */
  waitForSigned(n: number): Promise<void>;
  /** Tells the threads to stop; resolves with the exit code, the last progress and what the loop wrote to stderr. */
  stop(): Promise<{ code: number | null; result: SignLoopProgress; stderr: string }>;
}

/** Starts `threads` threads signing for token `tenant` through the module, talking to the daemon at `env`'s socket. */
export function startSignLoop(dir: string, tenant: string, threads: number, env: NodeJS.ProcessEnv): SignLoop {
  if (!existsSync(SIGN_LOOP)) throw new Error(`${SIGN_LOOP} is not built: run scripts/setup.sh`);
  const stopFile = join(dir, `stop-${tenant}`);
  const loop = spawn(SIGN_LOOP, [MODULE_PATH, tenant, String(threads), stopFile], {
    env: { ...process.env, SIGNBRIDGE_LOG: `info:${join(dir, 'module.log')}`, ...env },
  });
  let out = '';
  let err = '';
  loop.stdout.on('data', (c: Buffer) => {
    out += c.toString();
  });
  loop.stderr.on('data', (c: Buffer) => {
    err += c.toString();
  });
  const exited = new Promise<number | null>((resolve) => loop.once('exit', (code) => resolve(code)));
  const progress = (): SignLoopProgress => {
    const last = [...out.matchAll(/signed (\d+) failed (\d+) bad (\d+)/g)].at(-1);
    return { signed: Number(last?.[1] ?? 0), failed: Number(last?.[2] ?? 0), bad: Number(last?.[3] ?? 0) };
  };
  return {
    progress,
    async waitForSigned(n: number) {
      while (progress().signed < n) {
        if (loop.exitCode !== null) throw new Error(`sign loop ended early:\n${out.slice(-500)}\n${err}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    async stop() {
      writeFileSync(stopFile, '');
      const code = await exited;
      return { code, result: progress(), stderr: err };
    },
  };
}
