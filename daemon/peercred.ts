// The one place that touches the native addon (daemon/native/peercred): SO_PEERCRED for a connected socket.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { Socket } from 'node:net';
import { INSTALLED_PACKAGE, nativeMissingHint, nativePath } from '../src/paths.js';

export interface PeerCred {
  pid: number;
  uid: number;
  gid: number;
}

export const PEERCRED_ADDON_PATH = nativePath('peercredAddon');
export const PEERCRED_BUILD_COMMAND = 'bash daemon/native/peercred/build.sh';

type GetPeerCred = (fd: number) => PeerCred;
let loaded: GetPeerCred | undefined;

/** Loads the addon; without it the daemon cannot check peers, so it refuses to start (fails closed). */
export function loadPeerCred(): GetPeerCred {
  if (loaded) return loaded;
  if (!existsSync(PEERCRED_ADDON_PATH)) {
    const todo = INSTALLED_PACKAGE
      ? nativeMissingHint()
      : `run \`${PEERCRED_BUILD_COMMAND}\` from the signbridge folder (or scripts/setup.sh)`;
    throw new Error(`the peer-credential addon is not built (${PEERCRED_ADDON_PATH}); ${todo}`);
  }
  const addon = createRequire(import.meta.url)(PEERCRED_ADDON_PATH) as { getPeerCred: GetPeerCred };
  loaded = addon.getPeerCred;
  return loaded;
}

/**
 * The file descriptor behind a connected net.Socket. Node does not document `_handle.fd`, but it is stable on
 * Unix for pipe handles and is what every peer-credential package uses; -1 when unavailable (then: refuse).
 */
export function socketFd(socket: Socket): number {
  const fd = (socket as unknown as { _handle?: { fd?: unknown } })._handle?.fd;
  return typeof fd === 'number' ? fd : -1;
}

/** The peer's credentials, or an Error explaining why they could not be read. */
export function peerOf(socket: Socket, getPeerCred: GetPeerCred = loadPeerCred()): PeerCred | Error {
  const fd = socketFd(socket);
  if (fd < 0) return new Error('no file descriptor for the connection');
  try {
    return getPeerCred(fd);
  } catch (err) {
    return err instanceof Error ? err : new Error(String(err));
  }
}
