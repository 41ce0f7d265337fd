// Where the daemon listens, and the checks on the folder that holds the socket: the folder is the real access
// control (0700, ours), the socket mode (0600) and the SO_PEERCRED check are the second and third locks.
import { lstatSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';

export function currentUid(): number {
  return process.getuid?.() ?? 0;
}

/** $SIGNBRIDGE_SOCKET, else $XDG_RUNTIME_DIR/signbridge/daemon.sock, else /tmp/signbridge-<uid>/daemon.sock. */
export function defaultSocketPath(env: NodeJS.ProcessEnv = process.env, uid = currentUid()): string {
  if (env.SIGNBRIDGE_SOCKET) return env.SIGNBRIDGE_SOCKET;
  if (env.XDG_RUNTIME_DIR) return join(env.XDG_RUNTIME_DIR, 'signbridge', 'daemon.sock');
  return join('/tmp', `signbridge-${uid}`, 'daemon.sock');
}

export class SocketDirError extends Error {}

/**
 * Creates the socket's folder 0700 if missing (with a tight umask, so there is no window with wider modes), and
 * refuses a folder that is a symlink, is owned by another user, or is open to group or others: anyone who could
 * write there could swap the socket for their own.
 */
export function prepareSocketDir(socketPath: string, uid = currentUid()): string {
  const dir = dirname(socketPath);
  const old = process.umask(0o077);
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  } finally {
    process.umask(old);
  }
  const st = lstatSync(dir);
  if (!st.isDirectory()) throw new SocketDirError(`socket folder ${dir} is not a directory (or is a symlink)`);
  if (st.uid !== uid) {
    throw new SocketDirError(`socket folder ${dir} is owned by uid ${st.uid}, not by this user (uid ${uid}); refusing`);
  }
  if ((st.mode & 0o077) !== 0) {
    throw new SocketDirError(
      `socket folder ${dir} has mode ${(st.mode & 0o777).toString(8)}; it must be 700 (chmod 700 ${dir})`,
    );
  }
  return dir;
}
