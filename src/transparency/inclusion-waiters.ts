// Requests waiting for their entry to be in a signed checkpoint (`Prefer: wait-for-log`, docs/transparency.md).
// One watcher serves them all, however many wait: it is told of this process's own checkpoints at once, and reads
// the latest checkpoint every POLL_MS while anyone waits (another instance, or another worker's integrator, may
// publish it), so a thousand waiting requests cost one read per poll, not a thousand.

/** How often the store is asked for the latest checkpoint while requests wait. */
export const POLL_MS = 200;

interface Waiter {
  index: number;
  settle: (treeSize: number | undefined) => void;
  timer: NodeJS.Timeout;
}

export class InclusionWaiters {
  private readonly waiting = new Set<Waiter>();
  private poller: NodeJS.Timeout | undefined;
  private polling = false;

  /** `latestSize`: the tree size of the latest published checkpoint (0 without one). */
  constructor(private readonly latestSize: () => Promise<number>) {}

  /**
   * The size of a published checkpoint that includes `index` (index < size), or undefined when none is published
   * within `timeoutMs`.
   */
  async until(index: number, timeoutMs: number): Promise<number | undefined> {
    const size = await this.latestSize();
    if (index < size) return size;
    return new Promise((resolve) => {
      const waiter: Waiter = {
        index,
        settle: (treeSize) => {
          clearTimeout(waiter.timer);
          this.waiting.delete(waiter);
          resolve(treeSize);
        },
        timer: setTimeout(() => waiter.settle(undefined), timeoutMs),
      };
      this.waiting.add(waiter);
      this.schedulePoll();
    });
  }

  /** A checkpoint of `treeSize` was published (by this process, or seen by the poll). */
  published(treeSize: number): void {
    for (const w of this.waiting) if (w.index < treeSize) w.settle(treeSize);
  }

  /** Ends every wait at once (shutdown): the requests answer without a proof. */
  stop(): void {
    clearTimeout(this.poller);
    for (const w of this.waiting) w.settle(undefined);
  }

  private schedulePoll(): void {
    if (this.poller || this.polling || this.waiting.size === 0) return;
    this.poller = setTimeout(() => {
      this.poller = undefined;
      this.polling = true;
      this.latestSize()
        .then((size) => this.published(size))
        // A failed read is the next poll's to retry; the waits end by their own timers.
        .catch(() => undefined)
        .finally(() => {
          this.polling = false;
          this.schedulePoll();
        });
    }, POLL_MS);
  }
}
