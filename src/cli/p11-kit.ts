// `signbridge p11-kit register|unregister`: a p11-kit module registration file for our module, so that
// `p11-kit list-modules` shows the tokens, and programs that load p11-kit's proxy module (p11-kit-proxy.so, GnuTLS,
// pkcs11-provider's default) find them without naming our library.
//
// How p11-kit (0.24, Debian 12) reads registrations:
// - system: /etc/pkcs11/modules/*.module (and the packages' /usr/share/p11-kit/modules);
// - user: ~/.config/pkcs11/modules/*.module, where `~/.config` is $XDG_CONFIG_HOME when that is set; merged with
//   the system ones unless /etc/pkcs11/pkcs11.conf says `user-config: none` (Debian ships no such file, so the
//   default, `merge`, applies). p11-kit skips the user's files in programs running as root or setuid, and when
//   P11_KIT_NO_USER_CONFIG is set.
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { Command } from 'commander';
import { MODULE_PATH, moduleMissing } from './module-path.js';

export class P11KitError extends Error {}

export const SYSTEM_MODULES_DIR = '/etc/pkcs11/modules';
export const SYSTEM_CONF = '/etc/pkcs11/pkcs11.conf';
export const MODULE_FILE = 'signbridge.module';

type Scope = 'user' | 'system';

/** The folder p11-kit reads registrations from, for this scope (the user's as p11-kit expands it). */
export function registrationDir(scope: Scope, env: NodeJS.ProcessEnv = process.env): string {
  if (scope === 'system') return SYSTEM_MODULES_DIR;
  const config = env.XDG_CONFIG_HOME || join(env.HOME || homedir(), '.config');
  return join(config, 'pkcs11', 'modules');
}

export function registrationText(modulePath: string): string {
  return `# signbridge: one PKCS#11 token per tenant the signbridge daemon exposes.
# Written by \`signbridge p11-kit register\`; remove with \`signbridge p11-kit unregister\`.
module: ${modulePath}
# A daemon that is not running must not stop p11-kit from loading the other modules.
critical: no
`;
}

/** Why p11-kit would ignore a per-user registration in this environment, if it would. */
export function userConfigIgnored(env: NodeJS.ProcessEnv = process.env, systemConf = SYSTEM_CONF): string | undefined {
  if (env.P11_KIT_NO_USER_CONFIG) return 'P11_KIT_NO_USER_CONFIG is set';
  let conf = '';
  try {
    conf = readFileSync(systemConf, 'utf8');
  } catch {
    return undefined; // no system configuration: p11-kit's default is user-config: merge
  }
  const mode = /^\s*user-config\s*:\s*(\S+)/m.exec(conf)?.[1];
  return mode === 'none' ? `${systemConf} says user-config: none` : undefined;
}

function scopeOf(flags: { system?: boolean }): Scope {
  if (flags.system) return 'system';
  if (process.getuid?.() === 0) {
    // A file in root's home would do nothing: p11-kit never reads per-user registrations as root.
    throw new P11KitError(
      `p11-kit ignores per-user registrations in programs running as root; use --system (${SYSTEM_MODULES_DIR})`,
    );
  }
  return 'user';
}

export function registerP11KitCommands(program: Command): void {
  const p11kit = program.command('p11-kit').description('register the module with p11-kit (docs/clients.md)');
  p11kit
    .command('register')
    .description(`write ${MODULE_FILE} so that p11-kit and its proxy module load libsignbridge-pkcs11.so`)
    .option('--system', `for all users, in ${SYSTEM_MODULES_DIR} (needs root)`)
    .action((flags: { system?: boolean }) => {
      if (!existsSync(MODULE_PATH)) {
        throw new P11KitError(moduleMissing());
      }
      const scope = scopeOf(flags);
      const file = join(registrationDir(scope), MODULE_FILE);
      const text = registrationText(MODULE_PATH);
      try {
        mkdirSync(registrationDir(scope), { recursive: true, mode: 0o755 });
        // Readable by everyone: p11-kit reads it in every program of the user (or, --system, of every user).
        writeFileSync(file, text, { mode: 0o644 });
      } catch (err) {
        throw new P11KitError(
          `cannot write ${file}: ${(err as Error).message}${scope === 'system' ? ' (--system needs root)' : ''}`,
        );
      }
      process.stdout.write(`wrote ${file}:\n${text}`);
      const ignored = scope === 'user' ? userConfigIgnored() : undefined;
      if (ignored) {
        process.stderr.write(`warning: p11-kit will not read it here: ${ignored}; use --system as root instead\n`);
      }
    });
  p11kit
    .command('unregister')
    .description(`remove ${MODULE_FILE}`)
    .option('--system', `from ${SYSTEM_MODULES_DIR} (needs root)`)
    .action((flags: { system?: boolean }) => {
      const file = join(registrationDir(scopeOf(flags)), MODULE_FILE);
      if (!existsSync(file)) throw new P11KitError(`${file} does not exist: nothing to remove`);
      try {
        rmSync(file);
      } catch (err) {
        throw new P11KitError(`cannot remove ${file}: ${(err as Error).message}`);
      }
      process.stdout.write(`removed ${file}\n`);
    });
}
