// What a service's primary and its request workers say to each other over the cluster's IPC channel (structured
// clone: the cluster is set up with serialization 'advanced', as a thread's messages are). Every message carries
// `signbridge`, so that none is taken for one of Node's own cluster messages or prom-client's.
import type { Registry } from 'prom-client';
import type { BackgroundPass } from '../app.js';
import type { Write } from '../store/commit/group-commit.js';

/** A worker's writes of one event-loop turn, each under the id its answer will name. */
export interface WritesMessage {
  signbridge: 'writes';
  writes: Array<[id: number, write: Write]>;
}

/** The primary's answers to writes: the audit entry's seq (null without one), or why the commit failed. */
export interface WrittenMessage {
  signbridge: 'written';
  done: Array<[id: number, seq: number | null]>;
  failed: Array<[id: number, message: string, code: string | undefined]>;
}

/**
 * A worker wrote work for a background pass: events (the primary's dispatcher should look now rather than at its
 * next poll) or audit entries (the primary's log integrator should take them, for proofs within a second).
 */
export interface NudgeMessage {
  signbridge: 'nudge';
  pass: BackgroundPass;
}

/** The worker listens: its URL, for the primary's one "listening" line. */
export interface ListeningMessage {
  signbridge: 'listening';
  url: string;
}

/** The worker's resident set stayed above `workerMemory.restartAboveMb`: the primary replaces it (memory-bounds.ts). */
export interface RetireMessage {
  signbridge: 'retire';
  rssMb: number;
}

/** The primary asks a worker for its metrics (for one scrape). */
export interface MetricsRequest {
  signbridge: 'metrics?';
  id: number;
}

/** prom-client's JSON of one registry. */
export type WorkerMetrics = Awaited<ReturnType<Registry['getMetricsAsJSON']>>;

/** A worker's metrics for scrape `id` (prom-client's getMetricsAsJSON). */
export interface MetricsAnswer {
  signbridge: 'metrics';
  id: number;
  metrics: WorkerMetrics;
}

/** The primary asks a worker to finish what it has in flight and end (graceful shutdown). */
export interface StopMessage {
  signbridge: 'stop';
}

export type ToPrimary = WritesMessage | NudgeMessage | ListeningMessage | MetricsAnswer | RetireMessage;
export type ToWorker = WrittenMessage | MetricsRequest | StopMessage;

/** `message` if it is one of ours of kind `kind`. */
export function ours<K extends (ToPrimary | ToWorker)['signbridge']>(
  message: unknown,
  kind: K,
): Extract<ToPrimary | ToWorker, { signbridge: K }> | undefined {
  return typeof message === 'object' && message !== null && (message as { signbridge?: unknown }).signbridge === kind
    ? (message as Extract<ToPrimary | ToWorker, { signbridge: K }>)
    : undefined;
}
