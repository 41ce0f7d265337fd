// The Store contract on PostgreSQL, with what several instances sharing one database need: one audit chain when
// two stores (two service instances) commit at once, exact compare-and-set on pending requests, one trial count.
// Runs on the run's private cluster (test/global-setup.ts); skipped where PostgreSQL is not installed.
import { setImmediate } from 'node:timers/promises';
import { sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChainVerifier, chainAuditRows } from '../../src/store/audit/audit-chain.js';
import {
  advisoryLockKey,
  openPostgresStore,
  type PostgresStore,
  redactUrl,
} from '../../src/store/postgres/postgres-store.js';
import type { AuditEntry, AuditEntryInput, PendingRequestRecord } from '../../src/store/store.js';
import { ConflictError } from '../../src/store/store.js';
import { createTestDatabase, testPostgresUrl } from '../helpers/postgres.js';
import { apiKeyRecord, auditEntry, keyRecord, signatureRecord } from '../helpers/store-records.js';

const enabled = testPostgresUrl() !== undefined;
let url: string;
let a: PostgresStore;
let b: PostgresStore;

beforeAll(async () => {
  if (!enabled) return;
  url = createTestDatabase('store');
  a = openPostgresStore(url);
  await a.migrate();
  await a.migrate(); // idempotent
  b = openPostgresStore(url); // a second instance on the same database
});
afterAll(async () => {
  await a?.close();
  await b?.close();
});

const key = keyRecord;
const sig = signatureRecord;
const entry = auditEntry;

function walkChain(entries: AuditEntry[]) {
  const verifier = new ChainVerifier();
  const problems = entries.map((e) => verifier.check(e)).filter(Boolean);
  return { problems, verified: verifier.count };
}

