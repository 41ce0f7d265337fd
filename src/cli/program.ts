// What every `signbridge` entry point shares: the program header, quiet exits on closed pipes, and commander's
// exits as exit codes. Kept apart from main.ts so that the client entry point (client-main.ts) imports none of
// the service's commands.
import { Command, CommanderError } from 'commander';

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

export function newProgram(description: string): Command {
  exitQuietlyOnClosedPipe(process.stdout);
  exitQuietlyOnClosedPipe(process.stderr);
  return new Command('signbridge').description(description).version('0.1.0').showHelpAfterError().exitOverride();
}

/** Runs the program; commander's own exits (help, version, a usage error) become the exit code. */
export async function runProgram(program: Command, argv: string[]): Promise<void> {
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
