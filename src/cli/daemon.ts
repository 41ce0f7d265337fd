// `signbridge daemon`: the build-host daemon between libsignbridge-pkcs11.so and the signing service.
import type { Command } from 'commander';
import { loadDaemonConfigFile, resolveDaemonConfig } from '../../daemon/config.js';
import type { ApiKeySource } from '../../daemon/credentials.js';
import { startDaemon } from '../../daemon/daemon.js';
import { createDaemonLogger } from '../../daemon/logger.js';
import { addCiOptions, type CiFlags, ciEnabled, idTokenSourceFor } from './ci/ci-options.js';
import { WorkloadKeySource } from './ci/workload-key.js';
import { serviceBaseUrl } from './login/service-http.js';

interface DaemonFlags extends CiFlags {
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
  const command = program
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
    .option('--log-level <level>', 'fatal, error, warn, info, debug, trace or silent (env SIGNBRIDGE_LOG_LEVEL)');
  addCiOptions(command).action(async (flags: DaemonFlags) => {
    const logLevel =
      flags.logLevel ??
      process.env.SIGNBRIDGE_LOG_LEVEL ??
      (flags.config ? loadDaemonConfigFile(flags.config).logLevel : undefined) ??
      'info';
    const log = createDaemonLogger(logLevel);
    let ciKey: WorkloadKeySource | undefined;
    if (ciEnabled(flags)) {
      ciKey = await startCiKey(flags, log);
      if (!ciKey) {
        process.exitCode = 1;
        return;
      }
    }
    const config = resolveDaemonConfig({
      ...(flags.config !== undefined && { configFile: flags.config }),
      ...(flags.socket !== undefined && { socket: flags.socket }),
      ...(flags.certDir !== undefined && { certificateDir: flags.certDir }),
      ...(flags.serviceUrl !== undefined && { serviceUrl: flags.serviceUrl }),
      ...(flags.apiKeyFile !== undefined && { apiKeyFile: flags.apiKeyFile }),
      ...(flags.inProcess !== undefined && { inProcessDataDir: flags.inProcess }),
      logLevel,
      ...(ciKey !== undefined && { apiKey: ciKey satisfies ApiKeySource }),
      tenants: flags.tenant,
    });
    const daemon = await startDaemon(config, { log });
    // One plain line whatever the log level, for people and scripts waiting for the daemon.
    process.stderr.write(`signbridge daemon listening on ${daemon.socketPath}\n`);
    let stopping = false;
    const stop = (signal: string) => {
      if (stopping) return;
      stopping = true;
      ciKey?.stop();
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

/**
 * `daemon --ci`: the first exchange of the job's ID token, before the daemon listens (a job whose token is refused
 * fails here, with the service's reason, instead of at its first signature). Undefined after saying why on stderr.
 */
async function startCiKey(
  flags: DaemonFlags,
  log: ReturnType<typeof createDaemonLogger>,
): Promise<WorkloadKeySource | undefined> {
  const say = (line: string) => process.stderr.write(`signbridge daemon --ci: ${line}\n`);
  const given = flags.serviceUrl ?? process.env.SIGNBRIDGE_SERVICE_URL;
  if (!given) {
    say('pass --service-url URL (or set SIGNBRIDGE_SERVICE_URL): the service that exchanges the job token');
    return undefined;
  }
  const tenantId = flags.tenant.length === 1 ? flags.tenant[0]?.split('=')[0] : undefined;
  if (!tenantId) {
    say('pass exactly one --tenant ID: the tenant whose trust rules take the job token');
    return undefined;
  }
  try {
    const serviceUrl = serviceBaseUrl(given, false).href;
    return await WorkloadKeySource.start({
      serviceUrl,
      tenantId,
      idTokens: idTokenSourceFor(flags, serviceUrl),
      log,
    });
  } catch (err) {
    say((err as Error).message);
    return undefined;
  }
}
