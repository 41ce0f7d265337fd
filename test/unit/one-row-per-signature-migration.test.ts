// Migration 0030 (issue 46, one row per signature) on a database written by the version before it: a signature's
// hash moves onto its `signed` entry's row (audit_log.signature_sha256) and signatures / signature_lookups are no
// longer written, but keep their rows. An entry from before the migration is still found by its signature (its
// signature_lookups row) and by its digest, one withdrawn before it still is not, and its chain still verifies; a
// new signature is found by the hash on its entry. On PostgreSQL, an instance still on the previous code (v5) keeps
// writing, and what it writes is found too. On SQLite, and on PostgreSQL when the run has a cluster.
import { createHash } from 'node:crypto';
import { type Kysely, sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { type AuditRow, chainAuditRows, entryTexts } from '../../src/store/audit/audit-chain.js';
import { verifyAuditChain } from '../../src/store/audit/verify-chain.js';
import type { AuditEntryInput } from '../../src/store/store.js';
import type { Database } from '../../src/store/tables.js';
import { migrateTo, oldVersionBackends } from '../helpers/old-version-database.js';

const BEFORE = '0029_batch_items';
const sha = (text: string) => createHash('sha256').update(text).digest();
const digestOf = (text: string) => sha(text).toString('base64');

const backends = oldVersionBackends('migration_0030');

const entry = (outcome: 'signed' | 'sign_failed', details: Record<string, unknown>): AuditEntryInput => ({
  at: new Date().toISOString(),
  tenantId: 'acme',
  actor: 'ci',
  action: 'sign',
  outcome,
  details,
});
/** Rows of a table (the signing path's tables: what a new signature may add to). */
async function count(db: Kysely<Database>, table: 'signatures' | 'signature_lookups' | 'audit_log'): Promise<number> {
  const { rows } = await sql<{ n: number | string }>`SELECT count(*) AS n FROM ${sql.table(table)}`.execute(db);
  return Number(rows[0]?.n);
}

describe.each(backends)('migration 0030 on %s', (_name, make) => {
  it('finds entries from before it by their lookup rows, new ones by the hash on the entry; nothing else written', async () => {
    const backend = make();
    // The database as 0029's code left it: entries chained, with their records and lookup rows.
    const old = backend.raw();
    try {
      await migrateTo(old, BEFORE);
      await writeOld(old, [
        { id: 'sig-old', digest: digestOf('old artifact'), signature: 'old signature' },
        // Withdrawn after a key store failure: 0029's code deleted its record (its sign_failed entry follows).
        { id: 'sig-withdrawn', digest: digestOf('withdrawn artifact'), withdrawn: true },
      ]);
    } finally {
      await old.destroy();
    }
    const oldSeq = 1;

    const store = backend.store();
    const raw = backend.raw();
    try {
      await store.migrate();
      // The withdrawal's sign_failed entry, as every withdrawal has written it: after the migration, so that the
      // lookup by digest reads it through audit_log_withdrawn.
      await store.signatures.withdraw(
        'sig-withdrawn',
        entry('sign_failed', { hash: digestOf('withdrawn artifact'), signature_id: 'sig-withdrawn' }),
      );
      expect(await store.audit.seqOfSignature('acme', sha('old signature'))).toBe(oldSeq);
      expect(await store.audit.seqOfDigest('acme', digestOf('old artifact'))).toBe(oldSeq);
      expect(await store.audit.seqOfDigest('acme', digestOf('withdrawn artifact'))).toBeUndefined();

      const rows = { signatures: await count(raw, 'signatures'), lookups: await count(raw, 'signature_lookups') };
      const seq = await store.signatures.recordSigned(
        entry('signed', { hash: digestOf('new artifact'), signature_id: 'sig-new' }),
        sha('new signature'),
      );
      expect(seq).toBe(4);
      expect(await store.audit.seqOfSignature('acme', sha('new signature'))).toBe(seq);
      expect(await store.audit.seqOfDigest('acme', digestOf('new artifact'))).toBe(seq);
      // Another tenant's signature is not found.
      expect(await store.audit.seqOfSignature('other', sha('new signature'))).toBeUndefined();
      expect(await count(raw, 'signatures')).toBe(rows.signatures);
      expect(await count(raw, 'signature_lookups')).toBe(rows.lookups);
      // The hash sits on the entry's own row, outside what is hashed: the chain of old and new entries verifies.
      const onRow = await sql<{ seq: number }>`SELECT seq FROM audit_log WHERE signature_sha256 IS NOT NULL`.execute(
        raw,
      );
      expect(onRow.rows.map((r) => Number(r.seq))).toEqual([seq]);
      expect(await verifyAuditChain(store)).toMatchObject({ count: 4 });
      expect((await verifyAuditChain(store)).problem).toBeUndefined();

      // An entry written ahead of its signature gets the hash by a later commit's UPDATE of its row.
      const ahead = await store.signatures.recordSigned(
        entry('signed', { hash: digestOf('ahead artifact'), signature_id: 'sig-ahead' }),
      );
      expect(await store.audit.seqOfSignature('acme', sha('ahead signature'))).toBeUndefined();
      await store.signatures.recordLookup({ auditSeq: Number(ahead), signatureSha256: sha('ahead signature') });
      await store.signatures.recordSigned(entry('signed', { hash: digestOf('next'), signature_id: 'sig-next' }));
      expect(await store.audit.seqOfSignature('acme', sha('ahead signature'))).toBe(ahead);
      expect(await verifyAuditChain(store)).toEqual(expect.objectContaining({ count: 6 }));

      if (backend.postgres) {
        // An instance still on the previous code during a rolling upgrade: v5 writes a record and a lookup row.
        const texts = entryTexts(entry('signed', { hash: digestOf('older code'), signature_id: 'sig-older' }));
        const first = await sql<{ first: number }>`SELECT signbridge_group_commit_v5(${1}::bigint,
            ${JSON.stringify([{ id: 'sig-older', tenant_id: 'acme', key_id: 'k', algorithm: 'ECDSA_SHA_256', hash: digestOf('older code'), caller: 'ci', created_at: new Date().toISOString() }])}::jsonb,
            ARRAY[]::text[], ${JSON.stringify([{ ...texts.columns, ...texts.parts, lookup_sha256: sha('older code').toString('hex') }])}::jsonb,
            '[]'::jsonb, '[]'::jsonb, '[]'::jsonb, '[]'::jsonb) AS first`.execute(raw);
        const olderSeq = Number(first.rows[0]?.first);
        expect(await store.audit.seqOfSignature('acme', sha('older code'))).toBe(olderSeq);
        expect(await verifyAuditChain(store)).toEqual(expect.objectContaining({ count: 7 }));
      }
    } finally {
      await raw.destroy();
      await store.close();
    }
  });
});

/**
 * Signatures as 0029's code recorded them: each `signed` entry chained on the log (the chain's code did not change),
 * its record unless withdrawn, and its lookup row when the signature was known, as that code's group commit wrote
 * them.
 */
async function writeOld(
  db: Kysely<Database>,
  signatures: Array<{ id: string; digest: string; signature?: string; withdrawn?: boolean }>,
): Promise<void> {
  const rows = chainAuditRows(
    undefined,
    signatures.map((s) => entry('signed', { hash: s.digest, signature_id: s.id })),
  );
  for (const [i, s] of signatures.entries()) {
    const row = rows[i] as AuditRow;
    await db.insertInto('audit_log').values(row).execute();
    if (!s.withdrawn) {
      await db
        .insertInto('signatures')
        .values({
          id: s.id,
          tenant_id: 'acme',
          key_id: 'k',
          algorithm: 'ECDSA_SHA_256',
          hash: s.digest,
          caller: 'ci',
          created_at: row.at,
        })
        .execute();
    }
    if (s.signature !== undefined) {
      await db
        .insertInto('signature_lookups')
        .values({ audit_seq: row.seq, tenant_id: 'acme', signature_sha256: sha(s.signature) })
        .execute();
    }
  }
}
