// `signbridge`: one CLI for the service, the daemon and administration. Each subcommand lives in its own file.
import { Command, CommanderError } from 'commander';
import { registerAdminCommands } from './admin.js';
import { registerCertCommands } from './cert.js';
import { registerDaemonCommand } from './daemon.js';
import { registerKeyCommands } from './key-import.js';
import { registerLoginCommands } from './login.js';
import { registerModulePathCommand } from './module-path.js';
import { registerOpensslConfigCommand } from './openssl-config.js';
import { registerP11KitCommands } from './p11-kit.js';
import { registerServerCommand } from './server.js';
import { registerSignFileCommands } from './sign-file.js';
import { registerStatusCommand } from './status.js';

/**
 * A reader that stops early (`signbridge admin api-key list | head`) closes the pipe: the next write fails with
 * EPIPE, which Node raises as an unhandled 'error' event, a stack trace. Like other Unix tools, stop quietly
 * instead: with the exit code set so far (0 unless the command failed), and nothing more on a closed stderr.
 */
export function exitQuietlyOnClosedPipe(stream: NodeJS.WriteStream = process.stdout): void {
  stream.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code !== 'EPIPE') throw err;
    process.exit(typeof process.exitCode === 'number' ? process.exitCode : 0);
  });
}

export async function main(argv: string[]): Promise<void> {
  exitQuietlyOnClosedPipe(process.stdout);
  exitQuietlyOnClosedPipe(process.stderr);
  const program = new Command('signbridge')
    .description('PKCS#11 signing bridge: policy-checked signatures with keys that stay in an HSM or KMS')
    .version('0.1.0')
    .showHelpAfterError()
    .exitOverride();
  registerServerCommand(program);
  registerAdminCommands(program);
  registerDaemonCommand(program);
  registerStatusCommand(program);
  registerLoginCommands(program);
  registerModulePathCommand(program);
  registerCertCommands(program);
  registerKeyCommands(program);
  registerSignFileCommands(program);
  registerOpensslConfigCommand(program);
  registerP11KitCommands(program);
  try {
    await program.parseAsync(argv);
  } catch (err) {
    if (err instanceof CommanderError) {
      process.exitCode = err.exitCode;
      return;
    }
    throw err;
  }
}
