// The group commit of audit entries (and what rides along with them: their events, the SHA-256 of a signature on
// its `signed` entry, a batch's items): writes made in the same event-loop turn share one transaction. Each dialect commits a
// batch its own way (commitWrites: SQLite with prepared statements, PostgreSQL in one function call); the SQLite
// store may hand writes to a thread of its own instead (sqlite-writer.ts).
import type { OutboxRow } from '../events/event-store.js';
import type { AuditEntryInput } from '../records/audit-entry.js';
import { isUniqueViolation } from '../store-context.js';
import type { Database } from '../tables.js';

/**
 * The SHA-256 of a signature set on its `signed` entry's row (audit_log.signature_sha256, migration 0030; before
 * it, a signature_lookups row): in the entry's INSERT when the signature is known, else by a later UPDATE of the
 * row (an entry written ahead of its signature). The hash in hex: writes cross to the SQLite writer thread, where a
 * Buffer would arrive as a plain Uint8Array. The column is not hashed: the entry's chain hash and log leaf cover
 * its canonical JSON (audit-hash.cjs: hashedFields), so setting it later changes nothing proven.
 */
export interface LookupRow {
  audit_seq: number;
  signature_sha256: string;
}

/** A lookup row that takes the seq of the audit entry at index `audit` of its batch. */
export type LookupOnEntry = Omit<LookupRow, 'audit_seq'> & { audit: number };

/**
 * A batch_items row as a write carries it (migration 0029: one signature of a batch entry; bytes in hex, as for
 * LookupRow), without its batch entry's seq.
 */
export interface BatchItemRow {
  item_index: number;
  digest: string;
  signature_sha256: string;
}

/** A batch item on the seq of the audit entry at index `audit` of its group commit. */
export type BatchItemOnEntry = BatchItemRow & { audit: number };

/**
 * A held request that a write's signature completes (an approval): in the write's transaction it moves from
 * `signing` to `approved` with the signature and the seq of the write's `signed` entry, so that a process killed
 * after the commit leaves it approved, never `signing` with its signature in the log (migration 0027). A request no
 * longer in `signing` is left as it is.
 */
export interface RequestCompletion {
  id: string;
  updated_at: string;
  /** A one-digest request's signature, standard base64 (it takes the seq of the write's first entry). */
  signature?: string;
  /** A held batch's digests and what each got (RequestBatch, each signature on the seq of its entry). */
  batch?: CompletedBatch;
}

/**
 * An approved batch as the store keeps it (records/signing-request.ts: RequestBatch), except that a signed digest
 * names its `signed` entry by its index among the write's entries (`entry`): the store turns it into the entry's seq.
 */
export interface CompletedBatch {
  hashes: string[];
  results: Array<
    | { signature: string; entry: number; signature_id: string }
    | { error: { code: string; message: string; retryable: boolean } }
  >;
}

/**
 * The idempotency record of a request with an `Idempotency-Key` that signed at once (src/api/idempotency.ts),
 * written in the commit of its `signed` entry (migration 0033): no claim or answer of its own (issue 46). `reply`
 * is the answer without its log index, which is the entry's seq - 1 (`log_seq`, set by the commit). A live record of
 * the same key (another instance answered it meanwhile) is left as it is; an expired one, or a claim left in
 * progress by a process that died (`stale_before`, an older release's), is replaced.
 */
export interface IdempotencyRecordRow {
  caller_id: string;
  idem_key: string;
  fingerprint: string;
  reply: string;
  created_at: string;
  /** A record created before this has expired. */
  expired_before: string;
  /** A claim in progress last touched before this was left by a process that died. */
  stale_before: string;
}

/** An idempotency record on the seq of the audit entry at index `audit` of its group commit. */
export type IdempotencyOnEntry = IdempotencyRecordRow & { audit: number };

/** A completion on the seq of the audit entry at index `audit` of its batch: the first of its write's entries. */
export type CompletionOnEntry = RequestCompletion & { audit: number };

/** The pending_requests columns a completion sets, once the seq of its write's first entry is known. */
export interface CompletedRequestRow {
  id: string;
  updated_at: string;
  signature: string | null;
  signed_seq: number | null;
  /** The batch with its results as JSON; null for a one-digest request (the column is left as it is). */
  batch: string | null;
}

export function completedRequestRow({ audit, ...c }: CompletionOnEntry, firstSeq: number): CompletedRequestRow {
  const seq = firstSeq + audit;
  const batch = c.batch && {
    hashes: c.batch.hashes,
    results: c.batch.results.map((r) =>
      'entry' in r ? { signature: r.signature, seq: seq + r.entry, signature_id: r.signature_id } : r,
    ),
  };
  return {
    id: c.id,
    updated_at: c.updated_at,
    signature: c.signature ?? null,
    signed_seq: c.signature !== undefined ? seq : null,
    batch: batch ? JSON.stringify(batch) : null,
  };
}

