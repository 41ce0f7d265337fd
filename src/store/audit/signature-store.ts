// A signature's record is its `signed` audit entry (migration 0030, issue 46: one row per signature), written
// through the group commit (group-commit.ts) with its signature's SHA-256 on the entry's row (the lookup key), and
// a batch's items (migration 0029). The signatures and signature_lookups tables keep their rows from before 0030.
import { sql } from 'kysely';
import type { SigningAlgorithm } from '../../crypto/algorithms.js';
import type {
  BatchItemRow,
  IdempotencyRecordRow,
  LookupRow,
  RequestCompletion,
  SignatureWithEntry,
  Write,
} from '../commit/group-commit.js';
import { outboxRows } from '../events/event-store.js';
import type { AuditEntryInput } from '../records/audit-entry.js';
import type { EventInput } from '../records/event-kinds.js';
import { type StoreContext, StorePart } from '../store-context.js';
import type { Database } from '../tables.js';
import { detailsOfRows } from './audit-rows.js';

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
  /**
   * SHA-256 of the raw signature bytes, when the signature exists as the record is written (the store then writes
   * its lookup row in the same transaction, on the seq of the record's audit entry; migration 0019).
   */
  signatureSha256?: Buffer;
}

/**
 * The SHA-256 of a signature's raw bytes on its `signed` entry (audit_log.signature_sha256, migration 0030), for an
 * entry written ahead of the signature: set by a later group commit (recordLookup), so a crash can lose the hash of
 * a signature already handed out; the lookup by digest (audit.seqOfDigest) reads the entry itself and still finds it.
 */
export interface SignatureLookup {
  auditSeq: number;
  signatureSha256: Buffer;
}

function signatureRow(r: SignatureRecord): Database['signatures'] {
  return {
    id: r.id,
    tenant_id: r.tenantId,
    key_id: r.keyId,
    algorithm: r.algorithm,
    hash: r.hash,
    caller: r.caller,
    created_at: r.createdAt,
  };
}

export function lookupRowOf(l: SignatureLookup): LookupRow {
  return {
    audit_seq: l.auditSeq,
    signature_sha256: l.signatureSha256.toString('hex'),
  };
}

/** One signature of a batch entry (migration 0029): its index in the request, the digest, the signature's hash. */
export interface BatchItemRecord {
  index: number;
  digest: Buffer;
  signatureSha256: Buffer;
}

/** How the store commits signature records: the group commit on the event loop, or the SQLite writer thread. */
export interface SignatureWrites {
  /** Hands a write to the group commit (or the writer thread). */
  enqueue(write: Write): Promise<number | undefined>;
  /** Sets a signature's hash on its entry with a later commit (recordLookup). */
  recordLookup(lookup: SignatureLookup): Promise<void>;
  /** Whether the writes are committed on a thread of the store's own (writesOnThread). */
  onThread(): boolean;
}

export class SignatureStore extends StorePart {
  constructor(
    ctx: StoreContext,
    private readonly writes: SignatureWrites,
  ) {
    super(ctx);
  }

  /**
   * True when signature records and audit entries are committed on a thread of the store's own: a write handed
   * over proceeds while the event loop works (the signing path then writes ahead of the signature).
   */
  get writesOnThread(): boolean {
    return this.writes.onThread();
  }

  /**
   * Records a signature made at once: its `signed` entry `audit` (details.signature_id, key, algorithm, digest) is
   * its record, with the signature's SHA-256 on the entry's row when known (`signatureSha256`; else recordLookup
   * sets it later), the events (signature.signed), the held request it completes (`completes`: an approval) and the
   * idempotency record of the request it answers (`idempotency`, src/api/idempotency.ts), all
   * in one transaction. Resolves to the entry's seq. Nothing else is written (issue 46: one row per signature).
   *
   * Group commit: entries written in the same event-loop turn go to the database in one transaction, so concurrent
   * signing does not pay one commit per signature. Each caller's promise settles only after the batch is durable;
   * if the batch fails, every write in it fails (nothing is handed out unrecorded).
   */
  recordSigned(
    audit: AuditEntryInput,
    signatureSha256?: Buffer,
    events?: readonly EventInput[],
    completes?: RequestCompletion,
    idempotency?: IdempotencyRecordRow,
  ): Promise<number | undefined> {
    const told = events && events.length > 0 ? outboxRows(events, audit.at) : undefined;
    if (told) this.ctx.events.onWritten?.();
    return this.writes.enqueue({
      ...(told && { events: told }),
      audit,
      ...(signatureSha256 && { lookup: { signature_sha256: signatureSha256.toString('hex') } }),
      ...(completes && { completes }),
      ...(idempotency && { idempotency }),
    });
  }

