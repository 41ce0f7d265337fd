// The CLI loads only the module of the top-level command it runs (src/cli/main.ts): these tests keep the table of
// names true to what each module registers, keep `signbridge --help` listing every command in its order, and check
// that a named command loads its own module alone.
import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { registerClientCommands } from '../../src/cli/client-main.js';
import { registrarsFor, TOP_LEVEL_COMMANDS } from '../../src/cli/main.js';

async function namesRegisteredBy(entries: typeof TOP_LEVEL_COMMANDS): Promise<string[]> {
  const program = new Command();
  for (const entry of entries) (await entry.load())(program);
  return program.commands.map((command) => command.name());
}

describe('the CLI’s table of top-level commands', () => {
  it('names exactly what each module registers', async () => {
    for (const entry of TOP_LEVEL_COMMANDS) {
      expect((await namesRegisteredBy([entry])).sort(), entry.names.join(' ')).toEqual([...entry.names].sort());
    }
  });

  it('lists the service’s commands, then the client entry point’s, in its order', async () => {
    const client = new Command();
    registerClientCommands(client);
    expect(await namesRegisteredBy(TOP_LEVEL_COMMANDS)).toEqual([
      'server',
      'admin',
      'tsa',
      ...client.commands.map((command) => command.name()),
    ]);
  });

  it('loads the named command’s module alone, and every module for help or a name it does not know', () => {
    const argv = (...args: string[]) => ['node', 'signbridge', ...args];
    expect(registrarsFor(argv('sign', 'a.exe')).map((entry) => entry.names)).toEqual([['digest', 'sign']]);
    expect(registrarsFor(argv('logout')).map((entry) => entry.names)).toEqual([['login', 'logout']]);
    expect(registrarsFor(argv('admin', 'trust', 'add')).map((entry) => entry.names)).toEqual([['admin']]);
    expect(registrarsFor(argv())).toBe(TOP_LEVEL_COMMANDS);
    expect(registrarsFor(argv('--help'))).toBe(TOP_LEVEL_COMMANDS);
    expect(registrarsFor(argv('sgin'))).toBe(TOP_LEVEL_COMMANDS);
  });
});
