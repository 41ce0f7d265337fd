// Runs C_SignInit + C_Sign on worker threads. On the main thread those calls cost about 0.2 ms a signature
// even when C_Sign itself runs on libuv's pool (SoftHSM unwraps the key in C_SignInit); moved here, the event
// loop only passes messages, and signatures use every core. The jobs one event-loop turn hands a thread go as one
// message, and the thread answers them in one: under load each message carries many signatures, so the wake-ups
// and (de)serialisations are paid per turn, not per signature. A batch's digests (one key, one mechanism) go as
// slices, one message per thread: the inputs in one buffer, answered with every signature in one buffer, so a
// batch costs no object, copy or promise per digest on the way.
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

/** Signatures of a batch, in its inputs' order: each a view into the one buffer its thread sent. */
export interface ThreadSignatures {
  /** A signature, or why the token did not make that one (the PKCS#11 error as the thread saw it). */
  results: Array<Buffer | Error>;
  /** The token's mean time per signature (C_SignInit + C_Sign on the threads, in ms). */
  tokenMs: number;
}

/** One signature as the thread receives it. */
interface JobMessage {
  id: number;
  mechanism: SignJob['mechanism'];
  handle: Uint8Array<ArrayBuffer>;
  input: Uint8Array<ArrayBuffer>;
}

/**
 * A slice of a batch as the thread receives it: `inputs` holds `inputs.length / inputLength` inputs of one length,
 * signed in order with one key and mechanism in the thread's one session.
 */
interface SliceMessage {
  id: number;
  mechanism: SignJob['mechanism'];
  handle: Uint8Array<ArrayBuffer>;
  inputs: Uint8Array<ArrayBuffer>;
  inputLength: number;
}

/**
 * One answer of the thread: the signature, or why it failed; for a slice, its signatures end to end in
 * `signatures`, each one's length in `lengths` (-1: not made, its error the next of `errors`) and `tokenMs` their
 * mean.
 */
interface AnswerMessage {
  id: number;
  signature?: Uint8Array;
  signatures?: Uint8Array;
  lengths?: Int32Array;
  errors?: string[];
  tokenMs?: number;
  error?: string;
  reopened?: boolean;
}

interface Pending {
  /** Takes the thread's answer to this message. */
  settle: (msg: AnswerMessage) => void;
  reject: (err: Error) => void;
  /** For a signature not yet sent again: what to do when its thread dies before answering (send it once more). */
  lost?: (err: Error) => void;
  /** Signatures the message asked for: the thread's load and inFlight count signatures, not messages. */
  weight: number;
}

interface Thread {
  worker: Worker;
  pending: Map<number, Pending>;
  /** Signatures asked of this thread and not yet answered. */
  load: number;
  /** Jobs of this turn not yet sent (flushed in setImmediate). */
  queued: JobMessage[];
}

/**
 * The fewest digests of a batch worth a thread of their own: a thread's wake-up and answer (~0.2-0.4 ms on a VM
 * whose idle cores sleep) is worth paying when its slice keeps it busy longer (P-256: ~0.05 ms a signature).
 */
const MIN_SLICE = 8;

const WORKER_PATH = packagePath('src', 'keys', 'pkcs11', 'pkcs11-sign-worker.cjs');
const pkcs11jsPath = createRequire(import.meta.url).resolve('pkcs11js');

