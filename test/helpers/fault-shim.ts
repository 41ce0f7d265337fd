// The fault-injecting PKCS#11 shim in front of SoftHSM (test/native/fault_shim.c, built by scripts/setup.sh): a key
// store opened on FAULT_SHIM signs with the real token until the test asks the shim to fail calls.
import { renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { findSoftHsmModule } from '../../src/keys/pkcs11/softhsm.js';
import { packagePath } from '../../src/paths.js';

export const FAULT_SHIM = packagePath('build', 'native', 'test', 'libsbfault.so');

/**
 * Points this process's shim at SoftHSM and at a control file in `dir`; returns the function that tells the shim what
 * to fail from now on (one line, test/native/fault_shim.c: "<count> <ckr> <functions> [close]"; '' for nothing). The
 * line goes to a new file renamed over the old one, so the shim sees the change.
 */
export function useFaultShim(dir: string): (line: string) => void {
  const control = join(dir, 'faults');
  process.env.SBFAULT_MODULE = findSoftHsmModule();
  process.env.SBFAULT_CONTROL = control;
  return (line) => {
    writeFileSync(`${control}.new`, `${line}\n`);
    renameSync(`${control}.new`, control);
  };
}
