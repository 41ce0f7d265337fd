import { expect, it } from 'vitest';
import { upstreamErrorFor } from '../../daemon/upstream/in-process-upstream.js';
import { ApiError } from '../../src/errors.js';
import { openSqlite } from '../../src/store/sqlite/sqlite-driver.js';
import { WireStatus } from '../../wire/wire.js';

/** A real SQLITE_FULL from SQLite: a database that may not grow by one page. */
function sqliteFull(): unknown {
  const db = openSqlite(':memory:');
  try {
    db.exec('CREATE TABLE t (x BLOB)');
    db.pragma(`max_page_count = ${db.pragma('page_count', { simple: true })}`);
    db.prepare('INSERT INTO t VALUES (?)').run(Buffer.alloc(64 * 1024));
  } catch (err) {
    return err;
  } finally {
    db.close();
  }
  throw new Error('SQLite did not fail');
}

it('maps a full store to UNAVAILABLE (retry), a key store outage too, and anything unknown to INTERNAL', () => {
  const full = upstreamErrorFor(sqliteFull());
  expect(full.status).toBe(WireStatus.UNAVAILABLE);
  expect(full.message).toMatch(/store_unavailable.*SQLITE_FULL/);
  const token = upstreamErrorFor(new ApiError('key_store_unavailable', 'the key store cannot serve right now'));
  expect(token.status).toBe(WireStatus.UNAVAILABLE);
  expect(upstreamErrorFor(new Error('a bug')).status).toBe(WireStatus.INTERNAL);
});
