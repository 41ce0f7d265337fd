// Tenants, their key versions and the keys awaiting imported material: what store/tenant-store.ts and
// store/key-import-store.ts persist, and what the access cache holds (a leaf: no store file imports above it).
import type { KeySpec } from '../../crypto/algorithms.js';
import type { KeyOrigin, KeyStoreKind, WrappingAlgorithm, WrappingKeySpec } from '../../keys/key-store.js';

export interface TenantRecord {
  id: string;
  currentKeyId: string;
  createdAt: string;
}

export interface KeyRecord {
  id: string;
  tenantId: string;
  /** 1 for the tenant's first key, +1 for each rotation. */
  version: number;
  keySpec: KeySpec;
  /** The key store's own reference; never shown to API callers. */
  keyRef: string;
  publicKeyPem: string;
  createdAt: string;
  /** Which key store holds it (migration 0010; keys made before say pkcs11). */
  keyStore: KeyStoreKind;
  /** generated in the key store, or imported (BYOK). */
  origin: KeyOrigin;
  /** Imported with KEY_MATERIAL_EXPIRES: when the material stops working (ISO time); otherwise null. */
  materialExpiresAt: string | null;
}

/** A key awaiting material (get_import_params until import_key; migration 0011). */
export interface KeyImportRecord {
  /** The kms_key_id handed to the client; the key version's id once imported. */
  id: string;
  tenantId: string;
  keySpec: KeySpec;
  /** The key store the material goes to. */
  keyStore: KeyStoreKind;
  /** The key the key store made for it (AWS KMS); null when the import itself makes the key. */
  keyRef: string | null;
  /** The RSA wrapping key in the token; null for a key store that wraps itself, and once swept after expiry. */
  wrappingKeyRef: string | null;
  wrappingAlgorithm: WrappingAlgorithm;
  wrappingKeySpec: WrappingKeySpec;
  createdAt: string;
  /** parameters_valid_to, ISO time. */
  validTo: string;
}
