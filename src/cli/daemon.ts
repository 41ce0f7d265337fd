// `signbridge daemon`: the build-host daemon between libsignbridge-pkcs11.so and the signing service.
import type { Command } from 'commander';
import { resolveDaemonConfig } from '../../daemon/config.js';
import { startDaemon } from '../../daemon/daemon.js';
import { createDaemonLogger } from '../../daemon/logger.js';

interface DaemonFlags {
  config?: string;
  socket?: string;
  certDir?: string;
  serviceUrl?: string;
  apiKeyFile?: string;
  tenant: string[];
  inProcess?: string;
  logLevel?: string;
}

const collect = (value: string, previous: string[]) => [...previous, value];

export function registerDaemonCommand(program: Command): void {
  program
    .command('daemon')
    .description('run the build-host daemon that serves the PKCS#11 module (docs/daemon.md)')
    .option('--config <file>', 'YAML or JSON configuration file (docs/daemon.md)')
    .option('--socket <path>', 'socket path (env SIGNBRIDGE_SOCKET; default $XDG_RUNTIME_DIR/signbridge/daemon.sock)')
    .option(
      '--cert-dir <dir>',
      'where `signbridge cert import` keeps chains (env SIGNBRIDGE_CERT_DIR; default ~/.local/share/signbridge/certificates)',
    )
    .option(
      '--service-url <url>',
      'signing service base URL (env SIGNBRIDGE_SERVICE_URL; default: the one of `signbridge login`)',
    )
    .option(
      '--api-key-file <file>',
      'file holding the API key, mode 600 (or env SIGNBRIDGE_API_KEY; default: the key from `signbridge login`)',
    )
    .option(
      '--tenant <id[=label]>',
      'tenant to expose as a token (repeatable; label defaults to the id; default: the tenant of `signbridge login`)',
      collect,
      [],
    )
    .option('--in-process <data-dir>', 'sign in this process with a local service data dir instead of a remote service')
    .option('--log-level <level>', 'fatal, error, warn, info, debug, trace or silent (env SIGNBRIDGE_LOG_LEVEL)')
    .action(async (flags: DaemonFlags) => {
      const config = resolveDaemonConfig({
        ...(flags.config !== undefined && { configFile: flags.config }),
        ...(flags.socket !== undefined && { socket: flags.socket }),
        ...(flags.certDir !== undefined && { certificateDir: flags.certDir }),
        ...(flags.serviceUrl !== undefined && { serviceUrl: flags.serviceUrl }),
        ...(flags.apiKeyFile !== undefined && { apiKeyFile: flags.apiKeyFile }),
        ...(flags.inProcess !== undefined && { inProcessDataDir: flags.inProcess }),
        ...(flags.logLevel !== undefined && { logLevel: flags.logLevel }),
        tenants: flags.tenant,
      });
      const log = createDaemonLogger(config.logLevel);
      const daemon = await startDaemon(config, { log });
      // One plain line whatever the log level, for people and scripts waiting for the daemon.
      process.stderr.write(`signbridge daemon listening on ${daemon.socketPath}\n`);
      let stopping = false;
      const stop = (signal: string) => {
        if (stopping) return;
        stopping = true;
        log.info({ signal }, 'shutting down');
        const force = setTimeout(() => process.exit(1), 10_000);
        force.unref();
        daemon.close().then(
          () => {
            log.flush();
            process.exit(0);
          },
          (err) => {
            log.error({ err }, 'shutdown failed');
            process.exit(1);
          },
        );
      };
      process.on('SIGINT', () => stop('SIGINT'));
      process.on('SIGTERM', () => stop('SIGTERM'));
    });
}
