// What each process of a service with request workers may hold (the `workerMemory` settings, docs/configuration.md
// "Request workers"; where each MB goes: docs/benchmarks.md "Memory under sustained load"):
//   - the primary's key store has no signing threads (primaryKeyStore): it signs only the log's checkpoints, one
//     every second or so and well under a millisecond each, and each signing thread is an isolate of its own;
//   - its young generation, given to V8 when the primary forks it (workerExecArgv): V8 sizes it for the machine's
//     memory (128 MB on a 23 GB test host), and a worker under load fills it and keeps it;
//   - its resident set over time (ResidentSetWatch): SoftHSM keeps a few bytes of every signature outside anything
//     the process can free, so a worker that stays above the limit asks the primary for a fresh one to take over.
import type { Worker } from 'node:cluster';
import type { KeyStoreSetting } from '../keys/key-store-settings.js';

/** The primary's key store settings: the configured ones with no signing threads (checkpoints sign inline). */
export function primaryKeyStore(keyStore: KeyStoreSetting): KeyStoreSetting {
  if (keyStore.type !== 'aws-kms') return { ...keyStore, signThreads: 0 };
  return keyStore.legacy ? { ...keyStore, legacy: { ...keyStore.legacy, signThreads: 0 } } : keyStore;
}

const SEMI_SPACE_FLAG = /^--max-semi-space-size(=|$)/;

/**
 * The Node flags a worker is forked with: the primary's own, and V8's semi-space size unless `semiSpaceMb` is 0 or
 * the operator chose one already (on the command line or in NODE_OPTIONS, which the worker inherits; a flag given
 * here would win over NODE_OPTIONS).
 */
export function workerExecArgv(
  execArgv: readonly string[],
  nodeOptions: string | undefined,
  semiSpaceMb: number,
): string[] {
  const chosen = [...execArgv, ...(nodeOptions ?? '').split(/\s+/)].some((arg) => SEMI_SPACE_FLAG.test(arg));
  return semiSpaceMb > 0 && !chosen ? [...execArgv, `--max-semi-space-size=${semiSpaceMb}`] : [...execArgv];
}

/** How often a worker reads its resident set. */
export const RESIDENT_SET_CHECK_MS = 10_000;
/** Readings in a row above the limit before the worker asks to be replaced (a burst's garbage is not a leak). */
export const READINGS_ABOVE = 3;

/**
 * Reads the resident set every RESIDENT_SET_CHECK_MS and calls `onAbove` once, when READINGS_ABOVE readings in a
 * row were above `limitMb`. `check()` is the timer's step, for tests.
 */
export class ResidentSetWatch {
  private above = 0;
  private fired = false;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly limitMb: number,
    private readonly onAbove: (rssMb: number) => void,
    private readonly readRss: () => number = () => process.memoryUsage.rss(),
  ) {}

  start(): this {
    this.timer = setInterval(() => this.check(), RESIDENT_SET_CHECK_MS);
    this.timer.unref();
    return this;
  }

  stop(): void {
    clearInterval(this.timer);
  }

  check(): void {
    if (this.fired) return;
    const rssMb = this.readRss() / 2 ** 20;
    this.above = rssMb > this.limitMb ? this.above + 1 : 0;
    if (this.above < READINGS_ABOVE) return;
    this.fired = true;
    this.stop();
    this.onAbove(rssMb);
  }
}

/**
 * The primary's side of a worker that asked to be replaced: a fresh worker is forked, and once it listens the old
 * one is asked to finish what it has in flight and end (`retire`), so the address never lacks a worker. If the
 * fresh one ends before it listens, the old one stays (the primary's restart of the fresh one tries again).
 */
export function replaceWorker(
  old: Worker,
  fork: () => Worker,
  listens: (worker: Worker, then: () => void) => void,
  retire: (worker: Worker) => void,
): Worker {
  const fresh = fork();
  listens(fresh, () => {
    if (!old.isDead()) retire(old);
  });
  return fresh;
}
