// Which keys a PKCS#11 token can show. The module signs RSA, EC and ML-DSA keys. SM2 has no PKCS#11 mechanism
// (PKCS#11 3.2 defines none, and a vendor-defined one would be known to no client), so the daemon does not invent
// one: an SM2 tenant is listed as a token without keys whose MESSAGE says why, and the daemon logs it. SM2 signs
// through the HTTP API (`sign`, docs/api.md).
import { keyInfo } from '../src/crypto/algorithms.js';
import type { PublicKeyInfo } from './upstream/upstream.js';

/** Why this key is left out of its tenant's token, or undefined when the module can use it. */
export function leftOutOfToken(key: PublicKeyInfo): string | undefined {
  if (keyInfo(key.keySpec).family !== 'sm2') return undefined;
  return (
    `key ${key.keyId} (${key.keySpec}) left out: SM2 has no PKCS#11 mechanism, so no PKCS#11 client could sign ` +
    'with it; sign SM2 through the service API (sign, with hash = SM3(Z_A || M))'
  );
}