/**
 * A `signed` entry (with its signature's SHA-256), one of several a write commits together; `signature`: a
 * signatures row, only from SignatureStore.recordRecords (the pre-0030 shape; the signing service writes none).
 */
export interface SignatureWithEntry {
  signature?: Database['signatures'];
  audit: AuditEntryInput;
  lookup?: Omit<LookupRow, 'audit_seq'>;
}

/** Largest group-commit batch; bounds the statement's size and the number of distinct cached statements. */
export const WRITE_BATCH_MAX = 64;
/** Tries of a batch whose chain head another connection took meanwhile. */
export const CHAIN_RACE_ATTEMPTS = 5;

/** One caller's part of a group commit: an audit entry, and what goes with it. */
export interface PendingWrite {
  /**
   * A signatures row: only SignatureStore.record's (the store's contract tests; the signing service writes none
   * since migration 0030: a signature's `signed` entry is its record).
   */
  signature?: Database['signatures'];
  audit?: AuditEntryInput;
  /** Events told of by this write (signature.denied with its audit entry), in the same transaction. */
  events?: OutboxRow[];
  /** The signature's SHA-256, set on this write's audit entry as it is inserted (migration 0030). */
  lookup?: Omit<LookupRow, 'audit_seq'>;
  /** SHA-256s of signatures whose entries were committed earlier (ahead of the signature), riding along. */
  lookups?: LookupRow[];
  /** The signatures a batch entry (`audit`) records, each on the seq of that entry (migration 0029). */
  batchItems?: BatchItemRow[];
  /**
   * Several signatures with their entries, all or none (an approved batch); their entries follow `audit`'s, and
   * the write settles with the seq of its first entry (the others follow it in order).
   */
  records?: SignatureWithEntry[];
  /** The held request this write's signatures complete, on the seqs of this write's audit entries. */
  completes?: RequestCompletion;
  /** The idempotency record of the request this write's `audit` entry answers, on that entry's seq (migration 0033). */
  idempotency?: IdempotencyRecordRow;
  /** Settles with the seq assigned to this write's audit entry (undefined without one). */
  resolve: (seq: number | undefined) => void;
  reject: (err: unknown) => void;
}

/**
 * What one group commit writes, in this order: signatures rows (tests only), then the audit entries chained on,
 * each with its signature's SHA-256 when known, the hashes set on entries committed earlier, and the events and
 * request completions that go with them.
 */
export interface WriteBatch {
  signatures: Database['signatures'][];
  audits: AuditEntryInput[];
  events: OutboxRow[];
  /** Hashes of entries committed earlier (written ahead), and hashes of one of `audits`. */
  lookups: Array<LookupRow | LookupOnEntry>;
  /** Held requests completed by signatures of this batch, each on the seq of one of `audits`. */
  completions: CompletionOnEntry[];
  /** The items of batch entries among `audits`, each on the seq of its entry. */
  batchItems: BatchItemOnEntry[];
  /** The idempotency records of requests answered by entries among `audits`, each on the seq of its entry. */
  idempotency: IdempotencyOnEntry[];
}

export function toWriteBatch(writes: Omit<PendingWrite, 'resolve' | 'reject'>[]): WriteBatch {
  const batch: WriteBatch = {
    signatures: [],
    audits: [],
    events: [],
    lookups: [],
    completions: [],
    batchItems: [],
    idempotency: [],
  };
  for (const w of writes) {
    if (w.events) batch.events.push(...w.events);
    if (w.signature) batch.signatures.push(w.signature);
    if (w.lookups) batch.lookups.push(...w.lookups);
    if (w.completes && entriesOf(w) > 0) batch.completions.push({ ...w.completes, audit: batch.audits.length });
    if (w.audit) {
      if (w.lookup) batch.lookups.push({ ...w.lookup, audit: batch.audits.length });
      for (const item of w.batchItems ?? []) batch.batchItems.push({ ...item, audit: batch.audits.length });
      if (w.idempotency) batch.idempotency.push({ ...w.idempotency, audit: batch.audits.length });
      batch.audits.push(w.audit);
    }
    for (const r of w.records ?? []) {
      if (r.signature) batch.signatures.push(r.signature);
      if (r.lookup) batch.lookups.push({ ...r.lookup, audit: batch.audits.length });
      batch.audits.push(r.audit);
    }
  }
  return batch;
}

/**
 * `lookups` split by when their entry was committed: in this batch (by the entry's index among `audits`: set in its
 * INSERT) or earlier (by seq: set by an UPDATE of its row).
 */
/**
 * Writes an idempotency record in its entry's commit (both dialects, sqlite-writer.cjs has the same): a live record
 * of the key is kept, an expired one or a dead claim replaced (IdempotencyRecordRow).
 */
