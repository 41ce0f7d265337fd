// Which store errors mean "the database cannot serve right now" (disk full, I/O error, locked past the busy
// timeout, file gone or read-only): the caller gets 503 store_unavailable with Retry-After instead of a 500, and
// the same request works again once the condition passes (nothing is cached in a broken state).
import { ApiError } from '../errors.js';

const UNAVAILABLE = /^SQLITE_(FULL|IOERR|BUSY|LOCKED|CANTOPEN|READONLY|PROTOCOL|NOMEM)/;

/** The SQLite result code of a store fault (better-sqlite3 puts it in `code`), or undefined. */
export function storeFault(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && UNAVAILABLE.test(code) ? code : undefined;
}

export function storeUnavailable(fault: string): ApiError {
  return new ApiError('store_unavailable', `the database cannot serve right now (${fault}); retry later`);
}
