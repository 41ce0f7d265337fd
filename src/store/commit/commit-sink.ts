// Where a SQLite store hands its group-commit writes when it does not commit them on its own event loop: its writer
// thread (writer-thread.ts), or the writer of another process on the same database (the primary of a service with
// request workers, src/workers/), so that the audit chain has one appender and group commits stay groups.
import type { Write } from './group-commit.js';

export interface CommitSink {
  /**
   * Whether the signing path hands a signature's record and entry over ahead of the signature (true unless false):
   * the writer thread's commit then runs while the key store signs. A sink that says false gets them after it, in
   * one write with the signature's hash, so that a signature the key store fails to make leaves no entry behind (the
   * audit log reads as a single process's does).
   */
  readonly writesAhead?: boolean;
  /** Commits `write` with others; settles once it is durable, with its audit entry's seq (undefined without one). */
  write(write: Write, resolve: (seq: number | undefined) => void, reject: (err: unknown) => void): void;
  /** Lets what was handed over be committed (or fail), then takes no more. */
  stop(): Promise<void>;
}
