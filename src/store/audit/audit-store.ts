// The hash-chained audit log: appended through the group commit (group-commit.ts), read in order or a tenant's
// latest, and the lookups from a signature or a digest to its `signed` entry (the transparency log's index).
import { sql } from 'kysely';
import type { Write } from '../commit/group-commit.js';
import { outboxRows } from '../events/event-store.js';
import type { AuditEntry, AuditEntryInputOf } from '../records/audit-entry.js';
import type { AuditAction, AuditOutcome } from '../records/audit-vocabulary.js';
import type { EventInput } from '../records/event-kinds.js';
import { type StoreContext, StorePart } from '../store-context.js';
import type { AuditRow } from './audit-chain.js';
import { detailsOfRows, expandAuditRows } from './audit-rows.js';

function toAuditEntry(r: AuditRow): AuditEntry {
  return {
    seq: Number(r.seq),
    at: r.at,
    tenantId: r.tenant_id,
    actor: r.actor,
    // Written through append, so words of the vocabulary, which never loses one (audit-vocabulary.ts).
    action: r.action as AuditAction,
    outcome: r.outcome as AuditOutcome,
    details: JSON.parse(r.details),
    prevHash: r.prev_hash,
    hash: r.hash,
  };
}

export class AuditStore extends StorePart {
  /** Told when entries this process appended were committed (the transparency log's nudge: src/app.ts). */
  onAppended: (() => void) | undefined;

  constructor(
    ctx: StoreContext,
    /** Hands a write to the group commit (or the SQLite store's writer thread). */
    private readonly enqueue: (write: Write) => Promise<number | undefined>,
  ) {
    super(ctx);
  }

  /**
   * Appends to the hash-chained audit log. Entries appended in the same event-loop turn share one transaction
   * (group commit); the promise settles once they are durable, and rejects if they are not. Generic in the action
   * so that an entry written out in place is checked to have an outcome its action has.
   */
  async append<A extends AuditAction>(entry: AuditEntryInputOf<A>, events?: readonly EventInput[]): Promise<void> {
    if (events && events.length > 0) {
      this.ctx.events.onWritten?.();
      await this.enqueue({ audit: entry, events: outboxRows(events, entry.at) });
      return;
    }
    await this.enqueue({ audit: entry });
  }

  /** The log in order, `limit` entries from `afterSeq` on. */
  async read(afterSeq: number, limit: number): Promise<AuditEntry[]> {
    const rows = await this.db
      .selectFrom('audit_log')
      .selectAll()
      .where('seq', '>', afterSeq)
      .orderBy('seq')
      .limit(limit)
      .execute();
    return (await expandAuditRows(this.db, rows)).map(toAuditEntry);
  }

  /** The tenant's `limit` most recent entries, newest first (the web console). */
  async recent(tenantId: string, limit: number): Promise<AuditEntry[]> {
    const rows = await this.db
      .selectFrom('audit_log')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .orderBy('seq', 'desc')
      .limit(limit)
      .execute();
    return (await expandAuditRows(this.db, rows)).map(toAuditEntry);
  }

  /**
   * The seq of the tenant's latest `signed` entry for the signature whose raw bytes hash to `signatureSha256`: the
   * hash on the entry's own row (migration 0030), or an entry from before it (or written meanwhile by an instance on
   * older code) through its signature_lookups row; the later of the two when both (RSA PKCS#1 v1.5 signs the same
   * bytes again). Two indexed reads, the second finding nothing once the table holds only old entries.
   */
  async seqOfSignature(tenantId: string, signatureSha256: Buffer): Promise<number | undefined> {
    const [onEntry, looked] = await Promise.all([
      this.db
        .selectFrom('audit_log')
        .select('seq')
        .where('signature_sha256', '=', signatureSha256)
        .where('tenant_id', '=', tenantId)
        .orderBy('seq', 'desc')
        .limit(1)
        .executeTakeFirst(),
      this.db
        .selectFrom('signature_lookups')
        .select('audit_seq')
        .where('signature_sha256', '=', signatureSha256)
        .where('tenant_id', '=', tenantId)
        .orderBy('audit_seq', 'desc')
        .limit(1)
        .executeTakeFirst(),
    ]);
    const seqs = [onEntry?.seq, looked?.audit_seq].filter((s) => s !== undefined && s !== null).map(Number);
    return seqs.length > 0 ? Math.max(...seqs) : undefined;
  }

