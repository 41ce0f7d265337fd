// The SQLite WAL checkpointer thread (sqlite-store.ts: backgroundCheckpoints). SQLite's automatic checkpoint runs
// inside a commit once the WAL passes 1000 pages: it copies the pages into the database file and fsyncs it, in
// whatever request happens to commit then (several ms on a virtual disk, in the middle of a signature). Here the
// service's own connection has wal_autocheckpoint = 0 and this thread, on a connection of its own, checkpoints
// every intervalMs. PASSIVE never waits for readers or the writer, so the event loop is never held up.
//
// The writer starts the WAL over only when a transaction begins with every frame already in the database file.
// Under sustained load that never happens by itself: the service commits while the checkpoint copies, so each pass
// ends a little behind, and the WAL grew without bound (1 GB in 20 s of signing, in a benchmark). So once the WAL
// is long, a second pass runs with the service's commits held at the commit gate (a shared Int32: the service
// queues its writes while this thread holds it, and never blocks its event loop on it). That pass copies only the
// few frames written during the first, and the service's next commit starts the WAL over.
// Plain CommonJS so it runs the same from the TypeScript sources (tests) and from dist/.
'use strict';
const { performance } = require('node:perf_hooks');
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.betterSqlite3Path);

// Commit gate states, as sqlite-store.ts defines them.
const { OPEN, COMMITTING, CHECKPOINTING } = workerData.gateStates ?? {};
/** How long to try for the gate before leaving it to the next pass (the service holds it only for one commit). */
const GATE_WAIT_MS = 100;
/**
 * Another process's checkpointer (an in-process daemon or a second service on the same data dir) holds SQLite's
 * checkpoint lock: try again this much later rather than a whole interval later. Two processes checkpointing on
 * the same period can stay in step for seconds, each pass of ours landing inside one of theirs, while the WAL
 * grows (48 MB in a benchmark).
 */
const RETRY_MS = 5;
const MAX_RETRIES = 10;

const db = new Database(workerData.path, { fileMustExist: true });
db.pragma(`busy_timeout = ${workerData.busyTimeoutMs}`);
const checkpoint = db.prepare('PRAGMA wal_checkpoint(PASSIVE)');
const gate = workerData.gate ? new Int32Array(workerData.gate) : undefined;
const stats = { passes: 0, gatedPasses: 0, gateMs: 0, lockedOut: 0 };
let retries = 0;
let retryTimer;

// Every pass, not only when the WAL file grew: after a complete checkpoint the writer starts the WAL over and
// refills the same file without growing it. A pass with nothing new to copy returns at once, without I/O.
function tick() {
  try {
    stats.passes++;
    const { busy, log } = checkpoint.get();
    // busy with log -1: another connection is checkpointing (SQLite does not wait for its lock, in any mode).
    if (busy && log < 0) return retrySoon();
    if (gate && log >= workerData.restartFrames && !catchUpWithCommitsHeld()) return retrySoon();
    retries = 0;
  } catch (err) {
    // A closing database, or an I/O error: the next pass tries again.
    parentPort.postMessage({ type: 'error', message: err instanceof Error ? err.message : String(err) });
  }
}

function retrySoon() {
  stats.lockedOut++;
  if (retryTimer || retries >= MAX_RETRIES) return;
  retries++;
  retryTimer = setTimeout(() => {
    retryTimer = undefined;
    tick();
  }, RETRY_MS);
}

/** The second pass, with the service's commits held. False if another checkpointer had SQLite's lock. */
function catchUpWithCommitsHeld() {
  const deadline = performance.now() + GATE_WAIT_MS;
  while (Atomics.compareExchange(gate, 0, OPEN, CHECKPOINTING) !== OPEN) {
    if (performance.now() > deadline) return true; // the service kept committing: the next pass tries again
    Atomics.wait(gate, 0, COMMITTING, 1);
  }
  const start = performance.now();
  try {
    const { busy, log } = checkpoint.get();
    return !(busy && log < 0);
  } finally {
    Atomics.store(gate, 0, OPEN);
    stats.gatedPasses++;
    stats.gateMs += performance.now() - start;
    parentPort.postMessage({ type: 'open' });
  }
}

const timer = setInterval(tick, workerData.intervalMs);
parentPort.on('message', (msg) => {
  if (msg === 'stop') {
    clearInterval(timer);
    clearTimeout(retryTimer);
    db.close();
    parentPort.close();
  } else if (msg === 'now') {
    tick();
    parentPort.postMessage({ type: 'done', stats });
  }
});
