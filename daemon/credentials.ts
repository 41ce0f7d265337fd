// The daemon's API key: from a file only its owner can read (re-read when it changes, so a renewed key needs no
// restart), or from SIGNBRIDGE_API_KEY for CI. The key itself is never logged; `description` says where it is.
import { readFileSync, statSync } from 'node:fs';
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

export function apiKeyFromFile(path: string, uid = currentUid()): ApiKeySource {
  let cached: { key: string; ino: number; mtimeMs: number; ctimeMs: number; size: number } | undefined;
  const read = (): string => {
    let st: ReturnType<typeof statSync>;
    try {
      st = statSync(path);
    } catch (err) {
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
    return key;
  };
  read(); // fail at start, not at the first signature
  return { description: `file ${path}`, get: read };
}
