// What the SQLite store shares with its threads (checkpointer-thread.ts, writer-thread.ts): the commit gate's
// shared words, the busy timeout, and how a thread is stopped.
import type { Worker } from 'node:worker_threads';

export const BUSY_TIMEOUT_MS = 5000;

/**
 * Commit gate states and the shared words' places; the checkpointer and writer threads get them through their
 * workerData.
 */
export const GATE = {
  OPEN: 0,
  COMMITTING: 1,
  CHECKPOINTING: 2,
  /** Word 0: the gate. Word 1: commits since the checkpointer's last pass. Word 2: pass requests. Word 3: 1 once
   * the checkpointer is gone (no commit waits for it then). Word 4: commits allowed between two passes. */
  WORD_GATE: 0,
  WORD_COMMITS: 1,
  WORD_WAKE: 2,
  WORD_GONE: 3,
  WORD_COMMITS_PER_PASS: 4,
} as const;

/** Commits that may land between two checkpoint passes by default (CommitGate says why). */
export const COMMITS_PER_PASS = 100;

/**
 * Words shared with the checkpointer thread. The gate: this thread commits only while it holds it, the
 * checkpointer holds it for its short catch-up pass. A commit is synchronous, so the thread that reads OPEN and
 * sets COMMITTING keeps it until leave(), with no await in between.
 *
 * The commit count: the gate alone bounds the WAL only if the checkpointer thread runs when its timer says. On a
 * loaded machine the thread went unscheduled while the event loop committed on, and the WAL grew to 91 MB between
 * two passes. So a committer asks for a pass once half of `commitsPerPass` commits landed since the last one, and
 * waits for it once all of them did: the WAL grows by at most that many commits between passes, however the
 * threads are scheduled.
 * Every pass resets the count, whatever it achieved, so a checkpoint that cannot finish (a reader holding an old
 * snapshot, another process's checkpoint) slows commits down but never stops them.
 */
export class CommitGate {
  readonly word = new Int32Array(new SharedArrayBuffer(5 * 4));

  constructor(commitsPerPass: number) {
    Atomics.store(this.word, GATE.WORD_COMMITS_PER_PASS, commitsPerPass);
  }

  tryEnter(): boolean {
    return Atomics.compareExchange(this.word, GATE.WORD_GATE, GATE.OPEN, GATE.COMMITTING) === GATE.OPEN;
  }

  /** Opens the gate: after this thread's commit, or when the checkpointer is gone (nothing may stay shut). */
  leave(): void {
    Atomics.add(this.word, GATE.WORD_COMMITS, 1);
    Atomics.store(this.word, GATE.WORD_GATE, GATE.OPEN);
  }

  /** True if the next commit must wait for a checkpoint pass; asks the checkpointer for one ahead of that. */
  mustWaitForPass(): boolean {
    if (Atomics.load(this.word, GATE.WORD_GONE) === 1) return false;
    const limit = Atomics.load(this.word, GATE.WORD_COMMITS_PER_PASS);
    const commits = Atomics.load(this.word, GATE.WORD_COMMITS);
    if (commits < limit / 2) return false;
    Atomics.add(this.word, GATE.WORD_WAKE, 1);
    Atomics.notify(this.word, GATE.WORD_WAKE);
    return commits >= limit;
  }

  /** The checkpointer is gone: open the gate and let every waiting commit go. */
  release(): void {
    Atomics.store(this.word, GATE.WORD_GONE, 1);
    Atomics.store(this.word, GATE.WORD_GATE, GATE.OPEN);
    Atomics.store(this.word, GATE.WORD_COMMITS, 0);
    Atomics.notify(this.word, GATE.WORD_COMMITS);
  }
}

/** Asks a store thread to stop, waits for it up to `graceMs`, then ends it. */
export async function stopThread(worker: Worker, graceMs: number): Promise<void> {
  const exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()));
  // Referenced while it stops: an unreferenced thread and timer let a process with nothing else to do end
  // in the middle of this wait, with exit code 0, before its caller could report an error.
  worker.ref();
  worker.postMessage('stop');
  let timer: NodeJS.Timeout | undefined;
  const gaveUp = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, graceMs);
  });
  await Promise.race([exited, gaveUp]);
  clearTimeout(timer);
  await worker.terminate();
}
