// Worker threads for the software key store's signatures (software-sign-worker.mjs). ML-DSA-65 through noble takes
// ~10 ms of CPU and SM2 through sm-crypto about as long (docs/benchmarks.md): on the event loop, each would stall
// every other request for that long; on threads the loop only passes messages and both cores sign.
import { Worker } from 'node:worker_threads';
import { ApiError } from '../../errors.js';
import { packagePath } from '../../paths.js';

export interface SoftwareSignJob {
  family: 'ml-dsa' | 'sm2';
  /** ML-DSA's parameter set. */
  level?: 44 | 65 | 87;
  /**
   * The unsealed private key in an ArrayBuffer of its own: it is transferred (the caller's view is emptied, not
   * copied) and the thread zeroes it after the signature.
   */
  secret: ArrayBuffer;
  /** μ (ML-DSA) or e = SM3(Z_A || M) (SM2). */
  input: Buffer;
}

interface Pending {
  resolve: (signature: Buffer) => void;
  reject: (err: Error) => void;
}

interface Thread {
  worker: Worker;
  pending: Map<number, Pending>;
}

const WORKER_PATH = packagePath('src', 'keys', 'software', 'software-sign-worker.mjs');

export class SoftwareSignPool {
  private readonly threads: Thread[] = [];
  private nextId = 1;
  private next = 0;
  private closed = false;
  private busy = 0;

  /** `mlDsaAddonPath`: the native ML-DSA signer, already loaded once on this thread (ml-dsa-addon.ts); else noble. */
  constructor(
    size: number,
    private readonly mlDsaAddonPath?: string,
  ) {
    for (let i = 0; i < Math.max(1, size); i++) this.threads.push(this.spawn());
  }

  /** Signatures handed to a thread and not yet answered. */
  get inFlight(): number {
    return this.busy;
  }

  sign(job: SoftwareSignJob): Promise<Buffer> {
    if (this.closed) {
      new Uint8Array(job.secret).fill(0);
      return Promise.reject(new ApiError('key_store_unavailable', 'the key store is shutting down'));
    }
    // Least-loaded thread; ties go round-robin so every core fills up under load.
    let thread = this.threads[this.next % this.threads.length] as Thread;
    this.next++;
    for (const t of this.threads) if (t.pending.size < thread.pending.size) thread = t;
    const id = this.nextId++;
    return new Promise<Buffer>((resolve, reject) => {
      if (thread.pending.size === 0) thread.worker.ref(); // an idle thread must not keep the process alive
      thread.pending.set(id, { resolve, reject });
      this.busy++;
      const input = new Uint8Array(new ArrayBuffer(job.input.length));
      input.set(job.input);
      thread.worker.postMessage({ id, family: job.family, level: job.level, secret: job.secret, input }, [
        job.secret,
        input.buffer,
      ]);
    });
  }

  /** Stops the threads; a signature still in flight fails rather than hanging. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(this.threads.map((t) => t.worker.terminate()));
    for (const thread of this.threads) this.failAll(thread, new ApiError('key_store_unavailable', 'shutting down'));
  }

  private failAll(thread: Thread, err: Error): void {
    for (const p of thread.pending.values()) p.reject(err);
    this.busy -= thread.pending.size;
    thread.pending.clear();
  }

  private spawn(): Thread {
    const worker = new Worker(WORKER_PATH, { workerData: { mlDsaAddonPath: this.mlDsaAddonPath } });
    const thread: Thread = { worker, pending: new Map() };
    worker.on('message', (msg: { id: number; signature?: Uint8Array; error?: string }) => {
      const p = thread.pending.get(msg.id);
      if (!p) return;
      thread.pending.delete(msg.id);
      this.busy--;
      if (thread.pending.size === 0) worker.unref();
      if (msg.signature) p.resolve(Buffer.from(msg.signature.buffer, msg.signature.byteOffset, msg.signature.length));
      else p.reject(new Error(msg.error ?? 'the software signing thread failed'));
    });
    // A thread that dies fails its signatures with a retryable error (nothing was handed out, nothing is signed
    // twice) and is replaced at once, so the next request finds a full pool.
    let ended = false;
    const fail = (why: string) => {
      if (ended) return;
      ended = true;
      this.failAll(
        thread,
        new ApiError(
          'key_store_unavailable',
          `the software key store's signing thread ${why} before it answered; it was restarted, retry`,
        ),
      );
      if (this.closed) return;
      const index = this.threads.indexOf(thread);
      if (index >= 0) this.threads[index] = this.spawn();
    };
    worker.on('error', (err) => fail(`failed (${err.message})`));
    worker.on('exit', (code) => {
      if (!this.closed) fail(`exited with code ${code}`);
    });
    worker.unref();
    return thread;
  }
}
