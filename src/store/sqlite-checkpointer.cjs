// The SQLite WAL checkpointer thread (sqlite-store.ts: backgroundCheckpoints). SQLite's automatic checkpoint runs
// inside a commit once the WAL passes 1000 pages: it copies the pages into the database file and fsyncs it, in
// whatever request happens to commit then (several ms on a virtual disk, in the middle of a signature). Here the
// service's own connection has wal_autocheckpoint = 0 and this thread, on a connection of its own, checkpoints
// every intervalMs. PASSIVE never waits for readers or the writer, so the event loop is never held up;
// the writer starts the WAL over once every frame is in the database file.
// Plain CommonJS so it runs the same from the TypeScript sources (tests) and from dist/.
'use strict';
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.betterSqlite3Path);

const db = new Database(workerData.path, { fileMustExist: true });
db.pragma(`busy_timeout = ${workerData.busyTimeoutMs}`);
const checkpoint = db.prepare('PRAGMA wal_checkpoint(PASSIVE)');

// Every pass, not only when the WAL file grew: after a complete checkpoint the writer starts the WAL over and
// refills the same file without growing it. A pass with nothing new to copy returns at once, without I/O.
function tick() {
  try {
    checkpoint.run();
  } catch (err) {
    // SQLITE_BUSY (another checkpointer, or a closing database): the next pass tries again.
    parentPort.postMessage({ type: 'error', message: err instanceof Error ? err.message : String(err) });
  }
}

const timer = setInterval(tick, workerData.intervalMs);
parentPort.on('message', (msg) => {
  if (msg === 'stop') {
    clearInterval(timer);
    db.close();
    parentPort.close();
  } else if (msg === 'now') {
    tick();
    parentPort.postMessage({ type: 'done' });
  }
});
