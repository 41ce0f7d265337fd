// Migration 0026 (issue 34, bytes per signature) on a database written by the version before it: the lookup rows
// lose signature_id (which their `signed` entries hold), the signature records their unused (tenant, time) index,
// a signature looked up by its bytes' SHA-256 is still
// found, and new signatures get lookup rows (on PostgreSQL through the replaced group-commit function, which an
// instance still running the previous code also calls: its signature_id is ignored). On SQLite, and on PostgreSQL
// when the run has a cluster.
import { createHash } from 'node:crypto';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { migrateTo, oldVersionBackends } from '../helpers/old-version-database.js';

const BEFORE = '0025_batch_requests';
const sha = (text: string) => createHash('sha256').update(text).digest();

const backends = oldVersionBackends('migration_0026');

describe.each(backends)('migration 0026 on %s', (_name, make) => {
  it('drops the lookup rows’ signature_id; old rows are still found, new ones still written', async () => {
    const backend = make();
    const old = backend.raw();
    await migrateTo(old, BEFORE);
    // A lookup row as the previous version wrote it, with its signature_id.
    await sql`INSERT INTO signature_lookups (audit_seq, tenant_id, signature_sha256, signature_id)
              VALUES (7, 'acme', ${sha('old signature')}, 'sig-old')`.execute(old);
    await old.destroy();

    const store = backend.store();
    const raw = backend.raw();
    try {
      await store.migrate();
      const columns = await sql<{ name: string }>`${
        backend.postgres
          ? sql`SELECT column_name AS name FROM information_schema.columns WHERE table_name = 'signature_lookups'`
          : sql`SELECT name FROM pragma_table_info('signature_lookups')`
      }`.execute(raw);
      expect(columns.rows.map((r) => r.name).sort()).toEqual(['audit_seq', 'signature_sha256', 'tenant_id']);
      const indexes = await sql<{ name: string }>`${
        backend.postgres
          ? sql`SELECT indexname AS name FROM pg_indexes WHERE tablename = 'signatures'`
          : sql`SELECT name FROM pragma_index_list('signatures')`
      }`.execute(raw);
      expect(indexes.rows.map((r) => r.name)).not.toContain('signatures_tenant_time');
      expect(indexes.rows.length).toBeGreaterThan(0); // the primary key's
      expect(await store.audit.seqOfSignature('acme', sha('old signature'))).toBe(7);

      // A new signature, its record and its entry with the lookup row, as the signing path writes them.
      const at = new Date().toISOString();
      const seq = await store.signatures.record(
        {
          id: 'sig-new',
          tenantId: 'acme',
          keyId: 'k',
          algorithm: 'ECDSA_SHA_256',
          hash: sha('artifact').toString('base64'),
          caller: 'ci',
          createdAt: at,
          signatureSha256: sha('new signature'),
        },
        { at, tenantId: 'acme', actor: 'ci', action: 'sign', outcome: 'signed', details: { signature_id: 'sig-new' } },
      );
      expect(typeof seq).toBe('number');
      expect(await store.audit.seqOfSignature('acme', sha('new signature'))).toBe(seq);

      if (backend.postgres) {
        // An instance still on the previous code sends lookups with signature_id to the same function.
        await sql`SELECT signbridge_group_commit_v2(${1}::bigint, '[]'::jsonb, ARRAY[]::text[], '[]'::jsonb,
                  ${JSON.stringify([{ audit_seq: 9, tenant_id: 'acme', signature_sha256: sha('older code').toString('hex'), signature_id: 'sig-x' }])}::jsonb)`.execute(
          raw,
        );
        expect(await store.audit.seqOfSignature('acme', sha('older code'))).toBe(9);
      }
    } finally {
      await raw.destroy();
      await store.close();
    }
  });
});
