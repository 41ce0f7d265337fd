// `signbridge` on a build host: the client commands only (daemon, login/logout, status, module-path, cert, sign,
// digest, audit prove/watch, key import, openssl-config, p11-kit). The client packages (packaging/,
// docs/packages.md) bundle this entry point; it must not reach the service's modules (fastify, SQLite, PostgreSQL,
// the key stores): the daemon's in-process mode is the one path that would, and the bundle leaves it out.
import type { Command } from 'commander';
import { registerAuditCommands } from './audit/register.js';
import { registerCertCommands } from './cert.js';
import { registerDaemonCommand } from './daemon.js';
import { registerKeyCommands } from './key-import.js';
import { registerLoginCommands } from './login.js';
import { registerModulePathCommand } from './module-path.js';
import { registerOpensslConfigCommand } from './openssl-config.js';
import { registerP11KitCommands } from './p11-kit.js';
import { newProgram, runProgram } from './program.js';
import { registerSignFileCommands } from './sign-file.js';
import { registerStatusCommand } from './status.js';

/** The client commands, in the order `signbridge --help` lists them. */
export function registerClientCommands(program: Command): void {
  registerDaemonCommand(program);
  registerStatusCommand(program);
  registerLoginCommands(program);
  registerModulePathCommand(program);
  registerCertCommands(program);
  registerKeyCommands(program);
  registerSignFileCommands(program);
  registerAuditCommands(program);
  registerOpensslConfigCommand(program);
  registerP11KitCommands(program);
}

export async function clientMain(argv: string[]): Promise<void> {
  const program = newProgram('signbridge build-host client: the daemon behind the PKCS#11 module, and its commands');
  registerClientCommands(program);
  await runProgram(program, argv);
}

/** The packages' entry point: run as the program itself (the bundle's top level calls this). */
export function runClient(): void {
  clientMain(process.argv).catch((err) => {
    process.stderr.write(`signbridge: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
}
