// The daemon's API key: from a file only its owner can read (re-read when it changes, so a renewed key needs no
// restart), or from SIGNBRIDGE_API_KEY for CI. The key itself is never logged; `description` says where it is.
import { readFileSync, statSync, watch } from 'node:fs';
import { basename, dirname } from 'node:path';
import { currentUid } from './socket-path.js';

export interface ApiKeySource {
  readonly description: string;
  /** What to tell the user when the service refuses this key (e.g. run `signbridge login`). */
  readonly renewHint?: string;
  get(): string;
  /**
   * A source that can get a new key by itself (the CI token exchange, src/cli/ci/workload-key.ts): called when the
   * service refused the key (401); true when there is a new key, and the refused request is sent again once.
   */
  renewAfterRefusal?(): Promise<boolean>;
}

export class CredentialError extends Error {}

export function apiKeyFromEnv(value: string): ApiKeySource {
  const key = value.trim();
  if (!key) throw new CredentialError('SIGNBRIDGE_API_KEY is set but empty');
  return { description: 'SIGNBRIDGE_API_KEY', get: () => key };
}

/** How long a key read from its file is used before the file is looked at again, unless a watch saw it change. */
export const KEY_FILE_RECHECK_MS = 1000;

export interface KeyFileOptions {
  /** Default KEY_FILE_RECHECK_MS; 0 looks at the file for every key (the old behaviour, one statSync each). */
  recheckMs?: number;
  now?: () => number;
  /** Default true; false leaves only the look every `recheckMs` (as where no watch can be set). */
  watch?: boolean;
}

/**
 * A key from a file. Looked at (stat, and read when it changed) at most once per `recheckMs`, and at once after a
 * watch on its folder saw it change or a rename replace it: a stat per signature was 3% of the daemon's CPU on the
 * full path (docs/benchmarks.md, "Less per request"). A key the service refuses (401) is looked for again at once
 * (renewAfterRefusal), so a rotated key is used by the next signature even before the watch tells.
 */
export function apiKeyFromFile(path: string, uid = currentUid(), opts: KeyFileOptions = {}): ApiKeySource {
  const recheckMs = opts.recheckMs ?? KEY_FILE_RECHECK_MS;
  const now = opts.now ?? Date.now;
  let cached: { key: string; ino: number; mtimeMs: number; ctimeMs: number; size: number } | undefined;
  let checkedAt = Number.NEGATIVE_INFINITY;
  let changed = false;
  const read = (): string => {
    if (cached && !changed && now() - checkedAt < recheckMs) return cached.key;
    changed = false;
    checkedAt = now();
    let st: ReturnType<typeof statSync>;
    try {
      st = statSync(path);
    } catch (err) {
      checkedAt = Number.NEGATIVE_INFINITY; // an error is never cached: the next call looks again
      throw new CredentialError(`API key file ${path}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
    }
    // The inode too: `signbridge login` replaces the file by rename, which may keep size and mtime.
    if (
      cached &&
      cached.ino === st.ino &&
      cached.mtimeMs === st.mtimeMs &&
      cached.ctimeMs === st.ctimeMs &&
      cached.size === st.size
    ) {
      return cached.key;
    }
    cached = undefined;
    checkedAt = Number.NEGATIVE_INFINITY; // until the key checks out, every call looks again
    if (!st.isFile()) throw new CredentialError(`API key file ${path} is not a regular file`);
    if ((st.mode & 0o077) !== 0) {
      throw new CredentialError(
        `API key file ${path} has mode ${(st.mode & 0o777).toString(8)}; it must be 600 (chmod 600 ${path})`,
      );
    }
    if (st.uid !== uid && st.uid !== 0) {
      throw new CredentialError(`API key file ${path} is owned by uid ${st.uid}, not by this user (uid ${uid})`);
    }
    const key = readFileSync(path, 'utf8').trim();
    if (!key) throw new CredentialError(`API key file ${path} is empty`);
    cached = { key, ino: st.ino, mtimeMs: st.mtimeMs, ctimeMs: st.ctimeMs, size: st.size };
    checkedAt = now();
    return key;
  };
  read(); // fail at start, not at the first signature
  if (recheckMs > 0 && opts.watch !== false) {
    watchForChanges(path, () => {
      changed = true;
    });
  }
  return {
    description: `file ${path}`,
    get: read,
    renewAfterRefusal: async () => {
      const refused = cached?.key;
      changed = true;
      try {
        return read() !== refused;
      } catch {
        return false;
      }
    },
  };
}

/**
 * Calls `onChange` when the file at `path` may have changed: a watch on its folder, which also sees the file
 * replaced by a rename (a watch on the file itself would follow the old inode). Best effort: where no watch can be
 * set (no inotify left, a file system without), the time-based look still finds the change. Does not keep the
 * process alive.
 */
function watchForChanges(path: string, onChange: () => void): void {
  const name = basename(path);
  try {
    const watcher = watch(dirname(path), { persistent: false }, (_event, file) => {
      if (file === null || file === name) onChange();
    });
    watcher.on('error', () => watcher.close());
  } catch {
    // No watch: the key is looked at every recheckMs instead.
  }
}
