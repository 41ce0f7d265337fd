// Several processes starting at once on one data dir (instances on one machine, a service and an in-process daemon)
// all write <data-dir>/softhsm/softhsm2.conf. Written in place (truncate, then write), one of them could read it
// empty: SoftHSM then used its default token folder, made a "signbridge" token there, and that instance signed
// with keys outside the data dir (a clean-clone CI run's postgres-instances test met exactly this: one instance
// answered key_not_found for every key made through the others). The file is replaced whole now.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { packagePath } from '../../src/paths.js';
import { makeTempDir } from '../helpers/service.js';

const DIST = (...parts: string[]) => packagePath('dist', 'src', ...parts);

/** `writers` processes each running `script` (ES module source, given the folder as argv[1]) until they end. */
function runWriters(script: string, dir: string, writers: number): Promise<void> {
  return new Promise((resolve, reject) => {
    let left = writers;
    for (let i = 0; i < writers; i++) {
      const child = spawn(process.execPath, ['--input-type=module', '-e', script, dir], { stdio: 'inherit' });
      child.once('exit', (code) => {
        if (code !== 0) reject(new Error(`a writer exited with ${code}`));
        else if (--left === 0) resolve();
      });
    }
  });
}

/** Reads `path` until `done` says stop; every read must be one of `whole`. Returns how many reads were made. */
async function readWhileWriting(path: string, whole: string[], writing: Promise<void>): Promise<number> {
  let done = false;
  const finished = writing.finally(() => {
    done = true;
  });
  let reads = 0;
  while (!done) {
    let text: string | undefined;
    try {
      text = readFileSync(path, 'utf8');
    } catch {
      // not there yet
    }
    if (text !== undefined) {
      expect(whole, `read ${reads}: a file in the middle of being written`).toContain(text);
      reads++;
    }
    await new Promise((r) => setImmediate(r));
  }
  await finished;
  return reads;
}

describe('the embedded SoftHSM configuration with several processes starting at once', () => {
  it('is never seen half written while other processes write it', async () => {
    const dataDir = makeTempDir();
    const softhsmDir = join(dataDir, 'softhsm');
    const script = `
      const { writeSoftHsmConfig } = await import(${JSON.stringify(DIST('keys', 'pkcs11', 'softhsm.js'))});
      for (let i = 0; i < 400; i++) writeSoftHsmConfig(process.argv[1]);
    `;
    // The first write, to know what a whole file is.
    await runWriters(script.replace('400', '1'), softhsmDir, 1);
    const whole = readFileSync(join(softhsmDir, 'softhsm2.conf'), 'utf8');
    expect(whole).toContain(`directories.tokendir = ${join(softhsmDir, 'tokens')}\n`);
    const reads = await readWhileWriting(join(softhsmDir, 'softhsm2.conf'), [whole], runWriters(script, softhsmDir, 4));
    expect(reads).toBeGreaterThan(0);
  });

  it('replacePrivateFile: a reader sees the old content or the new, whole, and the file stays owner-only', async () => {
    const dir = makeTempDir();
    const path = join(dir, 'file');
    const a = `${'a'.repeat(64 * 1024)}\n`;
    const b = `${'b'.repeat(96 * 1024)}\n`;
    const script = `
      const { replacePrivateFile } = await import(${JSON.stringify(DIST('fs-private.js'))});
      const path = process.argv[1] + '/file';
      const [a, b] = ['a'.repeat(64 * 1024) + '\\n', 'b'.repeat(96 * 1024) + '\\n'];
      for (let i = 0; i < 300; i++) replacePrivateFile(path, i % 2 ? a : b);
    `;
    const reads = await readWhileWriting(path, [a, b], runWriters(script, dir, 3));
    expect(reads).toBeGreaterThan(0);
    const { statSync, readdirSync } = await import('node:fs');
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(readdirSync(dir)).toEqual(['file']); // no temporary left behind
  });
});
