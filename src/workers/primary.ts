// The primary of a service with `workers` > 1 (docs/architecture.md, "Request workers"). Node's cluster lets every
// worker listen on the one address (the primary hands out the connections), so the event loop of one process no
// longer bounds the service. The primary takes no requests itself; it runs what must run once per instance:
//   - on SQLite, the writer: the workers' signature records and audit entries come over IPC and go into this
//     process's group commit (write-relay.ts), so the audit chain has one appender and groups stay groups, and its
//     checkpointer keeps the WAL short; on PostgreSQL each worker is an ordinary client of the database;
//   - the event dispatcher and its sweeps, the log integrator, the pruner (its app, which does not listen);
//   - the metrics listener, adding up the workers' metrics (cluster-metrics.ts), and the `service_start` entry.
// A worker that ends (a crash, kill -9) is started again; what it answered was durable before it answered. The
// workers end with the primary: Node's cluster ends a worker whose IPC channel closes. A worker whose resident set
// stays above `workerMemory.restartAboveMb` is replaced by a fresh one, and the primary's key store has no signing
// threads (memory-bounds.ts).
import cluster, { type Worker } from 'node:cluster';
import type { FastifyInstance } from 'fastify';
import type { ServiceConfig } from '../config/config.js';
import { startMetricsServer } from '../metrics/metrics-server.js';
import { buildService, recordStart } from '../server.js';
import { startStep } from '../start-timing.js';
import { clusterRegistry } from './cluster-metrics.js';
import { primaryKeyStore, replaceWorker, workerExecArgv } from './memory-bounds.js';
import { ours } from './messages.js';
import { WORKER_STOP_MS } from './worker.js';
import { relayWrites } from './write-relay.js';

export interface RunningCluster {
  /** The primary's app: it does not listen; its hooks run the background passes. */
  app: FastifyInstance;
  url: string;
  metricsUrl?: string;
  /** The workers' process ids (tests end one with kill -9). */
  workerPids(): number[];
  /** Graceful shutdown: the workers answer what they have in flight and end, then the primary's store closes. */
  close(): Promise<void>;
}

/** A worker that ends within this long of its start is started again only after the rest of it. */
const RESTART_AFTER_MS = 1_000;

export async function runPrimary(config: ServiceConfig): Promise<RunningCluster> {
  const parts = await buildService(
    { ...config, keyStore: primaryKeyStore(config.keyStore) },
    { serves: false, background: true },
  );
  const { app, store } = parts;
  let stopping = false;
  const workers = new Set<Worker>();
  /** Workers being replaced (memory-bounds.ts): their end is not a crash to restart. */
  const retiring = new WeakSet<Worker>();
  try {
    // The log key is made, and the passes start, before any worker takes a request.
    await app.ready();
    startStep('primary: app ready');
    await recordStart(parts, config);
    startStep('primary: service_start recorded; forking workers');
  } catch (err) {
    await app.close().catch(() => undefined);
    throw err;
  }
  // The store that is its database's single writer (SQLite) commits the workers' writes; on PostgreSQL there is none.
  const commit = store.commitRelayedWrite?.bind(store);
  cluster.setupPrimary({
    serialization: 'advanced',
    execArgv: workerExecArgv(process.execArgv, process.env.NODE_OPTIONS, config.workerMemory.semiSpaceMb),
  });

  const fork = (): Worker => {
    const worker = cluster.fork();
    const startedAt = Date.now();
    workers.add(worker);
    if (commit) relayWrites(worker, commit);
    worker.on('message', (message: unknown) => {
      const nudge = ours(message, 'nudge');
      if (nudge?.pass === 'events') app.eventDispatcher?.nudge();
      else if (nudge?.pass === 'log') app.transparencyLog?.nudge();
      const retire = ours(message, 'retire');
      if (retire && !stopping && !retiring.has(worker)) {
        retiring.add(worker);
        app.log.warn(
          { pid: worker.process.pid, rssMb: retire.rssMb, restartAboveMb: config.workerMemory.restartAboveMb },
          'request worker above its memory limit; replacing it',
        );
        replaceWorker(worker, fork, whenListening, (old) => void stopWorker(old));
      }
    });
    worker.on('exit', (code, signal) => {
      workers.delete(worker);
      if (stopping || retiring.has(worker)) return;
      app.log.error({ pid: worker.process.pid, code, signal }, 'request worker ended; starting another');
      const wait = Math.max(0, RESTART_AFTER_MS - (Date.now() - startedAt));
      setTimeout(() => {
        if (!stopping) fork();
      }, wait).unref();
    });
    return worker;
  };

  const stopWorkers = async () => {
    stopping = true;
    await Promise.all([...workers].map((worker) => stopWorker(worker)));
  };

  let url: string;
  try {
    url = await startWorkers(config.workers, fork);
  } catch (err) {
    await stopWorkers();
    await app.close().catch(() => undefined);
    throw err;
  }
  const metricsServer =
    parts.metrics && config.metrics
      ? await startMetricsServer(
          clusterRegistry(parts.metrics.registry, () => [...workers]),
          config.metrics,
          (err) => app.log.error({ err }, 'metrics collection failed'),
        )
      : undefined;
  app.log.info(
    {
      store: store.description,
      keyStore: parts.keyStore.description,
      url,
      workers: config.workers,
      metrics: metricsServer?.url,
    },
    'signbridge service ready',
  );
  return {
    app,
    url,
    ...(metricsServer && { metricsUrl: metricsServer.url }),
    workerPids: () => [...workers].map((w) => w.process.pid).filter((pid): pid is number => pid !== undefined),
    async close() {
      await stopWorkers();
      await metricsServer?.close();
      await app.close();
    },
  };
}

/** Calls `then` once `worker` says it listens. */
function whenListening(worker: Worker, then: () => void): void {
  const onMessage = (message: unknown) => {
    if (!ours(message, 'listening')) return;
    worker.off('message', onMessage);
    then();
  };
  worker.on('message', onMessage);
}

/** Forks `count` workers; resolves with the URL they listen on once all do, fails if one ends first. */
function startWorkers(count: number, fork: () => Worker): Promise<string> {
  return new Promise((resolve, reject) => {
    let listening = 0;
    let url = '';
    for (let i = 0; i < count; i++) {
      const worker = fork();
      const onExit = (code: number | null, signal: string | null) =>
        reject(new Error(`a request worker ended while starting (${signal ?? `exit code ${code}`}); see its output`));
      worker.once('exit', onExit);
      worker.on('message', (message: unknown) => {
        const ready = ours(message, 'listening');
        if (!ready) return;
        worker.off('exit', onExit);
        url = ready.url;
        if (++listening === count) resolve(url);
      });
    }
  });
}

/** Asks a worker to finish and end; ends it after WORKER_STOP_MS and a little if it has not. */
function stopWorker(worker: Worker): Promise<void> {
  return new Promise((resolve) => {
    if (worker.isDead()) return resolve();
    const timer = setTimeout(() => worker.process.kill('SIGKILL'), WORKER_STOP_MS + 500);
    worker.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    if (worker.isConnected()) worker.send({ signbridge: 'stop' }, () => undefined);
    else worker.process.kill('SIGTERM');
  });
}
