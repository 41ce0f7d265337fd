// `signbridge audit prove` and `signbridge audit watch`: the client side of the verifiable audit log (issue 25,
// docs/transparency.md "Verifying the log"). Client commands, beside `sign`; the operator's `signbridge admin
// audit verify/export` read the store itself and stay with the service's commands.
import type { Command } from 'commander';
import { registerProveCommand } from './prove.js';
import { registerWatchCommand } from './watch.js';

export function registerAuditCommands(program: Command): void {
  const audit = program
    .command('audit')
    .description("verify the service's audit log with its public key: an entry's inclusion, the log's consistency");
  registerProveCommand(audit);
  registerWatchCommand(audit);
}
