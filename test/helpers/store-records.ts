// Records for the Store contract tests (SQLite and PostgreSQL): a key version, a signature record, an audit entry,
// an API key.
import type { ApiKeyRecord, AuditEntryInput, KeyRecord, SignatureRecord } from '../../src/store/store.js';

export const keyRecord = (id: string, tenantId: string, version = 1): KeyRecord => ({
  id,
  tenantId,
  version,
  keySpec: 'RSA_2048',
  keyRef: `ref-${id}`,
  publicKeyPem: 'pem',
  createdAt: new Date().toISOString(),
  keyStore: 'pkcs11',
  origin: 'generated',
  materialExpiresAt: null,
});

export const signatureRecord = (id: string, tenantId = 't1'): SignatureRecord => ({
  id,
  tenantId,
  keyId: 'k1',
  algorithm: 'RSASSA_PKCS1_V1_5_SHA_256',
  hash: 'aGFzaA==',
  caller: 'c',
  createdAt: new Date().toISOString(),
});

export const auditEntry = (actor: string, i: number): AuditEntryInput => ({
  at: new Date().toISOString(),
  tenantId: null,
  actor,
  action: 'sign',
  outcome: 'signed',
  details: { i },
});

/** An operator's API key with no tenant; `overrides` for the rest. */
export const apiKeyRecord = (id: string, overrides: Partial<ApiKeyRecord> = {}): ApiKeyRecord => ({
  id,
  secretHash: '00',
  tenantId: null,
  role: 'operator',
  label: '',
  createdAt: new Date().toISOString(),
  revokedAt: null,
  ...overrides,
});
