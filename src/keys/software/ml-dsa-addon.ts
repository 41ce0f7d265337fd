// The native ML-DSA signer (src/keys/native/ml-dsa): the OpenSSL inside Node 24 signs an external μ several times
// faster than noble (docs/benchmarks.md). It loads only where that OpenSSL has ML-DSA (3.5+); on Node 20, or without
// the build, the software key store signs with @noble/post-quantum as before and says so once.
import { createRequire } from 'node:module';
import type { MlDsaLevel } from '../../crypto/ml-dsa-verify.js';
import { packagePath } from '../../paths.js';

export interface MlDsaSignOptions {
  /** rnd = 0 (FIPS 204's deterministic variant); the default is hedged (fresh rnd). */
  deterministic?: boolean;
  /** A given 32-byte rnd, for tests that compare with another implementation byte for byte. */
  testEntropy?: Uint8Array;
}

export interface MlDsaAddon {
  /** Pure ML-DSA over μ (64 bytes) with the expanded secret key (skEncode); throws RangeError on wrong sizes. */
  signMu(level: MlDsaLevel, secretKey: Uint8Array, mu: Uint8Array, options?: MlDsaSignOptions): Buffer;
  describe(): { openssl: string; mlDsa: boolean };
}

export const ML_DSA_ADDON_PATH = packagePath('src', 'keys', 'native', 'ml-dsa', 'build', 'Release', 'ml_dsa_sign.node');
export const ML_DSA_ADDON_BUILD_COMMAND = 'bash src/keys/native/ml-dsa/build.sh';

/** The addon, or why the software key store signs ML-DSA with noble instead. */
export type MlDsaAddonLoad =
  | { addon: MlDsaAddon; path: string; openssl: string }
  | { addon?: undefined; path?: undefined; reason: string };

/** Loads the addon at `path`; never throws (a missing or unloadable addon is a reason, not an error). */
export function loadMlDsaAddon(path: string = ML_DSA_ADDON_PATH): MlDsaAddonLoad {
  let addon: MlDsaAddon;
  try {
    addon = createRequire(import.meta.url)(path) as MlDsaAddon;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'MODULE_NOT_FOUND') return { reason: `${path} is not built (${ML_DSA_ADDON_BUILD_COMMAND})` };
    // Node 20's OpenSSL 3.0 lacks the symbols: "undefined symbol: EVP_PKEY_sign_message_init".
    return { reason: `it does not load on Node ${process.versions.node} (${firstLine(err)})` };
  }
  const { openssl, mlDsa } = addon.describe();
  if (!mlDsa) return { reason: `${openssl} in Node ${process.versions.node} has no ML-DSA` };
  return { addon, path, openssl };
}

/** The one line the key store writes when it falls back. */
export function mlDsaFallbackNote(load: MlDsaAddonLoad): string | undefined {
  if (load.addon) return undefined;
  return `ML-DSA signs with @noble/post-quantum (pure JavaScript, several times slower than OpenSSL): the native signer is unavailable: ${load.reason}`;
}

function firstLine(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).split('\n')[0] as string;
}
