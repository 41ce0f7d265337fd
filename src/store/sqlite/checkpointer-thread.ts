// The checkpointer thread of a long-running SQLite store (sqlite-checkpointer.cjs says why).
import { Worker } from 'node:worker_threads';
import { packagePath } from '../../paths.js';
import { SQLITE_DRIVER_PATH } from './sqlite-driver.js';
import { BUSY_TIMEOUT_MS, CommitGate, GATE, stopThread } from './sqlite-threads.js';

const CHECKPOINTER_PATH = packagePath('src', 'store', 'sqlite', 'sqlite-checkpointer.cjs');

/** What the checkpointer thread has done: passes, passes with the commits held (and for how long in all), lockouts. */
export interface CheckpointerStats {
  passes: number;
  gatedPasses: number;
  gateMs: number;
  /** Passes that found another connection's checkpoint under way (and were tried again a few ms later). */
  lockedOut: number;
}

/** Atomics.waitAsync (ES2024; in every supported Node, but not in the ES2023 library this project compiles with). */
const waitAsync = (
  Atomics as unknown as {
    waitAsync(
      array: Int32Array,
      index: number,
      value: number,
      timeoutMs: number,
    ): { async: boolean; value: Promise<string> | string };
  }
).waitAsync;

/** WAL length (in frames, 4 KiB pages) past which the checkpointer catches up with the commits held. */
export const RESTART_FRAMES = 1000;

/** The checkpointer thread of a long-running store (sqlite-checkpointer.cjs says why). */
export class Checkpointer {
  readonly gate: CommitGate;
  private readonly worker: Worker;
  private waiting: Array<(stats: CheckpointerStats | undefined) => void> = [];
  private gateWaiters: Array<() => void> = [];
  private stopped = false;

  /**
   * `onDeath` runs if the thread fails to start or ends before stop(): the caller turns SQLite's automatic
   * checkpoint back on, so the WAL never grows without bound.
   */
  constructor(
    path: string,
    intervalMs: number,
    restartFrames: number,
    commitsPerPass: number,
    onError: (message: string) => void,
    onDeath: () => void,
    workerFile = CHECKPOINTER_PATH,
  ) {
    this.gate = new CommitGate(commitsPerPass);
    this.worker = new Worker(workerFile, {
      workerData: {
        path,
        intervalMs,
        restartFrames,
        busyTimeoutMs: BUSY_TIMEOUT_MS,
        betterSqlite3Path: SQLITE_DRIVER_PATH,
        gate: this.gate.word.buffer,
        gateStates: GATE,
      },
    });
    this.worker.on('message', (msg: { type: string; message?: string; stats?: CheckpointerStats }) => {
      if (msg.type === 'error' && msg.message) onError(msg.message);
      if (msg.type === 'open') this.wakeGateWaiters();
      if (msg.type === 'done') for (const resolve of this.waiting.splice(0)) resolve(msg.stats);
    });
    this.worker.on('error', (err) => onError(err.message));
    this.worker.on('exit', () => {
      this.gate.release();
      this.wakeGateWaiters();
      for (const resolve of this.waiting.splice(0)) resolve(undefined);
      if (!this.stopped) {
        this.stopped = true;
        onError('the checkpointer thread ended; SQLite checkpoints inside commits again');
        onDeath();
      }
    });
    this.worker.unref();
  }

  /**
   * Resolves once the checkpointer has let go of the commit gate. Called right after tryEnter() failed, in the
   * same synchronous run: the thread posts 'open' only after it let go, so that message is still to come.
   */
  reopened(): Promise<void> {
    if (this.stopped) return Promise.resolve();
    // Referenced while a commit waits: a process with nothing else to do must not end before its records are written.
    if (this.gateWaiters.length === 0) this.worker.ref();
    return new Promise((resolve) => this.gateWaiters.push(resolve));
  }

  /** Resolves once the checkpointer has made a pass since mustWaitForPass() said to wait (or is gone). */
  async passed(): Promise<void> {
    const word = this.gate.word;
    // Referenced while a commit waits, as in reopened().
    this.worker.ref();
    try {
      // The time-out only asks again: a pass that began before the request may not have seen it.
      while (this.gate.mustWaitForPass()) {
        const waited = waitAsync(word, GATE.WORD_COMMITS, Atomics.load(word, GATE.WORD_COMMITS), 1000);
        if (waited.async) await waited.value;
      }
    } finally {
      if (this.gateWaiters.length === 0 && !this.stopped) this.worker.unref();
    }
  }

  now(): Promise<CheckpointerStats | undefined> {
    if (this.stopped) return Promise.resolve(undefined);
    return new Promise((resolve) => {
      this.waiting.push(resolve);
      this.worker.postMessage('now');
    });
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    for (const resolve of this.waiting.splice(0)) resolve(undefined);
    await stopThread(this.worker, 2000);
    this.gate.release();
    this.wakeGateWaiters();
  }

  private wakeGateWaiters(): void {
    if (this.gateWaiters.length === 0) return;
    if (!this.stopped) this.worker.unref();
    for (const resolve of this.gateWaiters.splice(0)) resolve();
  }
}
