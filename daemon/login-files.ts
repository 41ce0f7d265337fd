// What `signbridge login` leaves on the build host, shared by the CLI (which writes it) and the daemon (which reads
// it): a private folder ($XDG_CONFIG_HOME/signbridge, else ~/.config/signbridge) holding the API key (`api-key`,
// 0600) and `login.json` (service URL, tenant, person, expiry: no secret). Each file is replaced atomically (a
// temp file in the same folder, then rename), so a daemon reading them never sees half a key.
import { createHash, randomBytes } from 'node:crypto';
import {
  chmodSync,
  closeSync,
  existsSync,
  fsyncSync,
  lstatSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  rmSync,
  writeSync,
} from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { currentUid } from './socket-path.js';

export interface LoginFiles {
  dir: string;
  keyFile: string;
  metadataFile: string;
}

/** login.json: everything the daemon and `status` need to know about the key, and nothing that would let one use it. */
export interface LoginMetadata {
  service_url: string;
  tenant_id: string;
  roles: string[];
  email: string | null;
  /** ISO 8601; null for a key that does not expire. */
  expires_at: string | null;
  created_at: string;
  /** First 16 hex digits of SHA-256(key): ties this file to the key beside it (a login half-replaced shows). */
  key_fingerprint: string;
}

export class LoginFileError extends Error {}

export function defaultLoginFiles(env: NodeJS.ProcessEnv = process.env): LoginFiles {
  const base = env.XDG_CONFIG_HOME || join(env.HOME || homedir(), '.config');
  const dir = join(base, 'signbridge');
  return { dir, keyFile: join(dir, 'api-key'), metadataFile: join(dir, 'login.json') };
}

/**
 * Where `signbridge login --ci` keeps the exchanged key: the job's own runtime folder, gone with the job ($RUNNER_TEMP
 * on GitHub Actions, else $XDG_RUNTIME_DIR), else a folder of this user's under the OS temp folder (0700, checked
 * by preparePrivateDir). Never the home folder: a self-hosted runner's home outlives the job.
 */
export function ciLoginFiles(env: NodeJS.ProcessEnv = process.env): LoginFiles {
  const dir = env.RUNNER_TEMP
    ? join(env.RUNNER_TEMP, 'signbridge')
    : env.XDG_RUNTIME_DIR
      ? join(env.XDG_RUNTIME_DIR, 'signbridge-ci')
      : join(tmpdir(), `signbridge-ci-${currentUid()}`);
  return { dir, keyFile: join(dir, 'api-key'), metadataFile: join(dir, 'login.json') };
}

/** The login the daemon and `signbridge sign` use: `signbridge login`'s, else a `login --ci` of this job, if any. */
export function loginFilesInUse(env: NodeJS.ProcessEnv = process.env): LoginFiles {
  const files = defaultLoginFiles(env);
  if (existsSync(files.keyFile)) return files;
  const ci = ciLoginFiles(env);
  return existsSync(ci.keyFile) ? ci : files;
}

export function keyFingerprint(key: string): string {
  return createHash('sha256').update(key.trim()).digest('hex').slice(0, 16);
}

/** The metadata, or undefined when there is none; a file that is not ours is an error, not "signed out". */
export function readLoginMetadata(files: LoginFiles): LoginMetadata | undefined {
  let text: string;
  try {
    text = readFileSync(files.metadataFile, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new LoginFileError(`${files.metadataFile}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new LoginFileError(`${files.metadataFile} is not JSON`);
  }
  const m = value as Partial<LoginMetadata> | null;
  if (
    !m ||
    typeof m.service_url !== 'string' ||
    typeof m.tenant_id !== 'string' ||
    typeof m.key_fingerprint !== 'string' ||
    (m.expires_at !== null && (typeof m.expires_at !== 'string' || Number.isNaN(Date.parse(m.expires_at))))
  ) {
    throw new LoginFileError(`${files.metadataFile} lacks service_url, tenant_id, key_fingerprint or expires_at`);
  }
  return {
    service_url: m.service_url,
    tenant_id: m.tenant_id,
    roles: Array.isArray(m.roles) ? m.roles.filter((r): r is string => typeof r === 'string') : [],
    email: typeof m.email === 'string' ? m.email : null,
    expires_at: m.expires_at,
    created_at: typeof m.created_at === 'string' ? m.created_at : '',
    key_fingerprint: m.key_fingerprint,
  };
}

/** The key `signbridge login` stored, or undefined when there is none. */
export function readLoginKey(files: LoginFiles): string | undefined {
  try {
    return readFileSync(files.keyFile, 'utf8').trim() || undefined;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new LoginFileError(`${files.keyFile}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
  }
}

/**
 * Creates the folder 0700 (under a 077 umask: no window with wider modes) and refuses one that is a symlink or
 * belongs to someone else; an existing folder of ours with group or other bits is tightened.
 */
export function preparePrivateDir(dir: string, uid = currentUid()): void {
  const old = process.umask(0o077);
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  } finally {
    process.umask(old);
  }
  const st = lstatSync(dir);
  if (!st.isDirectory()) throw new LoginFileError(`${dir} is not a directory (or is a symlink); refusing`);
  if (st.uid !== uid) throw new LoginFileError(`${dir} is owned by uid ${st.uid}, not by this user (uid ${uid})`);
  if ((st.mode & 0o077) !== 0) chmodSync(dir, 0o700);
}

/** Writes key and metadata, the key first: a daemon that reads the new key beside the old metadata sees the mismatch. */
export function writeLogin(files: LoginFiles, apiKey: string, metadata: Omit<LoginMetadata, 'key_fingerprint'>): void {
  preparePrivateDir(files.dir);
  replaceFile(files.keyFile, `${apiKey}\n`);
  const full: LoginMetadata = { ...metadata, key_fingerprint: keyFingerprint(apiKey) };
  replaceFile(files.metadataFile, `${JSON.stringify(full, null, 2)}\n`);
}

/** Removes the key, then the metadata; returns whether there was a key. */
export function removeLogin(files: LoginFiles): boolean {
  let had = false;
  try {
    lstatSync(files.keyFile);
    had = true;
  } catch {
    // no key
  }
  rmSync(files.keyFile, { force: true });
  rmSync(files.metadataFile, { force: true });
  return had;
}

function replaceFile(path: string, content: string): void {
  const temp = `${path}.${randomBytes(6).toString('hex')}.tmp`;
  // 'wx': never through a file or symlink someone left under that name; 0600 from creation.
  const fd = openSync(temp, 'wx', 0o600);
  try {
    writeSync(fd, content);
    fsyncSync(fd);
  } catch (err) {
    closeSync(fd);
    rmSync(temp, { force: true });
    throw err;
  }
  closeSync(fd);
  try {
    renameSync(temp, path);
  } catch (err) {
    rmSync(temp, { force: true });
    throw err;
  }
}
