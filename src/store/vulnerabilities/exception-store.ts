// Policy exceptions: a tenant's waivers of a vulnerability, until they expire or are revoked, and the sweep that
// warns of their expiry.
import type { Kysely } from 'kysely';
import type { EventInput } from '../records/event-kinds.js';
import { StorePart } from '../store-context.js';
import type { Database } from '../tables.js';

export interface ExceptionRecord {
  id: string;
  tenantId: string;
  vulnId: string;
  project: string | null;
  artifactType: string | null;
  reason: string;
  createdBy: string;
  createdAt: string;
  expiresAt: string;
  revokedAt: string | null;
  revokedBy: string | null;
}

function toException(row: Database['policy_exceptions']): ExceptionRecord {
  return {
    id: row.id,
    tenantId: row.tenant_id,
    vulnId: row.vuln_id,
    project: row.project,
    artifactType: row.artifact_type,
    reason: row.reason,
    createdBy: row.created_by,
    createdAt: row.created_at,
    expiresAt: row.expires_at,
    revokedAt: row.revoked_at,
    revokedBy: row.revoked_by,
  };
}

export class ExceptionStore extends StorePart {
  async create(r: ExceptionRecord, events?: readonly EventInput[]): Promise<void> {
    await this.db.transaction().execute(async (tx) => {
      await this.insert(tx, r);
      await this.ctx.writeEvents(tx, events);
    });
  }

  private async insert(tx: Kysely<Database>, r: ExceptionRecord): Promise<void> {
    await tx
      .insertInto('policy_exceptions')
      .values({
        id: r.id,
        tenant_id: r.tenantId,
        vuln_id: r.vulnId,
        project: r.project,
        artifact_type: r.artifactType,
        reason: r.reason,
        created_by: r.createdBy,
        created_at: r.createdAt,
        expires_at: r.expiresAt,
        revoked_at: r.revokedAt,
        revoked_by: r.revokedBy,
      })
      .execute();
  }

  async list(tenantId: string): Promise<ExceptionRecord[]> {
    const rows = await this.db
      .selectFrom('policy_exceptions')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .orderBy('created_at')
      .execute();
    return rows.map(toException);
  }

  async get(tenantId: string, id: string): Promise<ExceptionRecord | undefined> {
    const row = await this.db
      .selectFrom('policy_exceptions')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .where('id', '=', id)
      .executeTakeFirst();
    return row && toException(row);
  }

  /** Returns false when the exception was already revoked. */
  async revoke(tenantId: string, id: string, at: string, by: string, events?: readonly EventInput[]): Promise<boolean> {
    return this.db.transaction().execute(async (tx) => {
      const result = await tx
        .updateTable('policy_exceptions')
        .set({ revoked_at: at, revoked_by: by })
        .where('tenant_id', '=', tenantId)
        .where('id', '=', id)
        .where('revoked_at', 'is', null)
        .executeTakeFirst();
      const revoked = Number(result.numUpdatedRows) === 1;
      if (revoked) await this.ctx.writeEvents(tx, events);
      return revoked;
    });
  }

  /** Live exceptions not yet warned of that expire after `now` and before `before`. */
  async listToWarn(now: string, before: string, limit: number): Promise<ExceptionRecord[]> {
    const rows = await this.db
      .selectFrom('policy_exceptions')
      .selectAll()
      .where('revoked_at', 'is', null)
      .where('expiry_warned_at', 'is', null)
      .where('expires_at', '>', now)
      .where('expires_at', '<', before)
      .orderBy('expires_at')
      .limit(limit)
      .execute();
    return rows.map(toException);
  }

  /** Marks the exception's expiry warned of, once, writing `events` with the mark; false when it was already. */
  async markWarned(id: string, at: string, events: readonly EventInput[]): Promise<boolean> {
    return this.db.transaction().execute(async (tx) => {
      const result = await tx
        .updateTable('policy_exceptions')
        .set({ expiry_warned_at: at })
        .where('id', '=', id)
        .where('expiry_warned_at', 'is', null)
        .where('revoked_at', 'is', null)
        .executeTakeFirst();
      const marked = Number(result.numUpdatedRows) === 1;
      if (marked) await this.ctx.writeEvents(tx, events);
      return marked;
    });
  }
}
