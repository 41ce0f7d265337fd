// `signbridge p11-kit register|unregister`: a p11-kit module registration file for our module, so that
// `p11-kit list-modules` shows the tokens and clients that load p11-kit's proxy (p11-kit-proxy.so, GnuTLS, NSS via
// p11-kit) find them without naming our library.
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { Command } from 'commander';
import { MODULE_PATH } from './module-path.js';

export class P11KitError extends Error {}

export const SYSTEM_MODULES_DIR = '/etc/pkcs11/modules';
export const MODULE_FILE = 'signbridge.module';

/**
 * p11-kit reads per-user registrations from ~/.config/pkcs11/modules (it does not look at XDG_CONFIG_HOME), and
 * ignores them entirely in programs running as root; so root registers system-wide.
 */
export function registrationDir(scope: 'user' | 'system', env: NodeJS.ProcessEnv = process.env): string {
  if (scope === 'system') return SYSTEM_MODULES_DIR;
  return join(env.HOME || homedir(), '.config', 'pkcs11', 'modules');
}

export function registrationText(modulePath: string): string {
  return `# signbridge: PKCS#11 tokens for the tenants the signbridge daemon exposes.
# Written by \`signbridge p11-kit register\`; remove with \`signbridge p11-kit unregister\`.
module: ${modulePath}
# A daemon that is not running must not stop p11-kit from loading the other modules.
critical: no
# Our tokens hold signing keys and certificates, not trust anchors.
trust-policy: no
`;
}

function scopeOf(flags: { system?: boolean; user?: boolean }): 'user' | 'system' {
  if (flags.system && flags.user) throw new P11KitError('give --system or --user, not both');
  if (flags.system) return 'system';
  if (flags.user) return 'user';
  return process.getuid?.() === 0 ? 'system' : 'user';
}

export function registerP11KitCommands(program: Command): void {
  const p11kit = program.command('p11-kit').description('register the module with p11-kit (docs/clients.md)');
  p11kit
    .command('register')
    .description(`write ${MODULE_FILE} so that p11-kit and its proxy module load libsignbridge-pkcs11.so`)
    .option('--system', `for all users (${SYSTEM_MODULES_DIR}; the default when run as root)`)
    .option('--user', 'for this user only (~/.config/pkcs11/modules; the default otherwise)')
    .action((flags: { system?: boolean; user?: boolean }) => {
      if (!existsSync(MODULE_PATH)) {
        throw new P11KitError(`the PKCS#11 module is not built (${MODULE_PATH} is missing); run scripts/setup.sh`);
      }
      const scope = scopeOf(flags);
      const dir = registrationDir(scope);
      const file = join(dir, MODULE_FILE);
      try {
        mkdirSync(dir, { recursive: true, mode: 0o755 });
        writeFileSync(file, registrationText(MODULE_PATH), { mode: 0o644 });
      } catch (err) {
        throw new P11KitError(
          `cannot write ${file}: ${(err as Error).message}${scope === 'system' ? ' (--system needs root)' : ''}`,
        );
      }
      process.stderr.write(
        `registered ${MODULE_PATH} with p11-kit in ${file}; check with: p11-kit list-modules\n` +
          (scope === 'user' ? 'note: p11-kit ignores per-user registrations in programs running as root\n' : ''),
      );
    });
  p11kit
    .command('unregister')
    .description(`remove ${MODULE_FILE}`)
    .option('--system', `from ${SYSTEM_MODULES_DIR} (the default when run as root)`)
    .option('--user', 'from ~/.config/pkcs11/modules (the default otherwise)')
    .action((flags: { system?: boolean; user?: boolean }) => {
      const file = join(registrationDir(scopeOf(flags)), MODULE_FILE);
      if (!existsSync(file)) throw new P11KitError(`${file} does not exist: nothing to remove`);
      rmSync(file);
      process.stderr.write(`removed ${file}\n`);
    });
}