  /**
   * The seq of the tenant's latest `signed` entry for the digest `digestBase64` (standard base64, as signature
   * records and audit entries hold it), leaving out signatures withdrawn after a key store failure: an entry that
   * a sign_failed entry names by its signature_id (migration 0030's partial index audit_log_withdrawn finds it; the
   * absence of its signatures row said so before, and every withdrawal has named its signature_id).
   */
  async seqOfDigest(tenantId: string, digestBase64: string): Promise<number | undefined> {
    const [json, packed] = await Promise.all([
      this.seqOfDigestInJson(tenantId, digestBase64),
      this.seqOfDigestPacked(tenantId, digestBase64),
    ]);
    const seqs = [json, packed].filter((s) => s !== undefined);
    return seqs.length > 0 ? Math.max(...seqs) : undefined;
  }

  /** seqOfDigest among entries whose details are JSON (written before migration 0032, or not packed). */
  private async seqOfDigestInJson(tenantId: string, digestBase64: string): Promise<number | undefined> {
    // The expressions are those of migration 0019's partial index audit_log_signed_digest, so the planner uses it.
    const postgres = this.ctx.postgres;
    const field = (name: string) =>
      postgres ? sql`((a.details)::jsonb ->> ${sql.lit(name)})` : sql`json_extract(a.details, ${sql.lit(`$.${name}`)})`;
    const { rows } = await sql<{ seq: number }>`
      SELECT a.seq FROM audit_log a
       WHERE a.tenant_id = ${tenantId} AND a.outcome = 'signed' AND ${field('hash')} = ${digestBase64}
         AND (${field('signature_id')} IS NULL
              OR NOT EXISTS (SELECT 1 FROM audit_log f WHERE f.outcome = 'sign_failed'
                                AND ${this.withdrawnId()} = ${field('signature_id')}))
       ORDER BY a.seq DESC LIMIT 1`.execute(this.db);
    return rows[0] && Number(rows[0].seq);
  }

  /**
   * seqOfDigest among packed entries (migration 0032): found by the first 8 bytes of their digest column
   * (audit_log_packed_digest), the whole digest and the tenant checked on the row, newest first; an entry that a
   * sign_failed entry withdrew is passed over (its signature_id read from its unpacked details).
   */
  private async seqOfDigestPacked(tenantId: string, digestBase64: string): Promise<number | undefined> {
    const digest = Buffer.from(digestBase64, 'base64');
    if (digest.toString('base64') !== digestBase64) return undefined;
    const rows = await this.db
      .selectFrom('audit_log')
      .select(['seq', 'details', 'packed', 'digest', 'signature_sha256'])
      .where(sql`substr(digest, 1, 8)`, '=', digest.subarray(0, 8))
      .where('digest', 'is not', null)
      .where('digest', '=', digest)
      .where('tenant_id', '=', tenantId)
      .where('outcome', '=', 'signed')
      .orderBy('seq', 'desc')
      .execute();
    const details = await detailsOfRows(this.db, rows);
    for (const [n, row] of rows.entries()) {
      const signatureId = (JSON.parse(details[n] as string) as { signature_id?: unknown }).signature_id;
      if (typeof signatureId !== 'string') return Number(row.seq);
      const { rows: withdrawn } = await sql`
        SELECT 1 FROM audit_log f WHERE f.outcome = 'sign_failed' AND ${this.withdrawnId()} = ${signatureId}
         LIMIT 1`.execute(this.db);
      if (withdrawn.length === 0) return Number(row.seq);
    }
    return undefined;
  }

  /** Migration 0030's audit_log_withdrawn expression over `f`, so the planner uses it. */
  private withdrawnId() {
    return this.ctx.postgres
      ? sql`((f.details)::jsonb ->> 'signature_id')`
      : sql`json_extract(f.details, '$.signature_id')`;
  }
}
