import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  closeSync,
  existsSync,
  linkSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';

/** Creates a folder only its owner can enter, and tightens it if it already existed. */
export function ensurePrivateDir(path: string): void {
  mkdirSync(path, { recursive: true, mode: 0o700 });
  chmodSync(path, 0o700);
}

/** Writes a file readable only by its owner; the mode is set at creation, so there is no readable window. */
export function writePrivateFile(path: string, content: string): void {
  writeFileSync(path, content, { mode: 0o600 });
  chmodSync(path, 0o600);
}

/**
 * Replaces `path` with `content` (owner-only) so that a reader sees the old file or the new one, never a part of
 * either: written whole under a temporary name, then renamed over it. Nothing is written when the content is the
 * same. Several processes starting at once on one data dir all write the SoftHSM configuration; a plain rewrite
 * (truncate, then write) let one of them read it empty, and SoftHSM then used its default token folder, made a
 * token there and signed with keys outside the data dir.
 */
export function replacePrivateFile(path: string, content: string): void {
  try {
    if (readFileSync(path, 'utf8') === content) {
      chmodSync(path, 0o600);
      return;
    }
  } catch {
    // absent or unreadable: write it
  }
  const temporary = `${path}.${process.pid}.${randomBytes(4).toString('hex')}`;
  writePrivateFile(temporary, content);
  try {
    renameSync(temporary, path);
  } catch (err) {
    rmSync(temporary, { force: true });
    throw err;
  }
}

/**
 * Reads a secret kept in a 0600 file, creating it with a random value on first use. Two processes starting at once
 * on a new data dir (two instances, a service and an in-process daemon) must end up with the same secret: the
 * file is written whole under a temporary name and linked into place, which fails if the other process won; then
 * its secret is read.
 */
export function readOrCreateSecret(path: string, bytes = 24): string {
  if (existsSync(path)) return readFileSync(path, 'utf8').trim();
  const secret = randomBytes(bytes).toString('base64url');
  const temporary = `${path}.${process.pid}.${randomBytes(4).toString('hex')}`;
  writePrivateFile(temporary, `${secret}\n`);
  try {
    linkSync(temporary, path);
    return secret;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    return readFileSync(path, 'utf8').trim();
  } finally {
    rmSync(temporary, { force: true });
  }
}

/**
 * Runs `fn` holding a lock file (created exclusively), so that only one process at a time does a first-start
 * step such as creating the embedded token. A lock older than `staleMs` was left by a process that died.
 */
export function withLockFile<T>(path: string, fn: () => T, staleMs = 30_000): T {
  const deadline = Date.now() + staleMs + 5_000;
  const nap = new Int32Array(new SharedArrayBuffer(4));
  for (;;) {
    try {
      closeSync(openSync(path, 'wx', 0o600));
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      try {
        if (Date.now() - statSync(path).mtimeMs > staleMs) rmSync(path, { force: true });
      } catch {
        // gone meanwhile: try again
      }
      if (Date.now() > deadline) throw new Error(`gave up waiting for the lock ${path}`);
      Atomics.wait(nap, 0, 0, 50); // a synchronous pause: this runs before the process serves anything
    }
  }
  try {
    return fn();
  } finally {
    rmSync(path, { force: true });
  }
}
