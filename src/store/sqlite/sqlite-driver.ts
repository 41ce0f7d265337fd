// The one place that loads better-sqlite3, in the build this runtime can run.
// - better-sqlite3 up to 12 wraps its objects in node::ObjectWrap. On Node 24 that destructor aborts the process
//   (`Assertion failed: (env) != nullptr` in RemoveEnvironmentCleanupHook) when V8 collects a statement during a
//   callback with no context entered, e.g. in the microtask after a socket read: a service on Node 24 would die
//   under ordinary load (test/unit/sqlite-driver.test.ts runs that reproduction).
// - better-sqlite3 13 is a Node-API addon (N-API 10, Node >= 22), prebuilt for linux-x64 inside its npm package.
//   Node 20 has N-API 9 and crashes on it, so Node 20 keeps 12, installed under the alias better-sqlite3-node20
//   and built at install for the machine's Node.
import { createRequire } from 'node:module';
import type BetterSqlite3 from 'better-sqlite3';

const require = createRequire(import.meta.url);

/** The package this runtime loads: 13 (Node-API) from Node 22 on, the alias of 12 on Node 20. */
export const SQLITE_DRIVER_PACKAGE =
  Number(process.versions.node.split('.')[0]) >= 22 ? 'better-sqlite3' : 'better-sqlite3-node20';

/** Its entry file, for a worker thread to load the same build (the WAL checkpointer). */
export const SQLITE_DRIVER_PATH = require.resolve(SQLITE_DRIVER_PACKAGE);

const Driver = require(SQLITE_DRIVER_PATH) as typeof BetterSqlite3;

/** Opens a SQLite database with the driver this runtime can load (options as better-sqlite3's). */
export function openSqlite(filename: string, options?: BetterSqlite3.Options): BetterSqlite3.Database {
  return new Driver(filename, options);
}
