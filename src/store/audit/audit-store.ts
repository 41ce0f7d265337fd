// The hash-chained audit log: appended through the group commit (group-commit.ts), read in order or a tenant's
// latest, and the lookups from a signature or a digest to its `signed` entry (the transparency log's index).
import { sql } from 'kysely';
import type { Write } from '../commit/group-commit.js';
import { outboxRows } from '../events/event-store.js';
import type { AuditEntry, AuditEntryInputOf } from '../records/audit-entry.js';
import type { AuditAction, AuditOutcome } from '../records/audit-vocabulary.js';
import type { EventInput } from '../records/event-kinds.js';
import { type StoreContext, StorePart } from '../store-context.js';
import type { Database } from '../tables.js';

function toAuditEntry(r: Database['audit_log']): AuditEntry {
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
    return rows.map(toAuditEntry);
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
    return rows.map(toAuditEntry);
  }

  /** The seq of the tenant's latest `signed` entry for the signature whose raw bytes hash to `signatureSha256`. */
  async seqOfSignature(tenantId: string, signatureSha256: Buffer): Promise<number | undefined> {
    const row = await this.db
      .selectFrom('signature_lookups')
      .select('audit_seq')
      .where('signature_sha256', '=', signatureSha256)
      .where('tenant_id', '=', tenantId)
      .orderBy('audit_seq', 'desc')
      .limit(1)
      .executeTakeFirst();
    return row && Number(row.audit_seq);
  }

  /**
   * The seq of the tenant's latest `signed` entry for the digest `digestBase64` (standard base64, as signature
   * records and audit entries hold it), leaving out signatures withdrawn after a key store failure.
   */
  async seqOfDigest(tenantId: string, digestBase64: string): Promise<number | undefined> {
    // The expressions are those of migration 0019's partial index audit_log_signed_digest, so the planner uses it.
    const postgres = this.ctx.postgres;
    const field = (name: string) =>
      postgres ? sql`((a.details)::jsonb ->> ${sql.lit(name)})` : sql`json_extract(a.details, ${sql.lit(`$.${name}`)})`;
    const { rows } = await sql<{ seq: number }>`
      SELECT a.seq FROM audit_log a
       WHERE a.tenant_id = ${tenantId} AND a.outcome = 'signed' AND ${field('hash')} = ${digestBase64}
         AND (${field('signature_id')} IS NULL
              OR EXISTS (SELECT 1 FROM signatures s WHERE s.id = ${field('signature_id')}))
       ORDER BY a.seq DESC LIMIT 1`.execute(this.db);
    return rows[0] && Number(rows[0].seq);
  }
}
