// Which keys a PKCS#11 token can show. The module signs RSA, EC (the NIST curves and secp256k1), Ed25519 and ML-DSA
// keys. SM2 has no PKCS#11 mechanism (PKCS#11 3.2 defines none, and a vendor-defined one would be known to no
// client), so the daemon does not invent one. Ed25519 (CKK_EC_EDWARDS, CKM_EDDSA) signs the message itself, which
// SIGN carries from protocol version 2 on (DATA): a module that speaks only version 1 is not shown the key. Such a
// tenant is listed as a token without keys whose MESSAGE says why, and the daemon logs it.
import { keyInfo } from '../src/crypto/algorithms.js';
import { MESSAGE_SIGNING_VERSION } from '../wire/wire.js';
import type { PublicKeyInfo } from './upstream/upstream.js';

/** Why this key is left out of its tenant's token on a connection of protocol `version`, or undefined. */
export function leftOutOfToken(key: PublicKeyInfo, version: number): string | undefined {
  const family = keyInfo(key.keySpec).family;
  if (family === 'sm2') {
    return (
      `key ${key.keyId} (${key.keySpec}) left out: SM2 has no PKCS#11 mechanism, so no PKCS#11 client could sign ` +
      'with it; sign SM2 through the service API (sign, with hash = SM3(Z_A || M))'
    );
  }
  if (family === 'ed25519' && version < MESSAGE_SIGNING_VERSION) {
    return (
      `key ${key.keyId} (${key.keySpec}) left out: this module speaks wire protocol version ${version}, and ` +
      `CKM_EDDSA needs version ${MESSAGE_SIGNING_VERSION} (SIGN carries the message); update the module, or sign ` +
      'through the service API (sign with ED25519_PH_SHA_512, hash = SHA-512 of the message), AWS KMS or Vault transit'
    );
  }
  return undefined;
}
