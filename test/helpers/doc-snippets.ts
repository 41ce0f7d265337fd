// The commands in docs/clients.md are the commands the tool tests run, so the docs cannot drift from what works.
// A snippet is a fenced block whose info string names it:
//
//   ```sh id=openssl-dgst-sign
//   openssl dgst -sha256 -sign "pkcs11:token=$TOKEN;type=private" -out file.sig file
//   ```
//
// Tests run a snippet with bash (-e -u -o pipefail) in a folder of their choosing, with the variables the
// snippet uses ($MODULE, $TOKEN, ...) in its environment.
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { packagePath } from '../../src/paths.js';

export const CLIENTS_DOC = packagePath('docs', 'clients.md');

let shimDir: string | undefined;
/**
 * PATH with a `signbridge` command first (a shim that runs this checkout's bin/signbridge.js), so snippets call
 * `signbridge ...` as a user with the package installed would.
 */
export function pathWithSignbridge(): string {
  if (!shimDir) {
    shimDir = mkdtempSync(join(tmpdir(), 'sb-bin-'));
    const shim = join(shimDir, 'signbridge');
    writeFileSync(shim, `#!/bin/sh\nexec "${process.execPath}" "${packagePath('bin', 'signbridge.js')}" "$@"\n`);
    chmodSync(shim, 0o755);
  }
  return `${shimDir}:${process.env.PATH ?? ''}`;
}

/** All snippets of a markdown file, by id. */
export function docSnippets(path = CLIENTS_DOC): Map<string, string> {
  const text = readFileSync(path, 'utf8');
  const found = new Map<string, string>();
  const fence = /^```[a-z]*[ \t]+id=([A-Za-z0-9_.-]+)[^\n]*\n([\s\S]*?)^```[ \t]*$/gm;
  for (const m of text.matchAll(fence)) {
    const id = m[1] as string;
    if (found.has(id)) throw new Error(`${path}: snippet id ${id} is used twice`);
    found.set(id, m[2] as string);
  }
  return found;
}

/** One snippet's text; throws when docs/clients.md has no such snippet. */
export function docSnippet(id: string, path = CLIENTS_DOC): string {
  const s = docSnippets(path).get(id);
  if (s === undefined) throw new Error(`${path} has no snippet id=${id}`);
  return s;
}

export interface SnippetRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a snippet with bash in `cwd`; `env` adds to the test process's environment; `doc`: default clients.md. */
export function runSnippet(
  id: string,
  cwd: string,
  env: NodeJS.ProcessEnv = {},
  timeoutMs = 120_000,
  doc = CLIENTS_DOC,
): SnippetRun {
  const script = docSnippet(id, doc);
  const res = spawnSync('bash', ['-euo', 'pipefail', '-c', script], {
    cwd,
    env: { ...process.env, PATH: pathWithSignbridge(), ...env },
    encoding: 'utf8',
    timeout: timeoutMs,
  });
  return { code: res.status, stdout: res.stdout, stderr: res.stderr };
}

/** Like runSnippet, but throws with the snippet's output when it fails. */
export function runSnippetOk(
  id: string,
  cwd: string,
  env: NodeJS.ProcessEnv = {},
  timeoutMs = 120_000,
  doc = CLIENTS_DOC,
): SnippetRun {
  const r = runSnippet(id, cwd, env, timeoutMs, doc);
  if (r.code !== 0) {
    throw new Error(`snippet ${id} exited with ${r.code}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`);
  }
  return r;
}

/**
 * Like runSnippetOk, without blocking the test's event loop while the snippet runs (a test that keeps a load going
 * from this process meanwhile: a backup under load).
 */
export function runSnippetInBackground(
  id: string,
  cwd: string,
  env: NodeJS.ProcessEnv,
  doc: string,
): Promise<SnippetRun> {
  const child = spawn('bash', ['-euo', 'pipefail', '-c', docSnippet(id, doc)], {
    cwd,
    env: { ...process.env, PATH: pathWithSignbridge(), ...env },
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => {
    stdout += d;
  });
  child.stderr.on('data', (d) => {
    stderr += d;
  });
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => {
      if (code === 0) resolve({ code, stdout, stderr });
      else reject(new Error(`snippet ${id} exited with ${code}\n--- stdout\n${stdout}\n--- stderr\n${stderr}`));
    });
  });
}
