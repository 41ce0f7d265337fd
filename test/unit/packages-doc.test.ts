// docs/packages.md lists the commands the client packages carry; the list is checked against the commands the
// client entry point (src/cli/client-main.ts) registers, so a command added to the client cannot be left out of the
// docs again (issue 31: `audit` was).
import { readFileSync } from 'node:fs';
import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { registerClientCommands } from '../../src/cli/client-main.js';
import { packagePath } from '../../src/paths.js';

/** `daemon`, `key import`, `audit prove`, ...: what the sentence in docs/packages.md names, in its order. */
function documentedCommands(): string[] {
  const text = readFileSync(packagePath('docs', 'packages.md'), 'utf8').replace(/\s+/g, ' ');
  const sentence = /`signbridge` with the build-host commands only: (.*?)\. Not `server`/.exec(text);
  expect(sentence, 'the command sentence of docs/packages.md').not.toBeNull();
  return [...(sentence?.[1] ?? '').matchAll(/`([^`]+)`/g)].map((m) => m[1] as string);
}

/** Each client command, and for a command with subcommands that the docs name one by one, `command sub`. */
function clientCommands(): { top: string[]; sub: Map<string, string[]> } {
  const program = new Command('signbridge');
  registerClientCommands(program);
  const sub = new Map(program.commands.map((c) => [c.name(), c.commands.map((s) => s.name())]));
  return { top: program.commands.map((c) => c.name()), sub };
}

describe('docs/packages.md names every client command', () => {
  it('the top-level commands, and every subcommand where the list names subcommands', () => {
    const documented = documentedCommands();
    const { top, sub } = clientCommands();
    const documentedTop = [...new Set(documented.map((c) => c.split(' ')[0] as string))];
    expect(documentedTop.sort()).toEqual([...top].sort());
    // Where the docs name `key import` rather than `key`, they must name each of its subcommands.
    for (const name of documentedTop) {
      const named = documented.filter((c) => c.startsWith(`${name} `)).map((c) => c.slice(name.length + 1));
      if (named.length > 0) expect(named.sort(), name).toEqual([...(sub.get(name) ?? [])].sort());
    }
  });
});
