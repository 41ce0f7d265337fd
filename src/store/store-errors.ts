// Which store errors mean "the database cannot serve right now" (disk full, I/O error, locked past the busy
// timeout, file gone or read-only; for PostgreSQL a lost or refused connection, no session within the connection
// wait, a server shutting down or starting, too many connections, a serialization failure or deadlock, a statement
// cancelled by the statement timeout): the caller gets 503 store_unavailable with Retry-After instead of a 500, and
// the same request works again once the condition passes (nothing is cached in a broken state).
import { ApiError } from '../errors.js';

const SQLITE_UNAVAILABLE = /^SQLITE_(FULL|IOERR|BUSY|LOCKED|CANTOPEN|READONLY|PROTOCOL|NOMEM)/;

/** Node's socket errors when the database server cannot be reached or drops the connection. */
const NETWORK_UNAVAILABLE = /^(ECONNREFUSED|ECONNRESET|ETIMEDOUT|EPIPE|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH|ENETUNREACH)$/;

/**
 * PostgreSQL SQLSTATEs that pass by themselves: class 08 (connection exception), 53 (insufficient resources: disk
 * full, out of memory, too many connections), 57P01-57P03 (admin shutdown, crash shutdown, cannot connect now),
 * 40001 / 40P01 (serialization failure, deadlock: retry the transaction), 58030 (I/O error), 25006 (read-only
 * transaction: a standby promoted or demoted during failover), 57014 (a statement cancelled by the statement
 * timeout: it waited too long, most often for a lock another session holds).
 */
const POSTGRES_UNAVAILABLE = /^(08...|53...|57014|57P0[123]|40001|40P01|58030|25006)$/;

/** pg's own messages for a connection it lost (they carry no code). */
const CONNECTION_LOST = /Connection terminated|Client has encountered a connection error/;

/** pg-pool's, and postgres-store.ts's, when no session could be had within the connection wait. */
const CONNECTION_WAIT = /timeout exceeded when trying to connect|Connection terminated due to connection timeout/;

/** The code of a store fault (SQLite result code, PostgreSQL SQLSTATE or socket error), or undefined. */
export function storeFault(err: unknown): string | undefined {
  const e = err as { code?: unknown; message?: unknown } | null;
  const code = e?.code;
  if (typeof code === 'string') {
    if (SQLITE_UNAVAILABLE.test(code)) return code;
    if (POSTGRES_UNAVAILABLE.test(code)) return `PostgreSQL ${code}`;
    if (NETWORK_UNAVAILABLE.test(code)) return `database connection ${code}`;
  }
  if (typeof e?.message === 'string') {
    if (CONNECTION_WAIT.test(e.message)) return 'no database connection free within the connection wait';
    if (CONNECTION_LOST.test(e.message)) return 'database connection lost';
  }
  return undefined;
}

export function storeUnavailable(fault: string): ApiError {
  return new ApiError('store_unavailable', `the database cannot serve right now (${fault}); retry later`);
}

/**
 * PgBouncer answers every error of its own with SQLSTATE 08P01 (protocol violation), the ones that pass by
 * themselves (the server is down or restarting, the pool is full) and the ones that are its configuration's
 * (an unknown startup parameter, database or user) alike; these are the messages of the first kind.
 */
const POOLER_TRANSIENT =
  /cannot connect to server|server login has been failing|query_wait_timeout|no more connections allowed|client_login_timeout|shutting down|server conn crashed|database configuration changed|database removed/i;

/**
 * Why a connection error at start will not pass by waiting, with the fix, or undefined when it may (or is not a
 * protocol error at all: the caller's storeFault decides). A protocol violation (08P01) is a server or pooler that
 * refuses how we connect; waiting 30 s for it to change its mind only hides the reason.
 */
export function permanentConnectionProblem(err: unknown): string | undefined {
  const e = err as { code?: unknown; message?: unknown } | null;
  if (e?.code !== '08P01') return undefined;
  const message = typeof e.message === 'string' ? e.message : '';
  if (POOLER_TRANSIENT.test(message)) return undefined;
  const parameter = /unsupported startup parameter: (\S+)/.exec(message)?.[1];
  if (parameter) {
    return (
      `the server (a pooler such as PgBouncer) refuses the connection parameter "${parameter}": remove it from the ` +
      `database URL, or add it to ignore_startup_parameters in pgbouncer.ini`
    );
  }
  if (/no such database/i.test(message)) return 'add the database to the [databases] section of pgbouncer.ini';
  if (/no such user|password authentication failed|not allowed/i.test(message)) {
    return "check the user and password in the URL against PgBouncer's auth_file (or auth_query)";
  }
  return "a protocol error at connection: check that the URL points at PostgreSQL or PgBouncer and the pooler's configuration";
}

/** A store write that conflicts with what is there (each Store method says when it throws it). */
export class ConflictError extends Error {}
