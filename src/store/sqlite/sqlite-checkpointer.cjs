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
// few frames written during the first, and starts the WAL over (TRUNCATE).
//
// Passes run on the interval timer and also when a committer asks for one (sqlite-threads.ts: CommitGate): on a
// loaded machine this thread's timer fired late while the service committed on.
// Plain CommonJS so it runs the same from the TypeScript sources (tests) and from dist/.
'use strict';
const { performance } = require('node:perf_hooks');
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.betterSqlite3Path);

// Commit gate states and shared words, as sqlite-threads.ts defines them (CommitGate).
const { OPEN, COMMITTING, CHECKPOINTING, WORD_GATE, WORD_COMMITS, WORD_WAKE } = workerData.gateStates ?? {};
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
/** How long the catch-up pass waits for readers and other processes' writers, with this process's commits held. */
const CATCH_UP_BUSY_MS = 10;

const db = new Database(workerData.path, { fileMustExist: true });
db.pragma(`busy_timeout = ${workerData.busyTimeoutMs}`);
const checkpoint = db.prepare('PRAGMA wal_checkpoint(PASSIVE)');
const truncate = db.prepare('PRAGMA wal_checkpoint(TRUNCATE)');
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
  } finally {
    // Whatever the pass achieved, the commits waiting for one may go on (CommitGate: slowed, never stopped).
    if (gate) {
      Atomics.store(gate, WORD_COMMITS, 0);
      Atomics.notify(gate, WORD_COMMITS);
    }
  }
}

/** A committer found too many commits since the last pass: run one now rather than at the next interval. */
function answerPassRequests() {
  const { async, value } = Atomics.waitAsync(gate, WORD_WAKE, Atomics.load(gate, WORD_WAKE));
  // A pending wait does not keep the thread alive: its interval timer does, and 'stop' ends both.
  const answer = () => {
    if (stopped) return;
    tick();
    answerPassRequests();
  };
  if (async) value.then(answer);
  else setImmediate(answer);
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
  while (Atomics.compareExchange(gate, WORD_GATE, OPEN, CHECKPOINTING) !== OPEN) {
    if (performance.now() > deadline) return true; // the service kept committing: the next pass tries again
    Atomics.wait(gate, WORD_GATE, COMMITTING, 1);
  }
  const start = performance.now();
  try {
    // TRUNCATE, not PASSIVE: it copies the last frames and starts the WAL over itself, at once. Left to this
    // process's next commit, the restart failed whenever another process's checkpoint held SQLite's read locks at
    // that moment, and the WAL grew on from its end (to 66 MB with a neighbour checkpointing every 5 ms). It
    // waits for readers and other processes' writers: briefly, so a long reader costs one missed restart, not a
    // stall of this process's commits.
    db.pragma(`busy_timeout = ${CATCH_UP_BUSY_MS}`);
    try {
      const { busy, log } = truncate.get();
      return !(busy && log < 0);
    } finally {
      db.pragma(`busy_timeout = ${workerData.busyTimeoutMs}`);
    }
  } finally {
    Atomics.store(gate, WORD_GATE, OPEN);
    stats.gatedPasses++;
    stats.gateMs += performance.now() - start;
    parentPort.postMessage({ type: 'open' });
  }
}

let stopped = false;
const timer = setInterval(tick, workerData.intervalMs);
if (gate) answerPassRequests();
parentPort.on('message', (msg) => {
  if (msg === 'stop') {
    stopped = true;
    clearInterval(timer);
    clearTimeout(retryTimer);
    db.close();
    parentPort.close();
  } else if (msg === 'now') {
    tick();
    parentPort.postMessage({ type: 'done', stats });
  }
});
