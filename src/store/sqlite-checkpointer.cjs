// The SQLite WAL checkpointer thread (sqlite-store.ts: backgroundCheckpoints). SQLite's automatic checkpoint runs
// inside a commit once the WAL passes 1000 pages: it copies the pages into the database file and fsyncs it, in
// whatever request happens to commit then (several ms on a virtual disk, in the middle of a signature). Here the
// service's own connection has wal_autocheckpoint = 0 and this thread, on a connection of its own, checkpoints
// whenever the WAL has grown. PASSIVE never waits for readers or the writer, so the event loop is never held up;
// the writer starts the WAL over once every frame is in the database file.
// Plain CommonJS so it runs the same from the TypeScript sources (tests) and from dist/.
'use strict';
const { statSync } = require('node:fs');
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.betterSqlite3Path);

const db = new Database(workerData.path, { fileMustExist: true });
db.pragma(`busy_timeout = ${workerData.busyTimeoutMs}`);
const checkpoint = db.prepare('PRAGMA wal_checkpoint(PASSIVE)');
const walPath = `${workerData.path}-wal`;
let lastSize = -1;
let lastRun = 0;

function walSize() {
  try {
    return statSync(walPath).size;
  } catch {
    return 0; // no WAL yet, or the database was closed
  }
}

function tick() {
  const size = walSize();
  // A WAL that grew since the last pass (or was started over and refilled) has frames to copy.
  if (size === lastSize || size === 0) return;
  const start = Date.now();
  try {
    const [row] = checkpoint.all();
    parentPort.postMessage({ type: 'checkpoint', ms: Date.now() - start, log: row?.log, copied: row?.checkpointed });
  } catch (err) {
    // SQLITE_BUSY (another checkpointer, or a closing database): the next tick tries again.
    parentPort.postMessage({ type: 'error', message: err instanceof Error ? err.message : String(err) });
  }
  lastSize = walSize();
  lastRun = start;
}

const timer = setInterval(tick, workerData.intervalMs);
parentPort.on('message', (msg) => {
  if (msg === 'stop') {
    clearInterval(timer);
    db.close();
    parentPort.close();
  } else if (msg === 'now') {
    lastSize = -1;
    tick();
    parentPort.postMessage({ type: 'done', at: lastRun });
  }
});
