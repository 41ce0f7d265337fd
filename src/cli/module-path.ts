// `signbridge module-path`: the absolute path of the PKCS#11 module, for `pkcs11-tool --module $(...)` and
// OpenSSL/Java configuration. The module is built by CMake (scripts/setup.sh) into build/native/.
import { existsSync } from 'node:fs';
import type { Command } from 'commander';
import { packagePath } from '../paths.js';

export const MODULE_PATH = packagePath('build', 'native', 'libsignbridge-pkcs11.so');

export function registerModulePathCommand(program: Command): void {
  program
    .command('module-path')
    .description('print the absolute path of libsignbridge-pkcs11.so (the PKCS#11 module)')
    .action(() => {
      if (!existsSync(MODULE_PATH)) {
        process.stderr.write(
          `signbridge: the PKCS#11 module is not built (${MODULE_PATH} is missing); run scripts/setup.sh\n`,
        );
        process.exitCode = 1;
        return;
      }
      process.stdout.write(`${MODULE_PATH}\n`);
    });
}
