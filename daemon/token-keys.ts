// Which keys a PKCS#11 token can show. The module signs RSA, EC (the NIST curves and secp256k1) and ML-DSA keys.
// SM2 has no PKCS#11 mechanism (PKCS#11 3.2 defines none, and a vendor-defined one would be known to no client), so
// the daemon does not invent one. Ed25519 has one (CKK_EC_EDWARDS, CKM_EDDSA), but pure EdDSA signs the message
// itself, which the module and the wire protocol do not carry yet (issue 47). Such a tenant is listed as a token
// without keys whose MESSAGE says why, and the daemon logs it; both sign through the HTTP API (docs/api.md).
import { keyInfo } from '../src/crypto/algorithms.js';
import type { PublicKeyInfo } from './upstream/upstream.js';

/** Why this key is left out of its tenant's token, or undefined when the module can use it. */
export function leftOutOfToken(key: PublicKeyInfo): string | undefined {
  const family = keyInfo(key.keySpec).family;
  if (family === 'sm2') {
    return (
      `key ${key.keyId} (${key.keySpec}) left out: SM2 has no PKCS#11 mechanism, so no PKCS#11 client could sign ` +
      'with it; sign SM2 through the service API (sign, with hash = SM3(Z_A || M))'
    );
  }
  if (family === 'ed25519') {
    return (
      `key ${key.keyId} (${key.keySpec}) left out: this module does not show Ed25519 keys yet (CKM_EDDSA signs the ` +
      'message, which the wire protocol does not carry); sign through the service API (sign with ' +
      'ED25519_PH_SHA_512, hash = SHA-512 of the message), AWS KMS or Vault transit'
    );
  }
  return undefined;
}
