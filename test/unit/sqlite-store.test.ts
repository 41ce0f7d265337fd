// The Store contract on SQLite (PostgreSQL will run the same cases).
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { KyselyStore } from '../../src/store/kysely-store.js';
import { openSqliteStore } from '../../src/store/sqlite-store.js';
import { ConflictError, type KeyRecord, type SignatureRecord } from '../../src/store/store.js';
import { makeTempDir } from '../helpers/service.js';

let store: KyselyStore;
const dir = makeTempDir();
beforeAll(async () => {
  store = openSqliteStore(join(dir, 'test.db'));
  await store.migrate();
  await store.migrate(); // idempotent
});
afterAll(async () => store?.close());

const key = (id: string, tenantId: string, version = 1): KeyRecord => ({
  id,
  tenantId,
  version,
  keySpec: 'RSA_2048',
  keyRef: `ref-${id}`,
  publicKeyPem: 'pem',
  createdAt: new Date().toISOString(),
});
const sig = (id: string, tenantId = 't1'): SignatureRecord => ({
  id,
  tenantId,
  keyId: 'k1',
  algorithm: 'RSASSA_PKCS1_V1_5_SHA_256',
  hash: 'aGFzaA==',
  caller: 'c',
  createdAt: new Date().toISOString(),
});

describe('SQLite store', () => {
  it('creates tenants atomically and refuses duplicates with ConflictError', async () => {
    await store.createTenant('t1', key('k1', 't1'));
    await expect(store.createTenant('t1', key('k2', 't1'))).rejects.toBeInstanceOf(ConflictError);
    expect(await store.getKey('t1', 'k2')).toBeUndefined();
    expect((await store.getCurrentKey('t1'))?.id).toBe('k1');
    expect(await store.getCurrentKey('nobody')).toBeUndefined();
  });

  it('rotates: numbers versions and moves the current key', async () => {
    const { version: _v, ...next } = key('k3', 't1');
    const rotated = await store.rotateKey('t1', next);
    expect(rotated.version).toBe(2);
    expect((await store.getCurrentKey('t1'))?.id).toBe('k3');
    expect((await store.listKeys('t1')).map((k) => k.id)).toEqual(['k1', 'k3']);
  });

  it('group-commits concurrent signature records, all of them', async () => {
    await Promise.all(Array.from({ length: 150 }, (_, i) => store.recordSignature(sig(`s${i}`))));
    expect(await store.listSignatures('t1', 1000)).toHaveLength(150);
  });

  it('fails every record of a batch that cannot be written, and writes none of them', async () => {
    const results = await Promise.allSettled([
      store.recordSignature(sig('dup', 't2')),
      store.recordSignature(sig('dup', 't2')),
    ]);
    expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected']);
    expect(await store.listSignatures('t2', 10)).toEqual([]);
    await store.recordSignature(sig('after', 't2'));
    expect(await store.listSignatures('t2', 10)).toHaveLength(1);
  });

  it('revokes an API key once', async () => {
    await store.createApiKey({
      id: 'a1',
      secretHash: '00',
      tenantId: null,
      role: 'operator',
      label: '',
      createdAt: new Date().toISOString(),
      revokedAt: null,
    });
    expect(await store.revokeApiKey('a1', new Date().toISOString())).toBe(true);
    expect(await store.revokeApiKey('a1', new Date().toISOString())).toBe(false);
    expect((await store.getApiKey('a1'))?.revokedAt).not.toBeNull();
  });
});
