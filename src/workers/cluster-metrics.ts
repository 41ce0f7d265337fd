// /metrics of a service with request workers: the primary's listener adds up its own registry (the store's gauges,
// deliveries, pruning, the log) and every worker's (requests, signatures, key store faults), asked for over IPC at
// each scrape. Counters and histograms are summed; a worker that does not answer in time is left out of that scrape.
import type { Worker } from 'node:cluster';
import { AggregatorRegistry, type Registry } from 'prom-client';
import type { PrimaryChannel } from './ipc-commit-sink.js';
import { ours, type WorkerMetrics } from './messages.js';

/** How long a scrape waits for a worker's metrics. */
const WORKER_ANSWER_MS = 2_000;

/** A registry-like source for startMetricsServer: the primary's metrics with the workers'. */
export function clusterRegistry(primary: Registry, workers: () => Worker[]): Pick<Registry, 'metrics' | 'contentType'> {
  let nextId = 0;
  const ask = (worker: Worker): Promise<WorkerMetrics | undefined> =>
    new Promise((resolve) => {
      const id = ++nextId;
      const done = (metrics: WorkerMetrics | undefined) => {
        clearTimeout(timer);
        worker.off('message', onMessage);
        worker.off('exit', onExit);
        resolve(metrics);
      };
      const onMessage = (message: unknown) => {
        const answer = ours(message, 'metrics');
        if (answer?.id === id) done(answer.metrics);
      };
      const onExit = () => done(undefined);
      const timer = setTimeout(() => done(undefined), WORKER_ANSWER_MS);
      worker.on('message', onMessage);
      worker.on('exit', onExit);
      if (!worker.isConnected()) return done(undefined);
      worker.send({ signbridge: 'metrics?', id }, (err) => {
        if (err) done(undefined);
      });
    });
  return {
    contentType: primary.contentType,
    async metrics() {
      const own = await primary.getMetricsAsJSON();
      const theirs = await Promise.all(workers().map(ask));
      const all = [own, ...theirs.filter((m): m is WorkerMetrics => m !== undefined)];
      return AggregatorRegistry.aggregate(all).metrics();
    },
  };
}

/** A worker's side: answers the primary's requests with `registry`'s metrics. */
export function answerMetrics(registry: Registry, primary: Pick<PrimaryChannel, 'on' | 'send'>): void {
  primary.on('message', (message) => {
    const request = ours(message, 'metrics?');
    if (!request) return;
    const send = (metrics: WorkerMetrics) =>
      primary.send({ signbridge: 'metrics', id: request.id, metrics }, () => undefined);
    registry.getMetricsAsJSON().then(send, () => send([]));
  });
}
