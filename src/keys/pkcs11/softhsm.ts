// The embedded default key store: a SoftHSM token that lives in the service's data dir.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ensurePrivateDir, readOrCreateSecret, replacePrivateFile } from '../../fs-private.js';
import { packagePath } from '../../paths.js';
import type { Pkcs11KeyStoreOptions } from './pkcs11-key-store.js';

export const SOFTHSM_MODULE_CANDIDATES = [
  '/usr/lib/softhsm/libsofthsm2.so',
  '/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so',
  '/usr/lib/aarch64-linux-gnu/softhsm/libsofthsm2.so',
  '/usr/local/lib/softhsm/libsofthsm2.so',
];

/** SIGNBRIDGE_SOFTHSM_MODULE wins; otherwise the first Debian/upstream install location that exists. */
export function findSoftHsmModule(): string {
  const configured = process.env.SIGNBRIDGE_SOFTHSM_MODULE;
  if (configured) return configured;
  const found = SOFTHSM_MODULE_CANDIDATES.find((p) => existsSync(p));
  if (!found) {
    throw new Error(
      `SoftHSM is not installed (looked for ${SOFTHSM_MODULE_CANDIDATES.join(', ')}); ` +
        'install the softhsm2 package or set SIGNBRIDGE_SOFTHSM_MODULE',
    );
  }
  return found;
}

/**
 * Writes `<softhsmDir>/softhsm2.conf` from the template and exports SOFTHSM2_CONF. SoftHSM reads the variable
 * in C_Initialize, so this must run before the module is initialised, and there is one SoftHSM per process.
 */
export function writeSoftHsmConfig(softhsmDir: string): string {
  ensurePrivateDir(softhsmDir);
  const tokenDir = join(softhsmDir, 'tokens');
  ensurePrivateDir(tokenDir);
  const confPath = join(softhsmDir, 'softhsm2.conf');
  const template = readFileSync(packagePath('softhsm-config', 'softhsm2.conf.template'), 'utf8');
  // Replaced whole, never rewritten in place: another process starting on this data dir may be reading it.
  replacePrivateFile(confPath, template.replaceAll('@TOKEN_DIR@', tokenDir));
  process.env.SOFTHSM2_CONF = confPath;
  return confPath;
}

export const EMBEDDED_TOKEN_LABEL = 'signbridge';

/** Key store options for the token under `<dataDir>/softhsm`, creating PINs and the token on first start. */
export function embeddedSoftHsmOptions(dataDir: string): Pkcs11KeyStoreOptions {
  const dir = join(dataDir, 'softhsm');
  writeSoftHsmConfig(dir);
  return {
    modulePath: findSoftHsmModule(),
    tokenLabel: EMBEDDED_TOKEN_LABEL,
    pin: readOrCreateSecret(join(dir, 'user.pin')),
    initialiseWithSoPin: readOrCreateSecret(join(dir, 'so.pin')),
    initialiseLock: join(dir, 'token-init.lock'),
  };
}