export const UPSERT_IDEMPOTENCY_SQL =
  'INSERT INTO sign_idempotency (caller_id, idem_key, fingerprint, reply, created_at, updated_at, log_seq) ' +
  'VALUES (@caller_id, @idem_key, @fingerprint, @reply, @created_at, @created_at, @log_seq) ' +
  'ON CONFLICT (caller_id, idem_key) DO UPDATE SET fingerprint = excluded.fingerprint, reply = excluded.reply, ' +
  'created_at = excluded.created_at, updated_at = excluded.updated_at, log_seq = excluded.log_seq ' +
  'WHERE sign_idempotency.created_at < @expired_before ' +
  'OR (sign_idempotency.reply IS NULL AND sign_idempotency.updated_at < @stale_before)';

/** The parameters of UPSERT_IDEMPOTENCY_SQL for a record on the entry with seq `firstSeq + audit`. */
export function idempotencyRow({ audit, ...row }: IdempotencyOnEntry, firstSeq: number) {
  return { ...row, log_seq: firstSeq + audit };
}

export function signatureHashesOf(lookups: WriteBatch['lookups']): {
  onEntry: Map<number, string>;
  later: LookupRow[];
} {
  const onEntry = new Map<number, string>();
  const later: LookupRow[] = [];
  for (const l of lookups) {
    if ('audit' in l) onEntry.set(l.audit, l.signature_sha256);
    else later.push(l);
  }
  return { onEntry, later };
}

/** How many audit entries a write appends: its own and those of its records. */
export function entriesOf(w: Pick<Write, 'audit' | 'records'>): number {
  return (w.audit !== undefined ? 1 : 0) + (w.records?.length ?? 0);
}

/**
 * Settles each write of a committed batch with the seq of its first audit entry: the batch's entries were chained
 * in the writes' order from `firstSeq` on.
 */
export function settleWithSeqs(
  writes: ReadonlyArray<{ entries: number; settle: (seq: number | undefined) => void }>,
  firstSeq: number | undefined,
): void {
  let next = Number(firstSeq);
  for (const w of writes) {
    w.settle(w.entries > 0 && firstSeq !== undefined ? next : undefined);
    next += w.entries;
  }
}

/** A write as a caller hands it in (the queue adds how to settle it). */
export type Write = Omit<PendingWrite, 'resolve' | 'reject'>;

/** Another connection appended to the audit chain between our read of its head and our write. */
function isChainRace(err: unknown): boolean {
  return isUniqueViolation(err) || /^SQLITE_BUSY/.test(String((err as { code?: string })?.code));
}

export class GroupCommit {
  /**
   * `commitWrites` commits one batch in one transaction: the audit entries chained on the log's head, with what
   * goes with them; it resolves to the seq of the batch's first entry.
   */
  constructor(
    private readonly commitWrites: (writes: WriteBatch) => Promise<number | undefined>,
    /**
     * One batch in flight at a time, the next gathering everything that arrives meanwhile (classic group commit).
     * PostgreSQL sets it: its commits wait on the network, an fsync and the audit-chain lock, so starting a
     * transaction every event-loop turn would make many small batches queue on the lock instead of a few large ones.
     * SQLite commits synchronously, so its batches form by themselves.
     */
    private readonly serialFlushes: boolean,
  ) {}

  private readonly pendingWrites: PendingWrite[] = [];
  private flushScheduled = false;
  private flushing = false;

  enqueue(write: Write): Promise<number | undefined> {
    return new Promise((resolve, reject) => {
      this.pendingWrites.push({ ...write, resolve, reject });
      if (!this.flushScheduled && !this.flushing) {
        this.flushScheduled = true;
        setImmediate(() => void this.flushWrites());
      }
    });
  }

  private async flushWrites(): Promise<void> {
    if (this.serialFlushes) {
      this.flushScheduled = false;
      this.flushing = true;
      try {
        while (this.pendingWrites.length > 0) await this.commitBatch(this.pendingWrites.splice(0, WRITE_BATCH_MAX));
      } finally {
        this.flushing = false;
      }
      return;
    }
    const batch = this.pendingWrites.splice(0, WRITE_BATCH_MAX);
    if (this.pendingWrites.length > 0) setImmediate(() => void this.flushWrites());
    else this.flushScheduled = false;
    await this.commitBatch(batch);
  }

  /** Commits one batch and settles its callers' promises; never throws. */
  private async commitBatch(batch: PendingWrite[]): Promise<void> {
    const writes = toWriteBatch(batch);
    for (let attempt = 1; ; attempt++) {
      try {
        const firstSeq = await this.commitWrites(writes);
        settleWithSeqs(
          batch.map((b) => ({ entries: entriesOf(b), settle: b.resolve })),
          firstSeq,
        );
        return;
      } catch (err) {
        // Another process appended to the chain between our read and our write: read the new head, try again.
        if (isChainRace(err) && writes.audits.length > 0 && attempt < CHAIN_RACE_ATTEMPTS) continue;
        for (const b of batch) b.reject(err);
        return;
      }
    }
  }
}
