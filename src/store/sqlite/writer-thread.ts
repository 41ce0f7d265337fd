// The writer thread of a SQLite store with `writerThread` (sqlite-writer.cjs says why).
import { Worker } from 'node:worker_threads';
import { packagePath } from '../../paths.js';
import { ENTRY_PACKING_PATH } from '../audit/audit-rows.js';
import type { CommitSink } from '../commit/commit-sink.js';
import {
  CHAIN_RACE_ATTEMPTS,
  entriesOf,
  type PendingWrite,
  settleWithSeqs,
  WRITE_BATCH_MAX,
  type Write,
} from '../commit/group-commit.js';
import { SQLITE_DRIVER_PATH } from './sqlite-driver.js';
import { BUSY_TIMEOUT_MS, type CommitGate, GATE, stopThread } from './sqlite-threads.js';

const WRITER_PATH = packagePath('src', 'store', 'sqlite', 'sqlite-writer.cjs');
const AUDIT_HASH_PATH = packagePath('src', 'store', 'audit', 'audit-hash.cjs');
const AUDIT_WORDS_PATH = packagePath('src', 'store', 'sqlite', 'audit-words.cjs');

/** `entries`: how many audit entries the write appends (group-commit.ts: entriesOf). */
type Settle = Pick<PendingWrite, 'resolve' | 'reject'> & { entries: number };

/** The writer thread of a store with `writerThread` (sqlite-writer.cjs says why). */
export class StoreWriter implements CommitSink {
  private readonly worker: Worker;
  private readonly waiting = new Map<number, Settle>();
  private nextId = 0;
  private stopped = false;

  /** `onDeath` runs if the thread fails to start or ends before stop(); the writes it held have failed by then. */
  constructor(
    path: string,
    spinMs: number,
    gate: CommitGate | undefined,
    onError: (message: string) => void,
    onDeath: () => void,
    workerFile = WRITER_PATH,
  ) {
    this.worker = new Worker(workerFile, {
      workerData: {
        path,
        spinMs,
        busyTimeoutMs: BUSY_TIMEOUT_MS,
        batchMax: WRITE_BATCH_MAX,
        chainRaceAttempts: CHAIN_RACE_ATTEMPTS,
        noAutoCheckpoint: gate !== undefined,
        betterSqlite3Path: SQLITE_DRIVER_PATH,
        auditHashPath: AUDIT_HASH_PATH,
        entryPackingPath: ENTRY_PACKING_PATH,
        auditWordsPath: AUDIT_WORDS_PATH,
        gate: gate?.word.buffer,
        gateStates: GATE,
      },
    });
    this.worker.on(
      'message',
      (msg: { type: string; ids: number[]; firstSeq?: number; message?: string; code?: string }) => {
        const failure =
          msg.type === 'failed' ? Object.assign(new Error(msg.message), { code: msg.code || undefined }) : undefined;
        const settled = msg.ids.map((id) => {
          const settle = this.waiting.get(id);
          this.waiting.delete(id);
          return settle;
        });
        if (failure) for (const settle of settled) settle?.reject(failure);
        else
          settleWithSeqs(
            settled.map((s) => ({ entries: s?.entries ?? 0, settle: (seq) => s?.resolve(seq) })),
            msg.firstSeq,
          );
        if (this.waiting.size === 0) this.worker.unref();
      },
    );
    this.worker.on('error', (err) => onError(err.message));
    this.worker.on('exit', () => {
      const lost = new Error('the store writer thread ended before it confirmed these writes');
      for (const settle of this.waiting.values()) settle.reject(lost);
      this.waiting.clear();
      if (!this.stopped) {
        this.stopped = true;
        onError('the store writer thread ended; the event loop commits again');
        onDeath();
      }
    });
    this.worker.unref();
  }

  write(write: Write, resolve: (seq: number | undefined) => void, reject: (err: unknown) => void): void {
    // A message to an ended thread goes nowhere: the caller would wait for ever.
    if (this.stopped) {
      reject(new Error('the store is closed'));
      return;
    }
    const id = ++this.nextId;
    // Referenced while writes are under way: the process must not end before they are durable.
    if (this.waiting.size === 0) this.worker.ref();
    this.waiting.set(id, { resolve, reject, entries: entriesOf(write) });
    this.worker.postMessage({ id, ...write });
  }

  /** Lets the thread commit what it was given, then ends it. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    await stopThread(this.worker, 10_000);
  }
}
