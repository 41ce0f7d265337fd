import type { Role } from '../auth/roles.js';
import type { KeySpec, SigningAlgorithm } from '../crypto/algorithms.js';

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
}

export interface ApiKeyRecord {
  id: string;
  /** SHA-256 of the secret part, hex. The secret itself is never stored. */
  secretHash: string;
  /** null for the global operator role. */
  tenantId: string | null;
  role: Role;
  label: string;
  createdAt: string;
  revokedAt: string | null;
}

export interface SignatureRecord {
  id: string;
  tenantId: string;
  keyId: string;
  algorithm: SigningAlgorithm;
  /** The signed digest, standard base64. */
  hash: string;
  /** The API key id that asked for the signature. */
  caller: string;
  createdAt: string;
}

export class ConflictError extends Error {}

/**
 * Durable state. Implementations: SQLite (embedded default) and, later, PostgreSQL. Every method is one atomic
 * unit: it either happens whole or throws and changes nothing.
 */
export interface Store {
  readonly description: string;
  migrate(): Promise<void>;
  ping(): Promise<void>;
  close(): Promise<void>;

  /** Throws ConflictError if the tenant exists. */
  createTenant(tenantId: string, firstKey: KeyRecord): Promise<TenantRecord>;
  getTenant(tenantId: string): Promise<TenantRecord | undefined>;
  /** The tenant's current key in one round trip (the signing path); undefined if no such tenant. */
  getCurrentKey(tenantId: string): Promise<KeyRecord | undefined>;
  /** Adds `key` as the next version and makes it current; returns the new version number. */
  rotateKey(tenantId: string, key: Omit<KeyRecord, 'version'>): Promise<KeyRecord>;
  getKey(tenantId: string, keyId: string): Promise<KeyRecord | undefined>;
  listKeys(tenantId: string): Promise<KeyRecord[]>;

  createApiKey(record: ApiKeyRecord): Promise<void>;
  getApiKey(id: string): Promise<ApiKeyRecord | undefined>;
  listApiKeys(): Promise<ApiKeyRecord[]>;
  /** Returns false when no such key was active. */
  revokeApiKey(id: string, at: string): Promise<boolean>;

  recordSignature(record: SignatureRecord): Promise<void>;
  listSignatures(tenantId: string, limit: number): Promise<SignatureRecord[]>;
}
