// Migration 0032 (issue 46, bytes kept per signature) on a SQLite database written by the code before it: its rows
// stay as they were and are read as before, rows written since are compact (hash as bytes, no prev_hash, a `signed`
// entry's details packed), and the log of both verifies as one chain: every entry read back is the very canonical
// entry that was hashed, the transparency log integrates them all (its leaves are those texts), and the lookups by
// digest and by signature find old and new entries alike.
import { createHash } from 'node:crypto';
import { Kysely, Migrator, SqliteDialect, sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { chainAuditRows, leafJson } from '../../src/store/audit/audit-chain.js';
import { verifyAuditChain } from '../../src/store/audit/verify-chain.js';
import { MIGRATIONS } from '../../src/store/migrations.js';
import { openSqlite } from '../../src/store/sqlite/sqlite-driver.js';
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { AuditEntryInput } from '../../src/store/store.js';
import type { Database } from '../../src/store/tables.js';
import { planIntegration } from '../../src/transparency/log-integrator.js';
import { makeTempDir } from '../helpers/service.js';

const sha = (text: string) => createHash('sha256').update(text).digest();
const digestOf = (text: string) => sha(text).toString('base64');
const uuid = (n: number) => `0190a1b2-c3d4-7e5f-8a9b-${n.toString(16).padStart(12, '0')}`;

const entry = (outcome: 'signed' | 'sign_failed', details: Record<string, unknown>): AuditEntryInput => ({
  at: new Date().toISOString(),
  tenantId: 'acme',
  actor: 'k_ci',
  action: 'sign',
  outcome,
  details,
});
const signedDetails = (name: string, n: number) => ({
  key_id: 'k_p256',
  key_store: 'pkcs11',
  algorithm: 'ECDSA_SHA_256',
  hash: digestOf(name),
  rule: 'default',
  reason: 'no rule denied it',
  inputs_digest: sha(`inputs ${n}`).toString('hex'),
  via: { door: 'v1', action: 'sign' },
  signature_id: uuid(n),
});

describe('migration 0032 on SQLite', () => {
  it('reads old rows as before and new compact rows as the entries hashed; one chain, one log', async () => {
    const path = `${makeTempDir()}/old.db`;
    const old = new Kysely<Database>({ dialect: new SqliteDialect({ database: openSqlite(path) }) });
    const provider = { getMigrations: async () => MIGRATIONS };
    const oldEntries = [
      entry('signed', { ...signedDetails('old artifact', 1), signature_sha256: sha('old signature').toString('hex') }),
      entry('signed', signedDetails('old ahead', 2)),
    ];
    try {
      expect((await new Migrator({ db: old, provider }).migrateTo('0031_batch_events_from_log')).error).toBeUndefined();
      // As the code before wrote them: hashes in hex, prev_hash, details as canonical JSON, the signature's hash.
      const rows = chainAuditRows(undefined, oldEntries);
      await old
        .insertInto('audit_log')
        .values(rows.map((r, i) => ({ ...r, signature_sha256: i === 0 ? sha('old signature') : null })))
        .execute();
    } finally {
      await old.destroy();
    }

    const store = openSqliteStore(path);
    const raw = new Kysely<Database>({ dialect: new SqliteDialect({ database: openSqlite(path) }) });
    try {
      await store.migrate();
      const newEntries = [
        entry('signed', {
          ...signedDetails('new artifact', 3),
          signature_sha256: sha('new signature').toString('hex'),
        }),
        entry('signed', { ...signedDetails('withdrawn artifact', 4) }),
        entry('sign_failed', { signature_id: uuid(4), hash: digestOf('withdrawn artifact'), error: 'token gone' }),
        entry('signed', { ...signedDetails('held artifact', 5), request_id: 'req_1', approvals: [{ by: 'person:a' }] }),
      ];
      const newSeq = await store.signatures.recordSigned(newEntries[0] as AuditEntryInput, sha('new signature'));
      for (const e of newEntries.slice(1)) await store.audit.append(e);
      expect(newSeq).toBe(3);

      // Old rows untouched; new ones compact.
      const stored = await raw
        .selectFrom('audit_log')
        .select(['seq', 'details', 'prev_hash', 'hash', 'packed', 'digest'])
        .orderBy('seq')
        .execute();
      expect(stored.map((r) => typeof r.hash)).toEqual(['string', 'string', 'object', 'object', 'object', 'object']);
      expect(stored.map((r) => r.prev_hash === '')).toEqual([false, false, true, true, true, true]);
      expect(stored.map((r) => r.details === '0')).toEqual([false, false, true, true, false, true]);
      expect(Buffer.from(stored[2]?.digest as Buffer).toString('base64')).toBe(digestOf('new artifact'));

      // Every entry read back is the entry hashed: its leaf text is the one computed from what was appended.
      const all = [...oldEntries, ...newEntries];
      const read = await store.audit.read(0, 100);
      expect(read.map((e) => leafJson(e.seq, e))).toEqual(all.map((e, i) => leafJson(i + 1, e)));
      const head = chainAuditRows(undefined, all).at(-1)?.hash;
      expect(await verifyAuditChain(store)).toEqual({ count: 6, head });
      // A page that starts after a compact row takes its prev_hash from the row before it.
      expect((await store.audit.read(3, 1))[0]?.prevHash).toBe(read[2]?.hash);
      expect((await store.audit.recent('acme', 2)).map((e) => e.prevHash)).toEqual([read[4]?.hash, read[3]?.hash]);

      // The transparency log integrates old and new rows alike, up to the same chain head.
      const plan = await planIntegration(store.log, 100, 100);
      expect(plan?.to).toEqual({ treeSize: 6, chainHash: head });
      expect((await store.log.auditRow(4))?.prev_hash).toBe(read[2]?.hash);

      // The lookups: old and new by digest and by signature, the withdrawn one not at all.
      expect(await store.audit.seqOfDigest('acme', digestOf('old artifact'))).toBe(1);
      expect(await store.audit.seqOfDigest('acme', digestOf('new artifact'))).toBe(3);
      expect(await store.audit.seqOfDigest('acme', digestOf('held artifact'))).toBe(6);
      expect(await store.audit.seqOfDigest('acme', digestOf('withdrawn artifact'))).toBeUndefined();
      expect(await store.audit.seqOfDigest('other', digestOf('new artifact'))).toBeUndefined();
      expect(await store.audit.seqOfSignature('acme', sha('old signature'))).toBe(1);
      expect(await store.audit.seqOfSignature('acme', sha('new signature'))).toBe(3);
      const listed = (await store.signatures.list('acme', 10)).map((r) => r.id);
      expect(listed.sort()).toEqual([uuid(1), uuid(2), uuid(3), uuid(5)]);

      // An edit of a compact row is found as before: its details overwritten with JSON break its hash.
      await sql`UPDATE audit_log SET details = ${'{"hash":"forged"}'} WHERE seq = 3`.execute(raw);
      expect((await verifyAuditChain(store)).problem).toEqual({
        seq: 3,
        problem: 'content does not match its hash (edited)',
      });
    } finally {
      await raw.destroy();
      await store.close();
    }
  });
});
