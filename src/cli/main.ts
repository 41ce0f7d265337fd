// `signbridge`: one CLI for the service, the daemon and administration. Each subcommand lives in its own file.
// The build-host client packages run client-main.ts instead: the same client commands without the service's.
import type { Command } from 'commander';
import { newProgram, runProgram } from './program.js';

export { exitQuietlyOnClosedPipe } from './program.js';

type Registrar = (program: Command) => void;

/**
 * The top-level commands, in the order `signbridge --help` lists them, each with the module that registers it.
 * Loaded only when named: `signbridge sign` or `signbridge admin trust add` need not load the service (fastify,
 * both stores, the key stores, every setting), which took a second of start-up, paid by every script and hook
 * that runs the CLI. test/unit/cli-main.test.ts checks that each module registers exactly the names given here.
 */
export const TOP_LEVEL_COMMANDS: readonly { names: readonly string[]; load: () => Promise<Registrar> }[] = [
  { names: ['server'], load: async () => (await import('./server.js')).registerServerCommand },
  { names: ['admin'], load: async () => (await import('./admin.js')).registerAdminCommands },
  { names: ['tsa'], load: async () => (await import('./tsa.js')).registerTsaCommands },
  // The client commands, in client-main.ts's order.
  { names: ['daemon'], load: async () => (await import('./daemon.js')).registerDaemonCommand },
  { names: ['status'], load: async () => (await import('./status.js')).registerStatusCommand },
  { names: ['login', 'logout'], load: async () => (await import('./login.js')).registerLoginCommands },
  { names: ['module-path'], load: async () => (await import('./module-path.js')).registerModulePathCommand },
  { names: ['cert'], load: async () => (await import('./cert.js')).registerCertCommands },
  { names: ['key'], load: async () => (await import('./key-import.js')).registerKeyCommands },
  { names: ['digest', 'sign'], load: async () => (await import('./sign-file.js')).registerSignFileCommands },
  { names: ['audit'], load: async () => (await import('./audit/register.js')).registerAuditCommands },
  { names: ['openssl-config'], load: async () => (await import('./openssl-config.js')).registerOpensslConfigCommand },
  { names: ['p11-kit'], load: async () => (await import('./p11-kit.js')).registerP11KitCommands },
];

/** The registrars argv needs: the named command's alone, or all of them (help, a version, an unknown command). */
export function registrarsFor(argv: readonly string[]): typeof TOP_LEVEL_COMMANDS {
  const named = argv[2];
  const owner = TOP_LEVEL_COMMANDS.find((entry) => named !== undefined && entry.names.includes(named));
  return owner ? [owner] : TOP_LEVEL_COMMANDS;
}

export async function main(argv: string[]): Promise<void> {
  const program = newProgram('PKCS#11 signing bridge: policy-checked signatures with keys that stay in an HSM or KMS');
  const registrars = await Promise.all(registrarsFor(argv).map((entry) => entry.load()));
  for (const register of registrars) register(program);
  await runProgram(program, argv);
}
