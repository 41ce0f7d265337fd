// A tenant's keys as Vault's `GET transit/keys/<name>` describes a key: the type of the latest version, every version
// with its public key (PEM), and what the key may do. signbridge keys sign and verify only; none is exportable,
// derived or deletable through this API. cosign reads `keys.<version>.public_key`, jsign reads `type`.
import { type KeySpec, keyInfo } from '../../crypto/algorithms.js';
import type { KeyRecord } from '../../store/store.js';
import { VAULT_SECP256K1_TYPE } from './request-fields.js';

/**
 * Vault's key type names; ML-DSA as OpenBao's transit names it (openbao/openbao#3909), SM2 signbridge's own (neither
 * Vault nor OpenBao has one).
 */
export function vaultKeyType(spec: KeySpec): string {
  const info = keyInfo(spec);
  switch (info.family) {
    case 'rsa':
      return `rsa-${info.bits}`;
    case 'ec':
      // Vault has no secp256k1 key type; named in Vault's pattern, as SM2 is (sign and verify refuse it here:
      // request-fields.ts algorithmFor).
      return info.curve === 'secp256k1' ? VAULT_SECP256K1_TYPE : `ecdsa-p${info.curve.slice(2)}`;
    case 'ml-dsa':
      return `mldsa-${info.level}`;
    case 'sm2':
      return 'sm2';
    case 'ed25519':
      return 'ed25519';
  }
}

/** Vault's per-version `name`: the curve for ECDSA keys, the type otherwise. */
function versionName(spec: KeySpec): string {
  const info = keyInfo(spec);
  return info.family === 'ec' ? info.curve : vaultKeyType(spec);
}

export function describeKey(tenantId: string, versions: KeyRecord[], current: KeyRecord) {
  const oldest = versions.reduce((min, k) => Math.min(min, k.version), current.version);
  return {
    name: tenantId,
    type: vaultKeyType(current.keySpec),
    keys: Object.fromEntries(
      versions.map((k) => [
        String(k.version),
        { name: versionName(k.keySpec), public_key: k.publicKeyPem, creation_time: k.createdAt },
      ]),
    ),
    latest_version: current.version,
    min_available_version: oldest,
    min_decryption_version: oldest,
    min_encryption_version: 0,
    supports_signing: true,
    supports_encryption: false,
    supports_decryption: false,
    supports_derivation: false,
    exportable: false,
    deletion_allowed: false,
    derived: false,
    allow_plaintext_backup: false,
    imported_key: current.origin === 'imported',
    auto_rotate_period: 0,
  };
}
