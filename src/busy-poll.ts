// Adaptive busy polling for the event loop. On virtual machines whose idle vCPUs halt (Firecracker and most
// clouds turn guest halt-polling off), waking a process that went idle costs 0.1-0.3 ms, and the first
// microseconds after the wake run on cold caches: a request that arrives at an idle process takes about twice as
// long as one that arrives at a busy one. So for a short window after each piece of work the event loop keeps
// polling (epoll with a zero timeout, through setImmediate) instead of sleeping; the next request of a sequential
// client, or the answer to a request we forwarded, is then picked up at once. Under load the loop never idles
// and this does nothing; an idle process stops polling after one window. The same reasoning makes the Go
// runtime spin before parking a thread and Linux offer SO_BUSY_POLL.
import { availableParallelism } from 'node:os';
import { performance } from 'node:perf_hooks';

/** Default polling window after activity, in ms. 0 turns busy polling off. */
export const DEFAULT_BUSY_POLL_MS = 0.5;
/** The longest a single touch keeps the loop polling: a longer wait (an approval, a slow HSM) sleeps. */
export const MAX_BUSY_POLL_MS = 10;

export interface BusyPollOptions {
  /**
   * Threads of this process doing work the loop waits for (signing threads). Polling stops while they would
   * need the core it takes: a spinning loop on a 2-core machine took CPU from two busy signing threads and cost
   * 10-20% of the throughput under load. Their answer wakes the loop anyway.
   */
  busyThreads?: () => number;
  /** Cores to share (default: availableParallelism()). */
  cores?: number;
  /** The clock in ms (default: performance.now); tests pass one they move by hand. */
  now?: () => number;
}

export class BusyPoll {
  private until = 0;
  private polling = false;
  /** Work under way (begin() without its end()), and how long polling may last for it. */
  private open = 0;
  private openUntil = 0;
  private readonly busyThreads: () => number;
  private readonly cores: number;
  private readonly now: () => number;
  private readonly poll = (): void => {
    const now = this.now();
    const wanted = now < this.until || (this.open > 0 && now < this.openUntil);
    if (wanted && this.busyThreads() + 1 < this.cores) setImmediate(this.poll);
    else this.polling = false;
  };

  constructor(
    private readonly windowMs: number,
    options: BusyPollOptions = {},
  ) {
    this.busyThreads = options.busyThreads ?? (() => 0);
    this.cores = options.cores ?? availableParallelism();
    this.now = options.now ?? (() => performance.now());
  }

  /** True while the loop is kept polling. */
  get active(): boolean {
    return this.polling;
  }

  /** Something happened: keep the loop polling for the window from now. */
  touch(): void {
    if (this.windowMs <= 0) return;
    this.until = Math.max(this.until, this.now() + this.windowMs);
    this.start();
  }

  /**
   * Work whose answer comes from elsewhere is under way (a signature forwarded to the service): poll until its
   * end(), for at most MAX_BUSY_POLL_MS, so the answer does not find the process asleep. A longer wait (an
   * approval, a slow HSM) sleeps after that. Every begin() needs one end().
   */
  begin(): void {
    if (this.windowMs <= 0) return;
    this.open++;
    this.openUntil = this.now() + MAX_BUSY_POLL_MS;
    this.start();
  }

  /** The work of a begin() is done: poll for the window after it. */
  end(): void {
    if (this.windowMs <= 0) return;
    this.open = Math.max(0, this.open - 1);
    this.touch();
  }

  private start(): void {
    if (!this.polling) {
      this.polling = true;
      setImmediate(this.poll);
    }
  }
}

/**
 * The window in force: SIGNBRIDGE_BUSY_POLL_MS (a number of ms from 0 to 10; 0 turns busy polling off), else the
 * config file's busyPollMs, else the default (`fallback`). A bad environment value is reported through
 * `configError`.
 */
export function busyPollSetting(
  fromEnv: string | undefined,
  fromFile: number | undefined,
  configError: (message: string) => Error,
  fallback = DEFAULT_BUSY_POLL_MS,
): number {
  if (fromEnv === undefined || fromEnv === '') return fromFile ?? fallback;
  const ms = Number(fromEnv);
  if (!/^\s*[0-9.]+\s*$/.test(fromEnv) || !Number.isFinite(ms) || ms > 10) {
    throw configError(`SIGNBRIDGE_BUSY_POLL_MS must be a number of milliseconds from 0 to 10, got "${fromEnv}"`);
  }
  return ms;
}
