// CTX_SBOM_PATH: the module sends a path (from SIGNBRIDGE_SBOM), the daemon reads the file. Bounded, regular
// files only, checked on the open descriptor (no check-then-open race). A relative path is the client's: it is
// resolved against the peer process's working directory (/proc/<pid>/cwd), since the daemon's cwd means nothing.
import { closeSync, constants, fstatSync, openSync, readSync } from 'node:fs';
import { isAbsolute, join } from 'node:path';
import { WireStatus } from '../wire/wire.js';
import { UpstreamError } from './upstream/upstream.js';

export const DEFAULT_SBOM_MAX_BYTES = 4 * 1024 * 1024;

const UTF8 = new TextDecoder('utf-8', { fatal: true });

export function readSbom(path: string, maxBytes: number, peerPid?: number): string {
  const bad = (why: string) => new UpstreamError(WireStatus.BAD_REQUEST, `SBOM ${path}: ${why}`);
  let full = path;
  if (!isAbsolute(path)) {
    if (!peerPid)
      throw bad('relative path, and the client process is unknown; set SIGNBRIDGE_SBOM to an absolute path');
    full = join('/proc', String(peerPid), 'cwd', path);
  }
  let fd: number;
  try {
    fd = openSync(full, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch (err) {
    throw bad(`cannot open (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw bad('not a regular file');
    if (st.size > maxBytes) throw bad(`${st.size} bytes, more than the limit of ${maxBytes}`);
    // Read one byte more than the limit, in case the file grew since fstat.
    const buf = Buffer.alloc(Math.min(st.size, maxBytes) + 1);
    let got = 0;
    for (;;) {
      const n = readSync(fd, buf, got, buf.length - got, null);
      if (n === 0) break;
      got += n;
      if (got > maxBytes) throw bad(`more than the limit of ${maxBytes} bytes`);
      if (got === buf.length) break;
    }
    if (got === 0) throw bad('empty file');
    try {
      return UTF8.decode(buf.subarray(0, got));
    } catch {
      throw bad('not UTF-8 text (an SPDX or CycloneDX JSON document is expected)');
    }
  } finally {
    closeSync(fd);
  }
}
