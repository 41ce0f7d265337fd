// `signbridge`: one CLI for the service, the daemon and administration. Each subcommand lives in its own file.
// The build-host client packages run client-main.ts instead: the same client commands without the service's.
import { registerAdminCommands } from './admin.js';
import { registerClientCommands } from './client-main.js';
import { newProgram, runProgram } from './program.js';
import { registerServerCommand } from './server.js';
import { registerTsaCommands } from './tsa.js';

export { exitQuietlyOnClosedPipe } from './program.js';

export async function main(argv: string[]): Promise<void> {
  const program = newProgram('PKCS#11 signing bridge: policy-checked signatures with keys that stay in an HSM or KMS');
  registerServerCommand(program);
  registerAdminCommands(program);
  registerTsaCommands(program);
  registerClientCommands(program);
  await runProgram(program, argv);
}
