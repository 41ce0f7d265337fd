// A request worker's side of the SQLite writer (src/store/commit/commit-sink.ts): its signature records and audit entries
// go to the primary, which commits them with every other worker's (write-relay.ts). What the worker hands over in
// one event-loop turn travels as one message; each caller's promise settles with the primary's answer, once the
// write is durable.
import type { CommitSink } from '../store/commit/commit-sink.js';
import type { Write } from '../store/commit/group-commit.js';
import { ours, type ToPrimary } from './messages.js';

/** The worker's end of the cluster's IPC channel (the worker's `process`). */
export interface PrimaryChannel {
  send(message: ToPrimary, callback?: (err: Error | null) => void): boolean;
  readonly connected: boolean;
  on(event: 'message', listener: (message: unknown) => void): unknown;
  on(event: 'disconnect', listener: () => void): unknown;
}

type Settle = { resolve: (seq: number | undefined) => void; reject: (err: unknown) => void };

export class IpcCommitSink implements CommitSink {
  /** After the signature: a key store that fails leaves no entry (the write would not overlap much anyway). */
  readonly writesAhead = false;
  private readonly waiting = new Map<number, Settle>();
  private queued: Array<[number, Write]> = [];
  private nextId = 0;
  private stopped = false;
  /** Resolves stop() once every write handed over was answered. */
  private onIdle: (() => void) | undefined;

  constructor(private readonly primary: PrimaryChannel) {
    primary.on('message', (message) => {
      const written = ours(message, 'written');
      if (!written) return;
      for (const [id, seq] of written.done) this.take(id)?.resolve(seq ?? undefined);
      for (const [id, text, code] of written.failed) {
        // The code is what says "503, try again" (SQLITE_FULL, SQLITE_BUSY: src/store/store-errors.ts).
        this.take(id)?.reject(Object.assign(new Error(text), { code }));
      }
    });
    primary.on('disconnect', () => this.failAll(new Error('the service primary went away before it committed')));
  }

  write(write: Write, resolve: (seq: number | undefined) => void, reject: (err: unknown) => void): void {
    if (this.stopped || !this.primary.connected) {
      reject(new Error('the store is closed'));
      return;
    }
    const id = ++this.nextId;
    this.waiting.set(id, { resolve, reject });
    if (this.queued.length === 0) setImmediate(() => this.flush());
    this.queued.push([id, write]);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.waiting.size === 0) return;
    await new Promise<void>((resolve) => {
      this.onIdle = resolve;
    });
  }

  private flush(): void {
    const writes = this.queued;
    this.queued = [];
    if (writes.length === 0) return;
    const failed = (err: Error) => {
      for (const [id] of writes) this.take(id)?.reject(err);
    };
    try {
      this.primary.send({ signbridge: 'writes', writes }, (err) => {
        if (err) failed(err);
      });
    } catch (err) {
      failed(err as Error); // the channel closed meanwhile
    }
  }

  private take(id: number): Settle | undefined {
    const settle = this.waiting.get(id);
    this.waiting.delete(id);
    if (this.waiting.size === 0) this.onIdle?.();
    return settle;
  }

  private failAll(err: Error): void {
    this.queued = [];
    for (const id of [...this.waiting.keys()]) this.take(id)?.reject(err);
  }
}
