// Runs C_SignInit + C_Sign on worker threads. On the main thread those calls cost about 0.2 ms a signature
// even when C_Sign itself runs on libuv's pool (SoftHSM unwraps the key in C_SignInit); moved here, the event
// loop only passes messages, and signatures use every core. The jobs one event-loop turn hands a thread go as one
// message, and the thread answers them in one: under load each message carries many signatures, so the wake-ups
// and (de)serialisations are paid per turn, not per signature.
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import { packagePath } from '../../paths.js';

export interface SignJob {
  mechanism: { mechanism: number; parameter?: Record<string, number> };
  handle: Buffer;
  input: Buffer;
}

/** A signature and the time the token took for it (C_SignInit + C_Sign on the thread, in ms). */
export interface ThreadSignature {
  signature: Buffer;
  tokenMs: number;
}

interface Pending {
  resolve: (result: ThreadSignature | undefined) => void;
  reject: (err: Error) => void;
}

/** One signature as the thread receives it. */
interface JobMessage {
  id: number;
  mechanism: SignJob['mechanism'];
  handle: Uint8Array<ArrayBuffer>;
  input: Uint8Array<ArrayBuffer>;
}

/** One answer of the thread: the signature, or why it failed. */
interface AnswerMessage {
  id: number;
  signature?: Uint8Array;
  tokenMs?: number;
  error?: string;
  reopened?: boolean;
}

interface Thread {
  worker: Worker;
  pending: Map<number, Pending>;
  /** Jobs of this turn not yet sent (flushed in setImmediate). */
  queued: JobMessage[];
}

const WORKER_PATH = packagePath('src', 'keys', 'pkcs11', 'pkcs11-sign-worker.cjs');
const pkcs11jsPath = createRequire(import.meta.url).resolve('pkcs11js');

export class SignThreadPool {
  private readonly threads: Thread[] = [];
  private nextId = 1;
  private next = 0;
  private closed = false;
  private busy = 0;

  constructor(
    private readonly modulePath: string,
    private readonly tokenLabel: string,
    size: number,
  ) {
    for (let i = 0; i < size; i++) this.threads.push(this.spawn());
  }

  /** Signatures handed to a thread and not yet answered. */
  get inFlight(): number {
    return this.busy;
  }

  sign(job: SignJob): Promise<ThreadSignature> {
    if (this.closed) return Promise.reject(new Error('the signing threads are stopped'));
    // Least-loaded thread; ties go round-robin so both cores fill up under load.
    let thread = this.threads[this.next % this.threads.length] as Thread;
    this.next++;
    for (const t of this.threads) if (t.pending.size < thread.pending.size) thread = t;
    const id = this.nextId++;
    return new Promise<ThreadSignature>((resolve, reject) => {
      // An idle thread must not keep the process alive; a busy one must.
      if (thread.pending.size === 0) thread.worker.ref();
      thread.pending.set(id, { resolve: resolve as Pending['resolve'], reject });
      this.busy++;
      // Node Buffers are usually views into a shared 8 KiB pool, and structured clone copies the whole backing
      // store; exact-size copies, transferred, keep the message small.
      if (thread.queued.length === 0) setImmediate(() => this.flush(thread));
      thread.queued.push({ id, mechanism: job.mechanism, handle: exactCopy(job.handle), input: exactCopy(job.input) });
    });
  }

  /** Sends the thread the jobs of this turn in one message. */
  private flush(thread: Thread): void {
    const jobs = thread.queued;
    thread.queued = [];
    if (jobs.length === 0 || this.closed) return;
    const transfer = jobs.flatMap((j) => [j.handle.buffer, j.input.buffer]);
    try {
      thread.worker.postMessage({ jobs }, transfer);
    } catch (err) {
      // Thrown here, outside any request, it would end the process and leave these callers waiting: they fail.
      for (const { id } of jobs) {
        const p = thread.pending.get(id);
        if (!p) continue;
        thread.pending.delete(id);
        this.busy--;
        p.reject(err instanceof Error ? err : new Error(String(err)));
      }
      if (thread.pending.size === 0) thread.worker.unref();
    }
  }

  /**
   * Every thread opens a new session and closes its old one: after the token lost its sessions (the caller has
   * logged in again). `forgetOld`: the module was finalized and initialised again, which ended the old sessions and
   * may have given their handle numbers to new ones, so the threads drop theirs without closing them. Rejects with
   * the first thread's error if a thread cannot.
   */
  async reopenSessions(forgetOld = false): Promise<void> {
    if (this.closed) throw new Error('the signing threads are stopped');
    // Every thread's answer, failed or not, before returning: the caller may C_Finalize the module next, which must
    // not run while a thread is still inside it.
    const answers = await Promise.allSettled(
      this.threads.map(
        (thread) =>
          new Promise<ThreadSignature | undefined>((resolve, reject) => {
            const id = this.nextId++;
            if (thread.pending.size === 0) thread.worker.ref();
            thread.pending.set(id, { resolve, reject });
            this.busy++;
            thread.worker.postMessage({ id, reopen: true, forgetOld });
          }),
      ),
    );
    const failed = answers.find((a) => a.status === 'rejected');
    if (failed) throw failed.reason;
  }

  /** Stops the threads; a signature still in flight fails (its answer may never come) rather than hanging. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(this.threads.map((t) => t.worker.terminate()));
    for (const thread of this.threads) {
      for (const p of thread.pending.values()) p.reject(new Error('the signing threads are stopped'));
      this.busy -= thread.pending.size;
      thread.pending.clear();
    }
  }

  private spawn(): Thread {
    const worker = new Worker(WORKER_PATH, {
      workerData: { modulePath: this.modulePath, tokenLabel: this.tokenLabel, pkcs11jsPath },
    });
    const thread: Thread = { worker, pending: new Map(), queued: [] };
    const answer = (msg: AnswerMessage) => {
      const p = thread.pending.get(msg.id);
      if (!p) return;
      thread.pending.delete(msg.id);
      this.busy--;
      if (thread.pending.size === 0) worker.unref();
      if (msg.reopened) p.resolve(undefined);
      else if (msg.signature) p.resolve({ signature: Buffer.from(msg.signature), tokenMs: msg.tokenMs ?? 0 });
      else p.reject(new Error(msg.error ?? 'signing thread failed'));
    };
    worker.on('message', (msg: AnswerMessage | { answers: AnswerMessage[] }) => {
      if ('answers' in msg) for (const one of msg.answers) answer(one);
      else answer(msg);
    });
    // A thread that dies fails its jobs (nothing is signed twice) and is replaced.
    const fail = (err: Error) => {
      for (const p of thread.pending.values()) p.reject(err);
      this.busy -= thread.pending.size;
      thread.pending.clear();
      thread.queued = [];
      if (this.closed) return;
      const index = this.threads.indexOf(thread);
      if (index >= 0) this.threads[index] = this.spawn();
    };
    worker.on('error', fail);
    worker.on('exit', (code) => {
      if (!this.closed) fail(new Error(`signing thread exited with code ${code}`));
    });
    worker.unref();
    return thread;
  }
}

function exactCopy(buf: Buffer): Uint8Array<ArrayBuffer> {
  const copy = new Uint8Array(new ArrayBuffer(buf.length));
  copy.set(buf);
  return copy;
}
