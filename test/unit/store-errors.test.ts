// Store faults that mean "retry later" (src/store/store-errors.ts), from real SQLite errors rather than made-up
// codes: a write locked out past the busy timeout (SQLITE_BUSY) and a read-only database. Disk full is in
// test/api/store-faults.test.ts, through the whole API.
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { openSqlite } from '../../src/store/sqlite/sqlite-driver.js';
import { permanentConnectionProblem, storeFault, storeUnavailable } from '../../src/store/store-errors.js';
import { makeTempDir } from '../helpers/service.js';

function caught(fn: () => unknown): unknown {
  try {
    fn();
  } catch (err) {
    return err;
  }
  throw new Error('expected an error');
}

describe('storeFault', () => {
  it('a write locked out by another connection past the busy timeout is SQLITE_BUSY: 503 store_unavailable', () => {
    const path = join(makeTempDir(), 'busy.db');
    const holder = openSqlite(path);
    holder.pragma('journal_mode = WAL');
    holder.exec('CREATE TABLE t (x INTEGER)');
    const other = openSqlite(path, { timeout: 50 });
    try {
      holder.exec('BEGIN IMMEDIATE');
      holder.exec('INSERT INTO t VALUES (1)');
      const err = caught(() => other.exec('INSERT INTO t VALUES (2)'));
      expect(storeFault(err)).toMatch(/^SQLITE_BUSY/);
      const apiError = storeUnavailable(storeFault(err) as string);
      expect(apiError.statusCode).toBe(503);
      expect(apiError.code).toBe('store_unavailable');
      holder.exec('COMMIT');
      // The condition passed: the same write works.
      other.exec('INSERT INTO t VALUES (2)');
      expect(other.prepare('SELECT count(*) AS n FROM t').get()).toEqual({ n: 2 });
    } finally {
      holder.close();
      other.close();
    }
  });

  it('a read-only database is SQLITE_READONLY; a constraint violation is not a store fault', () => {
    const path = join(makeTempDir(), 'ro.db');
    const setup = openSqlite(path);
    setup.exec('CREATE TABLE t (x INTEGER PRIMARY KEY)');
    setup.exec('INSERT INTO t VALUES (1)');
    const duplicate = caught(() => setup.exec('INSERT INTO t VALUES (1)'));
    expect(storeFault(duplicate)).toBeUndefined();
    setup.close();
    const readOnly = openSqlite(path, { readonly: true });
    try {
      expect(storeFault(caught(() => readOnly.exec('INSERT INTO t VALUES (2)')))).toMatch(/^SQLITE_READONLY/);
    } finally {
      readOnly.close();
    }
  });
});

// PgBouncer's own errors, with the messages PgBouncer 1.18 sends (test/cli/pgbouncer.test.ts meets the first and
// the last through a real one). All carry 08P01; only the configuration ones are permanent at start.
describe('permanentConnectionProblem', () => {
  const pgbouncer = (message: string) => Object.assign(new Error(message), { code: '08P01' });

  it('names the fix for a startup parameter, database or user PgBouncer does not know', () => {
    expect(permanentConnectionProblem(pgbouncer('unsupported startup parameter: options'))).toMatch(
      /"options": remove it from the database URL, or add it to ignore_startup_parameters in pgbouncer\.ini/,
    );
    expect(permanentConnectionProblem(pgbouncer('no such database: sb'))).toMatch(/\[databases\] section/);
    expect(permanentConnectionProblem(pgbouncer('no such user: sb'))).toMatch(/auth_file/);
  });

  it('leaves the passing ones to wait for, and other errors to storeFault', () => {
    for (const message of [
      'pgbouncer cannot connect to server',
      'server login has been failing, try again later (server_login_retry)',
      'query_wait_timeout',
      'no more connections allowed (max_client_conn)',
    ]) {
      expect(permanentConnectionProblem(pgbouncer(message)), message).toBeUndefined();
      expect(storeFault(pgbouncer(message)), message).toBe('PostgreSQL 08P01');
    }
    expect(permanentConnectionProblem(Object.assign(new Error('refused'), { code: 'ECONNREFUSED' }))).toBeUndefined();
  });
});
