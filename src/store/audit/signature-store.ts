// Signature records: written through the group commit with their audit entry (group-commit.ts), withdrawn when
// the key store then failed, and the lookup rows from a signature's bytes to its audit entry (migration 0019).
import type { SigningAlgorithm } from '../../crypto/algorithms.js';
import type { BatchItemRow, LookupRow, RequestCompletion, SignatureWithEntry, Write } from '../commit/group-commit.js';
import { outboxRows } from '../events/event-store.js';
import type { AuditEntryInput } from '../records/audit-entry.js';
import type { EventInput } from '../records/event-kinds.js';
import { type StoreContext, StorePart } from '../store-context.js';
import type { Database } from '../tables.js';

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
 * Finds the `signed` audit entry of a signature by the SHA-256 of its raw bytes (migration 0019). Written after the
 * key store returned the signature: with the record when the record follows the signature, else in a later group
 * commit (recordLookup), so a crash can lose the row of a signature already handed out; the lookup by
 * digest (audit.seqOfDigest) reads the audit log itself and still finds the entry.
 */
export interface SignatureLookup {
  auditSeq: number;
  tenantId: string;
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
    tenant_id: l.tenantId,
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
  /** Writes a lookup row with a later commit (recordLookup). */
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
   * Records a signature, with the audit entry and the events (signature.signed) that go with it in the same
   * transaction (group-committed). Resolves to the seq the store assigned to `audit` (undefined without one).
   *
   * Group commit: signature records and audit entries written in the same event-loop turn go to the database in
   * one transaction, so concurrent signing does not pay one commit per signature. Each caller's promise settles
   * only after the batch is durable; if the batch fails, every write in it fails (nothing is handed out
   * unrecorded). A record and the audit entry that goes with it are written in the same transaction, and so is
   * the completion of the held request the signature was made for (`completes`: an approval; needs `audit`).
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
      ...(audit &&
        r.signatureSha256 && {
          lookup: { tenant_id: r.tenantId, signature_sha256: r.signatureSha256.toString('hex') },
        }),
      ...(audit && completes && { completes }),
    });
  }

  /**
   * Records several signatures, each with its `signed` entry (and lookup row), in one transaction with `events` and
   * the held request they complete: all or none. Resolves to the seq of the first entry; the others follow it in
   * order. What an approved batch wrote before issue 46; the signing service now records a batch with recordBatch
   * (one entry), and only test/unit/approval-commit.test.ts still writes this way, to keep the group commit's
   * `records` path (and PostgreSQL's v4) checked while instances on the older code may share a database.
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
          ...(r.signatureSha256 && {
            lookup: { tenant_id: r.tenantId, signature_sha256: r.signatureSha256.toString('hex') },
          }),
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

  /** Deletes a record written ahead for a signature the key store then failed to make, appending `audit`. */
  async withdraw(id: string, audit: AuditEntryInput): Promise<void> {
    await this.writes.enqueue({ withdraw: id, audit });
  }

  /**
   * A tenant's newest records, for tests only: no route or command of the service reads records this way, so no
   * index serves it (migration 0026 dropped signatures_tenant_time) and it scans the whole table.
   */
  async list(tenantId: string, limit: number): Promise<SignatureRecord[]> {
    const rows = await this.db
      .selectFrom('signatures')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .orderBy('created_at', 'desc')
      .limit(limit)
      .execute();
    return rows.map((row) => ({
      id: row.id,
      tenantId: row.tenant_id,
      keyId: row.key_id,
      algorithm: row.algorithm as SigningAlgorithm,
      hash: row.hash,
      caller: row.caller,
      createdAt: row.created_at,
    }));
  }

  /**
   * The lookup row of a signature whose record was written ahead of it. Rides along with a later group commit (no
   * commit of its own under load); callers do not wait for it. Lost if the process ends before that commit.
   */
  recordLookup(lookup: SignatureLookup): Promise<void> {
    return this.writes.recordLookup(lookup);
  }
}
