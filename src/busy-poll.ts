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
/**
 * How often, while polling, the loop checks that it got the CPU it spun for (ms of wall time). A thread's CPU time
 * (getrusage) moves only at the scheduler's ticks and switches, 1-4 ms apart here (10 ms with HZ=100): over 25 ms a
 * thread that ran throughout shows at least 60% even then, so only real preemption falls below CONTENDED_SHARE.
 */
export const CONTENTION_SAMPLE_MS = 25;
/** A sample in which this thread ran less than this share of the wall time: the cores are oversubscribed. */
export const CONTENDED_SHARE = 0.5;
/** How long polling stays off after a contended sample: one sample a second at most spins on busy cores. */
export const CONTENTION_BACK_OFF_MS = 1_000;

/** This thread's CPU time in ms, where Node can tell (process.threadCpuUsage: Node 23.9 and later). */
function threadCpuMsOf(): (() => number) | undefined {
  const usage = (process as { threadCpuUsage?: () => NodeJS.CpuUsage }).threadCpuUsage;
  if (typeof usage !== 'function') return undefined;
  return () => {
    const { user, system } = usage.call(process);
    return (user + system) / 1000;
  };
}

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
  /**
   * This thread's CPU time in ms (default: process.threadCpuUsage where Node has it; else no contention check).
   * A loop that spins while other processes want the cores is preempted and runs only part of the wall time: the
   * daemon spinning for the service's answer on a busy 2-core machine held a core the service needed, and the
   * full path fell from ~450 to ~60 signatures/s (p50 14 ms). Such a sample turns polling off for a while.
   */
  threadCpuMs?: (() => number) | undefined;
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
  private readonly threadCpuMs: (() => number) | undefined;
  /** The contention sample under way: when it started, and this thread's CPU time then. */
  private sampleAt = 0;
  private sampleCpuMs = 0;
  /** No polling before this (a contended sample was seen). */
  private backOffUntil = 0;
  private readonly poll = (): void => {
    const now = this.now();
    const wanted = now < this.until || (this.open > 0 && now < this.openUntil);
    // Each piece of work under way beyond the first waits on another process (the service signing it), which
    // needs a core of its own as a busy signing thread does; the first is the sequential client's wait.
    const othersWaitedOn = Math.max(0, this.open - 1);
    if (wanted && this.busyThreads() + othersWaitedOn + 1 < this.cores && !this.contended(now)) {
      setImmediate(this.poll);
    } else this.polling = false;
  };

  constructor(
    private readonly windowMs: number,
    options: BusyPollOptions = {},
  ) {
    this.busyThreads = options.busyThreads ?? (() => 0);
    this.cores = options.cores ?? availableParallelism();
    this.now = options.now ?? (() => performance.now());
    // A test's hand-moved clock and this thread's real CPU time would disagree: the check then takes both or none.
    this.threadCpuMs = 'threadCpuMs' in options ? options.threadCpuMs : options.now ? undefined : threadCpuMsOf();
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
    if (!this.polling && this.now() >= this.backOffUntil) {
      this.polling = true;
      this.startSample(this.now());
      setImmediate(this.poll);
    }
  }

  private startSample(now: number): void {
    this.sampleAt = now;
    this.sampleCpuMs = this.threadCpuMs?.() ?? 0;
  }

  /**
   * True when the last CONTENTION_SAMPLE_MS of polling ran on the CPU for less than CONTENDED_SHARE of the wall
   * time (this thread only polls or works while it polls, never sleeps): polling then stops for
   * CONTENTION_BACK_OFF_MS, so that it spins at most ~2.5% of the time while the cores stay oversubscribed.
   */
  private contended(now: number): boolean {
    if (now < this.backOffUntil) return true;
    if (!this.threadCpuMs || now - this.sampleAt < CONTENTION_SAMPLE_MS) return false;
    const ran = (this.threadCpuMs() - this.sampleCpuMs) / (now - this.sampleAt);
    this.startSample(now);
    if (ran >= CONTENDED_SHARE) return false;
    this.backOffUntil = now + CONTENTION_BACK_OFF_MS;
    return true;
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