  /**
   * A signatures row (with the audit entry, events and completion that go with it, group-committed): the shape
   * before migration 0030, which the signing service no longer writes (recordSigned). Kept for the store's contract
   * tests of the group commit (a row's unique id fails its batch) and for tables moved from an older database.
   */
  record(
    r: SignatureRecord,
    audit?: AuditEntryInput,
    events?: readonly EventInput[],
    completes?: RequestCompletion,
  ): Promise<number | undefined> {
    const told = events && events.length > 0 ? outboxRows(events, r.createdAt) : undefined;
    if (told) this.ctx.events.onWritten?.();
    return this.writes.enqueue({
      ...(told && { events: told }),
      signature: signatureRow(r),
      ...(audit && { audit }),
      ...(audit && r.signatureSha256 && { lookup: { signature_sha256: r.signatureSha256.toString('hex') } }),
      ...(audit && completes && { completes }),
    });
  }

  /**
   * Records several signatures, each with its `signed` entry (and lookup row), in one transaction with `events` and
   * the held request they complete: all or none. Resolves to the seq of the first entry; the others follow it in
   * order. What an approved batch wrote before issue 46; the signing service now records a batch with recordBatch
   * (one entry), and only test/unit/approval-commit.test.ts still writes this way, to keep the group commit's
   * `records` path checked.
   */
  recordAll(
    signed: ReadonlyArray<{ record: SignatureRecord; audit: AuditEntryInput }>,
    events: readonly EventInput[],
    completes: RequestCompletion,
  ): Promise<number | undefined> {
    const told = events.length > 0 ? outboxRows(events, completes.updated_at) : undefined;
    if (told) this.ctx.events.onWritten?.();
    return this.writes.enqueue({
      ...(told && { events: told }),
      records: signed.map(
        ({ record: r, audit }): SignatureWithEntry => ({
          signature: signatureRow(r),
          audit,
          ...(r.signatureSha256 && { lookup: { signature_sha256: r.signatureSha256.toString('hex') } }),
        }),
      ),
      completes,
    });
  }

  /**
   * Records a batch of signatures as one `signed` entry (`audit`, whose details carry the items' Merkle root) with
   * its items (batch_items, on the entry's seq), the events that go with them and, for an approved held batch, the
   * request they complete: one transaction, all or none. No signature record and no lookup row: the entry is the
   * batch's record and the items are its signatures (docs/transparency.md, "A batch's items"). Resolves to the
   * entry's seq.
   */
  recordBatch(
    audit: AuditEntryInput,
    items: readonly BatchItemRecord[],
    events: readonly EventInput[],
    completes?: RequestCompletion,
    idempotency?: IdempotencyRecordRow,
  ): Promise<number | undefined> {
    const told = events.length > 0 ? outboxRows(events, audit.at) : undefined;
    if (told) this.ctx.events.onWritten?.();
    return this.writes.enqueue({
      ...(told && { events: told }),
      audit,
      batchItems: items.map(
        (item): BatchItemRow => ({
          item_index: item.index,
          digest: item.digest.toString('hex'),
          signature_sha256: item.signatureSha256.toString('hex'),
        }),
      ),
      ...(completes && { completes }),
      ...(idempotency && { idempotency }),
    });
  }

  /**
   * The batch item of the tenant's latest batch entry that holds the signature with this SHA-256 (its entry's seq
   * and its index in the request), or undefined.
   */
  async batchItemOfSignature(
    tenantId: string,
    signatureSha256: Buffer,
  ): Promise<{ seq: number; index: number } | undefined> {
    const row = await this.db
      .selectFrom('batch_items as b')
      .innerJoin('audit_log as a', 'a.seq', 'b.batch_seq')
      .select(['b.batch_seq', 'b.item_index'])
      .where('b.signature_sha256', '=', signatureSha256)
      .where('a.tenant_id', '=', tenantId)
      .orderBy('b.batch_seq', 'desc')
      .limit(1)
      .executeTakeFirst();
    return row && { seq: Number(row.batch_seq), index: Number(row.item_index) };
  }

  /** The items of the batch entry `seq`, in leaf order (by index); empty for an entry that is no batch's. */
  async batchItems(seq: number): Promise<BatchItemRecord[]> {
    const rows = await this.db
      .selectFrom('batch_items')
      .select(['item_index', 'digest', 'signature_sha256'])
      .where('batch_seq', '=', seq)
      .orderBy('item_index')
      .execute();
    return rows.map((r) => ({
      index: Number(r.item_index),
      digest: Buffer.from(r.digest),
      signatureSha256: Buffer.from(r.signature_sha256),
    }));
  }

  /**
   * Withdraws an entry written ahead for a signature the key store then failed to make: appends `audit`, the
   * sign_failed entry naming its signature_id, through the same queue, so it follows the entry in the log. Nothing
   * is deleted (since migration 0030 there is no signatures row): that sign_failed entry is the withdrawal's record,
   * and the lookups leave the `signed` entry it names out (audit.seqOfDigest, list).
   */
  async withdraw(_id: string, audit: AuditEntryInput): Promise<void> {
    await this.writes.enqueue({ audit });
  }