describe.skipIf(!enabled)('PostgreSQL store', () => {
  it('names the database without its password', () => {
    expect(redactUrl('postgres://u:secret@db.example:5432/sb?sslmode=require')).toBe(
      'postgres://u:***@db.example:5432/sb?sslmode=require',
    );
    expect(a.description).toMatch(/^postgresql:postgres:\/\/postgres@127\.0\.0\.1:\d+\/store_/);
  });

  it('creates tenants atomically and refuses duplicates from another instance with ConflictError', async () => {
    await a.tenants.create('t1', key('k1', 't1'));
    await expect(b.tenants.create('t1', key('k2', 't1'))).rejects.toBeInstanceOf(ConflictError);
    expect(await b.tenants.getKey('t1', 'k2')).toBeUndefined();
    expect((await b.tenants.currentKey('t1'))?.id).toBe('k1');
  });

  it('rotates on one instance and the other sees the new current key', async () => {
    const { version: _v, ...next } = key('k3', 't1');
    expect((await a.tenants.rotateKey('t1', next)).version).toBe(2);
    expect((await b.tenants.currentKey('t1'))?.id).toBe('k3');
    expect((await b.tenants.listKeys('t1')).map((k) => [k.id, k.keyStore, k.origin])).toEqual([
      ['k1', 'pkcs11', 'generated'],
      ['k3', 'pkcs11', 'generated'],
    ]);
  });

  it('group-commits concurrent signature records with their audit entries, all of them', async () => {
    await Promise.all(Array.from({ length: 150 }, (_, i) => a.signatures.record(sig(`s${i}`), entry('a', i))));
    expect(await b.signatures.list('t1', 1000)).toHaveLength(150);
  });

  it('fails every record of a batch that cannot be written, and writes none of them nor their entries', async () => {
    const before = (await a.stats()).auditEntries;
    const results = await Promise.allSettled([
      a.signatures.record(sig('dup', 't2'), entry('dup', 1)),
      a.signatures.record(sig('dup', 't2'), entry('dup', 2)),
    ]);
    expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected']);
    expect(await a.signatures.list('t2', 10)).toEqual([]);
    expect((await a.stats()).auditEntries).toBe(before);
  });

  it('keeps one chain, without gaps, when two instances append at once', async () => {
    const before = (await a.stats()).auditEntries;
    await Promise.all(
      Array.from({ length: 300 }, (_, i) => [
        a.signatures.record(sig(`ra${i}`, 't3'), entry('a', i)),
        b.signatures.record(sig(`rb${i}`, 't3'), entry('b', i)),
      ]).flat(),
    );
    const all = await a.audit.read(0, 100_000);
    expect(all.length).toBe(before + 600);
    expect(all.map((e) => e.seq)).toEqual(all.map((_, i) => i + 1));
    expect(walkChain(all)).toEqual({ problems: [], verified: all.length });
    expect(await b.signatures.list('t3', 1000)).toHaveLength(600);
  });

  it('hashes in the database exactly as the application does, whatever the entry holds', async () => {
    const [head] = (await a.audit.read(0, 100_000)).slice(-1);
    const tricky: AuditEntryInput[] = [
      { ...entry('ключ 🔑 "quoted" \\ back', 1), tenantId: 'tenant "x"' },
      { ...entry('a', 2), details: { seq: -1, tenant_id: 'not this one', nested: { z: [1, 'two', null] }, nl: '\n' } },
      { ...entry('b', 3), tenantId: null, details: {} },
    ];
    for (const e of tricky) await a.audit.append(e);
    const written = (await b.audit.read(head?.seq ?? 0, 10)).slice(0, 3);
    // The rows the JavaScript chain would have written on the same head: same seqs, same hashes.
    const expected = chainAuditRows(head && { seq: head.seq, hash: head.hash }, tricky);
    expect(written.map((w) => [w.seq, w.prevHash, w.hash])).toEqual(expected.map((r) => [r.seq, r.prev_hash, r.hash]));
    expect(written.map((w) => [w.actor, w.tenantId, w.details])).toEqual(
      tricky.map((t) => [t.actor, t.tenantId, t.details]),
    );
  });

  it('answers API keys and current keys from memory, and sees another instance’s change from its next turn', async () => {
    await a.apiKeys.create(apiKeyRecord('cached', { tenantId: 't1', role: 'signer' }));
    await b.apiKeys.get('cached');
    await b.tenants.currentKey('t1');
    await setImmediate();
    const before = { ...b.cacheStats };
    expect((await b.apiKeys.get('cached'))?.revokedAt).toBeNull();
    expect((await b.tenants.currentKey('t1'))?.id).toBe('k3');
    expect(b.cacheStats).toEqual({ hits: before.hits + 2, misses: before.misses });
    // Revoked and rotated through the other instance: refused and current from b's very next lookup.
    expect(await a.apiKeys.revoke('cached', new Date().toISOString())).toBe(true);
    const { version: _v, ...next } = key('k4', 't1');
    await a.tenants.rotateKey('t1', next);
    expect((await b.apiKeys.get('cached'))?.revokedAt).not.toBeNull();
    expect((await b.tenants.currentKey('t1'))?.id).toBe('k4');
  });

  it('refuses a second successor of an entry (a fork) at the database', async () => {
    const all = await a.audit.read(0, 20);
    const [row] = chainAuditRows({ seq: 10, hash: (all[9] as AuditEntry).hash }, [entry('fork', 0)]);
    await expect(
      sql`INSERT INTO audit_log (seq, at, tenant_id, actor, action, outcome, details, prev_hash, hash)
      VALUES (${row?.seq}, ${row?.at}, ${row?.tenant_id}, ${row?.actor}, ${row?.action}, ${row?.outcome},
              ${row?.details}, ${row?.prev_hash}, ${row?.hash})`.execute(
        // biome-ignore lint/suspicious/noExplicitAny: the raw Kysely instance, for one statement the store never makes
        (a as any).db,
      ),
    ).rejects.toThrow(/duplicate key|unique/i);
  });

  it('lets exactly one of two instances move a pending request on (compare-and-set)', async () => {
    const now = new Date().toISOString();
    const request: PendingRequestRecord = {
      id: '00000000-0000-4000-8000-000000000001',
      tenantId: 't1',
      keyId: 'k3',
      algorithm: 'RSASSA_PKCS1_V1_5_SHA_256',
      hash: 'aGFzaA==',
      inputs: '{}',
      requester: 'r',
      rule: 'rule',
      reason: 'why',
      status: 'pending_approval',
      nextStages: [],
      decisions: [],
      signature: null,
      createdAt: now,
      expiresAt: new Date(Date.now() + 3600_000).toISOString(),
      updatedAt: now,
      continuationKey: null,
    };
    await a.requests.create(request);
    const claims = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        (i % 2 ? a : b).requests.update(request.id, 'pending_approval', { status: 'signing', updatedAt: now }),
      ),
    );
    expect(claims.filter(Boolean)).toHaveLength(1);
    expect((await b.requests.get('t1', request.id))?.status).toBe('signing');
  });

  it('counts trial requests of one address across instances exactly', async () => {
    const now = Date.now();
    const counts = await Promise.all(
      Array.from({ length: 40 }, (_, i) => (i % 2 ? a : b).requestCounts.count('203.0.113.9', now, 3600_000)),
    );
    expect(counts.map((c) => c.count).sort((x, y) => x - y)).toEqual(Array.from({ length: 40 }, (_, i) => i + 1));
  });

  it('proves it can write (the /readyz probe) and revokes an API key once across instances', async () => {
    await a.probeWrite();
    await a.apiKeys.create(apiKeyRecord('a1'));
    const [first, second] = await Promise.all([
      a.apiKeys.revoke('a1', new Date().toISOString()),
      b.apiKeys.revoke('a1', new Date().toISOString()),
    ]);
    expect([first, second].filter(Boolean)).toHaveLength(1);
    expect((await b.apiKeys.get('a1'))?.revokedAt).not.toBeNull();
  });

  it('starts on an up-to-date database without waiting for the migration lock (instances and workers at once)', async () => {
    // Issue 44: every process of a restart (the primary, each request worker) migrated in turn behind this lock,
    // through the Migrator's look at the catalog. Held here by another session, as a migrating instance holds it:
    // a store opening a database that has run every migration reads kysely_migration and goes on. (It waited for
    // the lock before, and this test then ran into its time-out.)
    const holder = new pg.Client({ connectionString: url });
    await holder.connect();
    try {
      await holder.query('SELECT pg_advisory_lock($1)', [advisoryLockKey('signbridge migrations').toString()]);
      const starting = openPostgresStore(url);
      try {
        await starting.migrate();
        expect(await starting.tenants.currentKey('t1')).toBeDefined();
      } finally {
        await starting.close();
      }
    } finally {
      await holder.end();
    }
  });
});
