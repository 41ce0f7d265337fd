import cluster from 'node:cluster';
import type { Command } from 'commander';
import { resolveConfig } from '../config/config.js';
import { startServer } from '../server.js';
import { runPrimary } from '../workers/primary.js';
import { runWorker } from '../workers/worker.js';

export function registerServerCommand(program: Command): void {
  program
    .command('server')
    .description('run the signing service (embedded default: SQLite + SoftHSM under the data dir)')
    .option('--data-dir <dir>', 'state folder (env SIGNBRIDGE_DATA_DIR)')
    .option('--listen <host:port>', 'address to serve on (env SIGNBRIDGE_LISTEN, default 127.0.0.1:8080)')
    .option('--config <file>', 'YAML or JSON configuration file (docs/configuration.md)')
    .option(
      '--database <url>',
      'PostgreSQL URL postgres://... (env SIGNBRIDGE_DATABASE_URL; default: SQLite in the data dir)',
    )
    .option(
      '--workers <n>',
      'processes taking requests behind the one address (env SIGNBRIDGE_WORKERS; default: cores - 1, at most 8; 1: one process)',
    )
    .action(
      async (opts: { dataDir?: string; listen?: string; config?: string; database?: string; workers?: string }) => {
        const config = resolveConfig({
          dataDir: opts.dataDir,
          listen: opts.listen,
          configFile: opts.config,
          database: opts.database,
          workers: opts.workers,
        });
        // A request worker started by the primary below runs this same command (Node's cluster forks it).
        if (cluster.isWorker) {
          await runWorker(config);
          return;
        }
        const server = config.workers > 1 ? await runPrimary(config) : await startServer(config);
        // One plain line whatever the log level, for people and scripts waiting for the service.
        if (server.metricsUrl) process.stderr.write(`signbridge metrics on ${server.metricsUrl}\n`);
        const workers = config.workers > 1 ? ` (${config.workers} request workers)` : '';
        process.stderr.write(`signbridge server listening on ${server.url}${workers}\n`);
        let stopping = false;
        const stop = (signal: string) => {
          if (stopping) return;
          stopping = true;
          server.app.log.info({ signal }, 'shutting down: finishing requests in flight');
          const force = setTimeout(() => process.exit(1), 10_000);
          force.unref();
          server.close().then(
            () => process.exit(0),
            (err) => {
              server.app.log.error({ err }, 'shutdown failed');
              process.exit(1);
            },
          );
        };
        process.on('SIGINT', () => stop('SIGINT'));
        process.on('SIGTERM', () => stop('SIGTERM'));
      },
    );
}
