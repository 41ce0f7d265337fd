// `signbridge module-path`: the absolute path of the PKCS#11 module, for `pkcs11-tool --module $(...)` and
// OpenSSL/Java configuration. A checkout builds it with CMake (scripts/setup.sh) into build/native/; a package
// installs it where its layout file says (src/paths.ts).
import { existsSync } from 'node:fs';
import type { Command } from 'commander';
import { nativeMissingHint, nativePath } from '../paths.js';

export const MODULE_PATH = nativePath('pkcs11Module');

/** Why the module cannot be used, for error messages: it is missing, and what to do about it. */
export const moduleMissing = () =>
  `the PKCS#11 module is not built (${MODULE_PATH} is missing); ${nativeMissingHint()}`;

export function registerModulePathCommand(program: Command): void {
  program
    .command('module-path')
    .description('print the absolute path of libsignbridge-pkcs11.so (the PKCS#11 module)')
    .action(() => {
      if (!existsSync(MODULE_PATH)) {
        process.stderr.write(`signbridge: ${moduleMissing()}\n`);
        process.exitCode = 1;
        return;
      }
      process.stdout.write(`${MODULE_PATH}\n`);
    });
}