export class SignThreadPool {
  private readonly threads: Thread[] = [];
  private nextId = 1;
  private next = 0;
  private closed = false;
  private busy = 0;
  /** Messages to the threads and answers from them (tests, diagnostics): a batch costs one each way per slice. */
  readonly messages = { sent: 0, answered: 0 };

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
    return new Promise<ThreadSignature>((resolve, reject) => this.post(job, resolve, reject, true));
  }

  /**
   * Queues one signature on the least-loaded thread. A thread that dies before answering takes its job with it;
   * `mayResend`: the job then goes once more, to the threads as they are after the dead one was replaced (a
   * signature the dead thread made is never seen, so signing again is harmless). A job that outlives two threads
   * fails.
   */
  private post(
    job: SignJob,
    resolve: (signature: ThreadSignature) => void,
    reject: (err: Error) => void,
    mayResend: boolean,
  ): void {
    // Least-loaded thread; ties go round-robin so both cores fill up under load.
    let thread = this.threads[this.next % this.threads.length] as Thread;
    this.next++;
    for (const t of this.threads) if (t.load < thread.load) thread = t;
    const id = this.nextId++;
    const settle = (msg: AnswerMessage) => {
      if (msg.signature) resolve({ signature: Buffer.from(msg.signature), tokenMs: msg.tokenMs ?? 0 });
      else reject(new Error(msg.error ?? 'signing thread failed'));
    };
    const lost = mayResend ? () => this.post(job, resolve, reject, false) : undefined;
    this.track(thread, id, { settle, reject, lost, weight: 1 });
    // Node Buffers are usually views into a shared 8 KiB pool, and structured clone copies the whole backing
    // store; exact-size copies, transferred, keep the message small.
    if (thread.queued.length === 0) setImmediate(() => this.flush(thread));
    thread.queued.push({ id, mechanism: job.mechanism, handle: exactCopy(job.handle), input: exactCopy(job.input) });
  }

  /**
   * Signs `inputs` (all of one length) with one key and mechanism: one slice per thread, least-loaded threads
   * first, no slice under MIN_SLICE inputs; a slice is one message and one answer. The results come in `inputs`'
   * order; an input the token fails is that input's Error, and the others are signed regardless.
   */
  async signMany(
    mechanism: SignJob['mechanism'],
    handle: Buffer,
    inputs: readonly Buffer[],
  ): Promise<ThreadSignatures> {
    if (this.closed) throw new Error('the signing threads are stopped');
    const inputLength = inputs[0]?.length ?? 0;
    if (inputs.some((input) => input.length !== inputLength)) throw new Error('a batch signs inputs of one length');
    const sliceCount = Math.max(1, Math.min(this.threads.length, Math.floor(inputs.length / MIN_SLICE)));
    const threads = [...this.threads].sort((a, b) => a.load - b.load).slice(0, sliceCount);
    const perSlice = Math.ceil(inputs.length / sliceCount);
    // Every slice settles before a failure is thrown: a caller that signs again at once then finds each thread
    // that died with its slice already replaced, not one still on its way out.
    const settled = await Promise.allSettled(
      threads.map((thread, i) =>
        this.signSlice(thread, mechanism, handle, inputs.slice(i * perSlice, (i + 1) * perSlice), inputLength),
      ),
    );
    const failed = settled.find((s) => s.status === 'rejected');
    if (failed) throw failed.reason;
    const answers = settled.map((s) => (s as PromiseFulfilledResult<ThreadSignatures>).value);
    const results = answers.flatMap((a) => a.results);
    const tokenMs = answers.reduce((sum, a) => sum + a.tokenMs * a.results.length, 0) / Math.max(results.length, 1);
    return { results, tokenMs };
  }

  private signSlice(
    thread: Thread,
    mechanism: SignJob['mechanism'],
    handle: Buffer,
    inputs: readonly Buffer[],
    inputLength: number,
  ): Promise<ThreadSignatures> {
    if (inputs.length === 0) return Promise.resolve({ results: [], tokenMs: 0 });
    const id = this.nextId++;
    const packed = new Uint8Array(new ArrayBuffer(inputLength * inputs.length));
    for (const [i, input] of inputs.entries()) packed.set(input, i * inputLength);
    const slice: SliceMessage = { id, mechanism, handle: exactCopy(handle), inputs: packed, inputLength };
    return new Promise<ThreadSignatures>((resolve, reject) => {
      const settle = (msg: AnswerMessage) => {
        if (msg.signatures && msg.lengths) {
          resolve({ results: unpack(msg.signatures, msg.lengths, msg.errors ?? []), tokenMs: msg.tokenMs ?? 0 });
        } else reject(new Error(msg.error ?? 'signing thread failed'));
      };
      this.track(thread, id, { settle, reject, weight: inputs.length });
      this.send(thread, [id], { slice }, [slice.handle.buffer, packed.buffer]);
    });
  }

  /** Sends the thread the jobs of this turn in one message. */
  private flush(thread: Thread): void {
    const jobs = thread.queued;
    thread.queued = [];
    if (jobs.length === 0 || this.closed) return;
    const transfer = jobs.flatMap((j) => [j.handle.buffer, j.input.buffer]);
    this.send(
      thread,
      jobs.map((j) => j.id),
      { jobs },
      transfer,
    );
  }

  /** Posts one message; if that throws, the callers waiting on `ids` fail. */
  private send(thread: Thread, ids: number[], message: unknown, transfer: ArrayBuffer[]): void {
    try {
      thread.worker.postMessage(message, transfer);
      this.messages.sent++;
    } catch (err) {
      // Thrown here, outside any request, it would end the process and leave these callers waiting: they fail.
      for (const id of ids) this.untrack(thread, id)?.reject(err instanceof Error ? err : new Error(String(err)));
    }
  }

  /** Registers a message awaiting its answer; a thread with one keeps the process alive, an idle one does not. */
  private track(thread: Thread, id: number, pending: Pending): void {
    if (thread.pending.size === 0) thread.worker.ref();
    thread.pending.set(id, pending);
    thread.load += pending.weight;
    this.busy += pending.weight;
  }

  private untrack(thread: Thread, id: number): Pending | undefined {
    const pending = thread.pending.get(id);
    if (!pending) return undefined;
    thread.pending.delete(id);
    thread.load -= pending.weight;
    this.busy -= pending.weight;
    if (thread.pending.size === 0) thread.worker.unref();
    return pending;
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
          new Promise<void>((resolve, reject) => {
            const id = this.nextId++;
            const settle = (msg: AnswerMessage) => {
              if (msg.reopened) resolve();
              else reject(new Error(msg.error ?? 'signing thread failed'));
            };
            this.track(thread, id, { settle, reject, weight: 1 });
            this.send(thread, [id], { id, reopen: true, forgetOld }, []);
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
    for (const thread of this.threads) this.failAll(thread, new Error('the signing threads are stopped'));
  }

  /** Takes every message off `thread` and returns them (its load and the pool's in-flight count drop with them). */
  private takeAll(thread: Thread): Pending[] {
    const pending = [...thread.pending.values()];
    this.busy -= thread.load;
    thread.load = 0;
    thread.pending.clear();
    return pending;
  }

  private failAll(thread: Thread, err: Error): void {
    for (const p of this.takeAll(thread)) p.reject(err);
  }

  private spawn(): Thread {
    const worker = new Worker(WORKER_PATH, {
      workerData: { modulePath: this.modulePath, tokenLabel: this.tokenLabel, pkcs11jsPath },
    });
    const thread: Thread = { worker, pending: new Map(), load: 0, queued: [] };
    const answer = (msg: AnswerMessage) => this.untrack(thread, msg.id)?.settle(msg);
    worker.on('message', (msg: AnswerMessage | { answers: AnswerMessage[] }) => {
      this.messages.answered++;
      if ('answers' in msg) for (const one of msg.answers) answer(one);
      else answer(msg);
    });
    // A thread that dies is replaced. Its slices and re-opens fail (a batch then signs each digest through `sign`);
    // its single signatures go once more, to the threads as they are once it is replaced (see post).
    const fail = (err: Error) => {
      const lost = this.takeAll(thread);
      thread.queued = [];
      const index = this.threads.indexOf(thread);
      if (!this.closed && index >= 0) this.threads[index] = this.spawn();
      for (const p of lost) {
        if (p.lost && !this.closed) p.lost(err);
        else p.reject(err);
      }
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

/** A slice's signatures as views into the one buffer the thread sent, an Error where one was not made. */
function unpack(signatures: Uint8Array, lengths: Int32Array, errors: readonly string[]): Array<Buffer | Error> {
  const all = Buffer.from(signatures.buffer, signatures.byteOffset, signatures.byteLength);
  const results: Array<Buffer | Error> = [];
  let offset = 0;
  let nextError = 0;
  for (const length of lengths) {
    if (length < 0) {
      results.push(new Error(errors[nextError++] ?? 'signing thread failed'));
      continue;
    }
    results.push(all.subarray(offset, offset + length));
    offset += length;
  }
  return results;
}
