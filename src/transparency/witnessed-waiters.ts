// Requests waiting for a witnessed checkpoint of their entry (`Prefer: wait-for-log=witnessed`,
// docs/transparency.md): one that holds the entry and carries a cosignature of every witness waited for. As with
// InclusionWaiters, one watcher serves them all: it looks at once when this process stored a cosignature, and reads
// the newest checkpoints every POLL_MS while anyone waits (another instance may publish and have them cosigned).
// Witnesses cosign only the newest checkpoint they are sent, so under load the newest is often not cosigned yet
// while the one before it is: every recent checkpoint that holds the entry is a candidate, not only the latest.
import type { StoredCheckpoint } from '../store/log/log-store.js';
import { POLL_MS } from './inclusion-waiters.js';

interface Waiter {
  index: number;
  settle: (checkpoint: StoredCheckpoint | undefined) => void;
  timer: NodeJS.Timeout;
}

/** Whether a checkpoint note carries a signature line of every named witness (each verified before it was stored). */
export function cosignedByAll(note: string, witnesses: readonly string[]): boolean {
  return witnesses.every((name) => note.includes(`\n\u2014 ${name} `));
}

export class WitnessedWaiters {
  private readonly waiting = new Set<Waiter>();
  private poller: NodeJS.Timeout | undefined;
  private polling = false;
  private lookAgain = false;

  /**
   * `recent(minSize)`: the newest published checkpoints of at least minSize entries, newest first.
   * `awaited()`: the names of the witnesses to wait for now (the configured ones that do not refuse this log).
   */
  constructor(
    private readonly recent: (minSize: number) => Promise<StoredCheckpoint[]>,
    private readonly awaited: () => readonly string[],
  ) {}

  /**
   * The newest checkpoint that holds entry `index` and is cosigned by every awaited witness, or undefined when none
   * is within `timeoutMs`, or when there is no witness to wait for.
   */
  async until(index: number, timeoutMs: number): Promise<StoredCheckpoint | undefined> {
    if (this.awaited().length === 0 || timeoutMs <= 0) return undefined;
    const found = this.pick(await this.recent(index + 1), index);
    if (found) return found;
    return new Promise((resolve) => {
      const waiter: Waiter = {
        index,
        settle: (checkpoint) => {
          clearTimeout(waiter.timer);
          this.waiting.delete(waiter);
          resolve(checkpoint);
        },
        timer: setTimeout(() => waiter.settle(undefined), timeoutMs),
      };
      this.waiting.add(waiter);
      this.schedulePoll(POLL_MS);
    });
  }

  /** This process stored a cosignature: the waits look now rather than at the next poll. */
  cosigned(): void {
    if (this.waiting.size === 0) return;
    if (this.polling) {
      this.lookAgain = true;
      return;
    }
    clearTimeout(this.poller);
    this.poller = undefined;
    this.schedulePoll(0);
  }

  /** Ends every wait at once (shutdown): the requests answer with the checkpoint they have. */
  stop(): void {
    clearTimeout(this.poller);
    for (const w of this.waiting) w.settle(undefined);
  }

  private pick(checkpoints: readonly StoredCheckpoint[], index: number): StoredCheckpoint | undefined {
    const names = this.awaited();
    if (names.length === 0) return undefined;
    return checkpoints.find((c) => index < c.treeSize && cosignedByAll(c.note, names));
  }

  private schedulePoll(ms: number): void {
    if (this.poller || this.polling || this.waiting.size === 0) return;
    this.poller = setTimeout(() => {
      this.poller = undefined;
      this.polling = true;
      this.lookAgain = false;
      const minIndex = Math.min(...[...this.waiting].map((w) => w.index));
      this.recent(minIndex + 1)
        .then((checkpoints) => {
          // Every witness refuses now (or none is configured any more): nothing will come.
          if (this.awaited().length === 0) for (const w of this.waiting) w.settle(undefined);
          for (const w of this.waiting) {
            const found = this.pick(checkpoints, w.index);
            if (found) w.settle(found);
          }
        })
        // A failed read is the next poll's to retry; the waits end by their own timers.
        .catch(() => undefined)
        .finally(() => {
          this.polling = false;
          this.schedulePoll(this.lookAgain ? 0 : POLL_MS);
        });
    }, ms);
  }
}
