// Which store errors mean "the database cannot serve right now" (disk full, I/O error, locked past the busy
// timeout, file gone or read-only; for PostgreSQL a lost or refused connection, a server shutting down or starting,
// too many connections, a serialization failure or deadlock): the caller gets 503 store_unavailable with
// Retry-After instead of a 500, and the same request works again once the condition passes (nothing is cached in a
// broken state).
import { ApiError } from '../errors.js';

const SQLITE_UNAVAILABLE = /^SQLITE_(FULL|IOERR|BUSY|LOCKED|CANTOPEN|READONLY|PROTOCOL|NOMEM)/;

/** Node's socket errors when the database server cannot be reached or drops the connection. */
const NETWORK_UNAVAILABLE = /^(ECONNREFUSED|ECONNRESET|ETIMEDOUT|EPIPE|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH|ENETUNREACH)$/;

/**
 * PostgreSQL SQLSTATEs that pass by themselves: class 08 (connection exception), 53 (insufficient resources: disk
 * full, out of memory, too many connections), 57P01-57P03 (admin shutdown, crash shutdown, cannot connect now),
 * 40001 / 40P01 (serialization failure, deadlock: retry the transaction), 58030 (I/O error), 25006 (read-only
 * transaction: a standby promoted or demoted during failover).
 */
const POSTGRES_UNAVAILABLE = /^(08...|53...|57P0[123]|40001|40P01|58030|25006)$/;

/** pg's own messages for a connection it lost or could not get (they carry no code). */
const POOL_UNAVAILABLE =
  /Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error/;

/** The code of a store fault (SQLite result code, PostgreSQL SQLSTATE or socket error), or undefined. */
export function storeFault(err: unknown): string | undefined {
  const e = err as { code?: unknown; message?: unknown } | null;
  const code = e?.code;
  if (typeof code === 'string') {
    if (SQLITE_UNAVAILABLE.test(code)) return code;
    if (POSTGRES_UNAVAILABLE.test(code)) return `PostgreSQL ${code}`;
    if (NETWORK_UNAVAILABLE.test(code)) return `database connection ${code}`;
  }
  if (typeof e?.message === 'string' && POOL_UNAVAILABLE.test(e.message)) return 'database connection lost';
  return undefined;
}

export function storeUnavailable(fault: string): ApiError {
  return new ApiError('store_unavailable', `the database cannot serve right now (${fault}); retry later`);
}
