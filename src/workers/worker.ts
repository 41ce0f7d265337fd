// A request worker of a service with `workers` > 1 (primary.ts starts them): it takes requests on the listening
// address it shares with the other workers, reads through its own store connections, and on SQLite hands its
// signature records and audit entries to the primary's writer. The instance's background passes, the metrics
// listener and the `service_start` entry are the primary's. It ends when the primary asks (or on SIGTERM/SIGINT)
// once its requests in flight are answered, and at once if the primary goes away (Node's cluster does that).
import type { BackgroundPass } from '../app.js';
import type { ServiceConfig } from '../config/config.js';
import { buildService, busyPollAround, closeServing } from '../server.js';
import { startStep } from '../start-timing.js';
import { answerMetrics } from './cluster-metrics.js';
import { IpcCommitSink, type PrimaryChannel } from './ipc-commit-sink.js';
import { ResidentSetWatch } from './memory-bounds.js';
import { ours } from './messages.js';

/** How long a stopping worker waits for its requests in flight before it ends anyway. */
export const WORKER_STOP_MS = 8_000;

export async function runWorker(config: ServiceConfig): Promise<void> {
  const primary = process as unknown as PrimaryChannel;
  const sink = config.store.type === 'sqlite' ? new IpcCommitSink(primary) : undefined;
  const parts = await buildService(config, {
    serves: true,
    background: false,
    ...(sink && { commitSink: sink }),
    wakeBackground: wakePrimary(primary),
  });
  const { app, metrics } = parts;
  busyPollAround(parts, config);
  if (metrics) answerMetrics(metrics.registry, primary);

  let stopping = false;
  const stop = (why: string) => {
    if (stopping) return;
    stopping = true;
    app.log.info({ why, pid: process.pid }, 'request worker: finishing requests in flight');
    setTimeout(() => process.exit(1), WORKER_STOP_MS).unref();
    closeServing(app).then(
      () => process.exit(0),
      (err) => {
        app.log.error({ err }, 'request worker: shutdown failed');
        process.exit(1);
      },
    );
  };
  primary.on('message', (message) => {
    if (ours(message, 'stop')) stop('asked by the primary');
  });
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));

  await app.ready();
  startStep('worker: app ready');
  const url = await app.listen({ host: config.host, port: config.port });
  startStep('worker: listens');
  app.log.info({ pid: process.pid, url }, 'request worker ready');
  primary.send({ signbridge: 'listening', url }, () => undefined);
  const { restartAboveMb } = config.workerMemory;
  if (restartAboveMb > 0) {
    new ResidentSetWatch(restartAboveMb, (rssMb) => {
      if (primary.connected) primary.send({ signbridge: 'retire', rssMb: Math.round(rssMb) }, () => undefined);
    }).start();
  }
}

/**
 * Events and audit entries written here are delivered and integrated by the primary's passes: tell it, at most one
 * message per pass and event-loop turn however many requests wrote.
 */
function wakePrimary(primary: PrimaryChannel): (pass: BackgroundPass) => void {
  const pending = new Set<BackgroundPass>();
  return (pass) => {
    if (pending.has(pass) || !primary.connected) return;
    pending.add(pass);
    setImmediate(() => {
      pending.delete(pass);
      if (primary.connected) primary.send({ signbridge: 'nudge', pass }, () => undefined);
    });
  };
}