  /**
   * A tenant's newest signature records, for tests only: its `signed` entries of signatures made one at a time that
   * no sign_failed entry withdrew (since migration 0030 the entry is the record), and the signatures rows from before
   * (SignatureStore.record's). No route or command of the service reads records this way, so no index serves it.
   */
  async list(tenantId: string, limit: number): Promise<SignatureRecord[]> {
    const postgres = this.ctx.postgres;
    const field = (alias: string, name: string) =>
      postgres
        ? sql`((${sql.ref(`${alias}.details`)})::jsonb ->> ${sql.lit(name)})`
        : sql`json_extract(${sql.ref(`${alias}.details`)}, ${sql.lit(`$.${name}`)})`;
    const { rows: entries } = await sql<{
      id: string;
      key_id: string;
      algorithm: string;
      hash: string;
      actor: string;
      at: string;
    }>`
      SELECT ${field('a', 'signature_id')} AS id, ${field('a', 'key_id')} AS key_id,
             ${field('a', 'algorithm')} AS algorithm, ${field('a', 'hash')} AS hash, a.actor, a.at
        FROM audit_log a
       WHERE a.tenant_id = ${tenantId} AND a.outcome = 'signed' AND ${field('a', 'signature_id')} IS NOT NULL
         AND ${field('a', 'batch')} IS NULL
         AND NOT EXISTS (SELECT 1 FROM audit_log f WHERE f.outcome = 'sign_failed'
                            AND ${field('f', 'signature_id')} = ${field('a', 'signature_id')})
         AND NOT EXISTS (SELECT 1 FROM signatures s WHERE s.id = ${field('a', 'signature_id')})
       ORDER BY a.seq DESC LIMIT ${limit}`.execute(this.db);
    const packed = await this.packedRecords(tenantId, limit);
    const rows = await this.db
      .selectFrom('signatures')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .orderBy('created_at', 'desc')
      .limit(limit)
      .execute();
    const records = [
      ...entries.map((e) => ({
        id: e.id,
        tenantId,
        keyId: e.key_id,
        algorithm: e.algorithm as SigningAlgorithm,
        hash: e.hash,
        caller: e.actor,
        createdAt: e.at,
      })),
      ...packed,
      ...rows.map((row) => ({
        id: row.id,
        tenantId: row.tenant_id,
        keyId: row.key_id,
        algorithm: row.algorithm as SigningAlgorithm,
        hash: row.hash,
        caller: row.caller,
        createdAt: row.created_at,
      })),
    ];
    return records.sort((x, y) => (x.createdAt < y.createdAt ? 1 : x.createdAt > y.createdAt ? -1 : 0)).slice(0, limit);
  }

  /**
   * list's records among packed entries (migration 0032: their details are not JSON in the row): the newest `limit`
   * of the tenant's packed `signed` entries of one signature, unpacked, less those withdrawn or with a signatures row.
   */
  private async packedRecords(tenantId: string, limit: number): Promise<SignatureRecord[]> {
    const rows = await this.db
      .selectFrom('audit_log')
      .select(['seq', 'at', 'actor', 'details', 'packed', 'digest', 'signature_sha256'])
      .where('tenant_id', '=', tenantId)
      .where('outcome', '=', 'signed')
      .where('packed', 'is not', null)
      .orderBy('seq', 'desc')
      .execute();
    const details = await detailsOfRows(this.db, rows);
    const withdrawnId = this.ctx.postgres
      ? sql`((details)::jsonb ->> 'signature_id')`
      : sql`json_extract(details, '$.signature_id')`;
    const records: SignatureRecord[] = [];
    for (const [n, row] of rows.entries()) {
      if (records.length >= limit) break;
      const d = JSON.parse(details[n] as string) as Record<string, unknown>;
      if (typeof d.signature_id !== 'string' || d.batch !== undefined) continue;
      const { rows: withdrawn } = await sql`
        SELECT 1 FROM audit_log WHERE outcome = 'sign_failed' AND ${withdrawnId} = ${d.signature_id}
        UNION ALL SELECT 1 FROM signatures WHERE id = ${d.signature_id}`.execute(this.db);
      if (withdrawn.length > 0) continue;
      records.push({
        id: d.signature_id,
        tenantId,
        keyId: d.key_id as string,
        algorithm: d.algorithm as SigningAlgorithm,
        hash: d.hash as string,
        caller: row.actor,
        createdAt: row.at,
      });
    }
    return records;
  }

  /**
   * The SHA-256 of a signature whose entry was written ahead of it, set on that entry's row by a later group commit
   * (riding along, no commit of its own under load); callers do not wait for it. Lost if the process ends before
   * that commit: the entry is then found by its digest only.
   */
  recordLookup(lookup: SignatureLookup): Promise<void> {
    return this.writes.recordLookup(lookup);
  }
}
