// Signing requests that wait for a decision (the approval workflow): opened, continued by a retry, decided
// compare-and-set, reminded of, and listed for the expiry sweep.
import type { Kysely } from 'kysely';
import type { SigningAlgorithm } from '../../crypto/algorithms.js';
import type { EventInput } from '../records/event-kinds.js';
import {
  PENDING_STATUSES,
  type PendingRequestRecord,
  type RequestBatch,
  type RequestStatus,
  WAITING_STATUSES,
} from '../records/signing-request.js';
import { isUniqueViolation, StorePart } from '../store-context.js';
import { ConflictError } from '../store-errors.js';
import type { Database } from '../tables.js';

function toPending(row: Database['pending_requests']): PendingRequestRecord {
  return {
    id: row.id,
    tenantId: row.tenant_id,
    keyId: row.key_id,
    algorithm: row.algorithm as SigningAlgorithm,
    hash: row.hash,
    inputs: row.inputs,
    requester: row.requester,
    rule: row.rule,
    reason: row.reason,
    status: row.status as RequestStatus,
    nextStages: JSON.parse(row.next_stages),
    decisions: JSON.parse(row.decisions),
    signature: row.signature,
    createdAt: row.created_at,
    expiresAt: row.expires_at,
    updatedAt: row.updated_at,
    continuationKey: row.continuation_key,
    signedSeq: row.signed_seq == null ? null : Number(row.signed_seq),
    batch: row.batch == null ? null : (JSON.parse(row.batch) as RequestBatch),
    via: row.via == null ? null : (JSON.parse(row.via) as Record<string, string>),
    pssSaltLength: row.pss_salt_length == null ? null : Number(row.pss_salt_length),
  };
}

export class SigningRequestStore extends StorePart {
  /** ConflictError when a request with the same continuation key is still waiting (WAITING_STATUSES). */
  async create(r: PendingRequestRecord, events?: readonly EventInput[]): Promise<void> {
    try {
      await this.db.transaction().execute(async (tx) => {
        await this.insert(tx, r);
        await this.ctx.writeEvents(tx, events);
      });
    } catch (err) {
      if (isUniqueViolation(err)) throw new ConflictError(`a request with continuation key ${r.continuationKey} waits`);
      throw err;
    }
  }

  /**
   * The tenant's newest request with this continuation key that still waits, or was rejected or approved at or
   * after `decidedSince` (null: waiting ones only). What a retry continues.
   */
  async findContinuable(
    tenantId: string,
    continuationKey: string,
    decidedSince: string | null,
  ): Promise<PendingRequestRecord | undefined> {
    const row = await this.db
      .selectFrom('pending_requests')
      .selectAll()
      .where('continuation_key', '=', continuationKey)
      .where('tenant_id', '=', tenantId)
      .where((eb) =>
        decidedSince === null
          ? eb('status', 'in', WAITING_STATUSES)
          : eb.or([
              eb('status', 'in', WAITING_STATUSES),
              eb.and([eb('status', 'in', ['rejected', 'approved']), eb('updated_at', '>=', decidedSince)]),
            ]),
      )
      .orderBy('created_at', 'desc')
      .limit(1)
      .executeTakeFirst();
    return row && toPending(row);
  }

  private async insert(tx: Kysely<Database>, r: PendingRequestRecord): Promise<void> {
    await tx
      .insertInto('pending_requests')
      .values({
        id: r.id,
        tenant_id: r.tenantId,
        key_id: r.keyId,
        algorithm: r.algorithm,
        hash: r.hash,
        inputs: r.inputs,
        requester: r.requester,
        rule: r.rule,
        reason: r.reason,
        status: r.status,
        next_stages: JSON.stringify(r.nextStages),
        decisions: JSON.stringify(r.decisions),
        signature: r.signature,
        created_at: r.createdAt,
        expires_at: r.expiresAt,
        updated_at: r.updatedAt,
        continuation_key: r.continuationKey,
        ...(r.batch && { batch: JSON.stringify(r.batch) }),
        ...(r.via && { via: JSON.stringify(r.via) }),
        ...(r.pssSaltLength != null && { pss_salt_length: r.pssSaltLength }),
      })
      .execute();
  }

  /** The tenant's requests still waiting for a decision (pending statuses), oldest first (the web console). */
  async listPending(tenantId: string): Promise<PendingRequestRecord[]> {
    const rows = await this.db
      .selectFrom('pending_requests')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .where('status', 'in', PENDING_STATUSES)
      .orderBy('created_at')
      .execute();
    return rows.map(toPending);
  }

  async get(tenantId: string, id: string): Promise<PendingRequestRecord | undefined> {
    const row = await this.db
      .selectFrom('pending_requests')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .where('id', '=', id)
      .executeTakeFirst();
    return row && toPending(row);
  }

  /**
   * Compare-and-set: applies `changes` only if the request's status is still `from`. Returns whether it did;
   * of two racing approvals exactly one wins.
   */
  async update(
    id: string,
    from: RequestStatus,
    changes: Partial<
      Pick<
        PendingRequestRecord,
        'status' | 'nextStages' | 'decisions' | 'signature' | 'updatedAt' | 'signedSeq' | 'batch'
      >
    >,
    events?: readonly EventInput[],
  ): Promise<boolean> {
    if (!events || events.length === 0) return this.updateIn(this.db, id, from, changes);
    return this.db.transaction().execute(async (tx) => {
      const updated = await this.updateIn(tx, id, from, changes);
      if (updated) await this.ctx.writeEvents(tx, events);
      return updated;
    });
  }

  private async updateIn(
    db: Kysely<Database>,
    id: string,
    from: RequestStatus,
    changes: Partial<
      Pick<
        PendingRequestRecord,
        'status' | 'nextStages' | 'decisions' | 'signature' | 'updatedAt' | 'signedSeq' | 'batch'
      >
    >,
  ): Promise<boolean> {
    const result = await db
      .updateTable('pending_requests')
      .set({
        ...(changes.status !== undefined && { status: changes.status }),
        ...(changes.nextStages !== undefined && { next_stages: JSON.stringify(changes.nextStages) }),
        ...(changes.decisions !== undefined && { decisions: JSON.stringify(changes.decisions) }),
        ...(changes.signature !== undefined && { signature: changes.signature }),
        ...(changes.updatedAt !== undefined && { updated_at: changes.updatedAt }),
        ...(changes.signedSeq !== undefined && { signed_seq: changes.signedSeq }),
        ...(changes.batch !== undefined && { batch: changes.batch && JSON.stringify(changes.batch) }),
      })
      .where('id', '=', id)
      .where('status', '=', from)
      .executeTakeFirst();
    return Number(result.numUpdatedRows) === 1;
  }

  /** Waiting requests whose expiry is before `before`, oldest first (the event sweep expires them). */
  async listWaitingExpiringBefore(before: string, limit: number): Promise<PendingRequestRecord[]> {
    const rows = await this.db
      .selectFrom('pending_requests')
      .selectAll()
      .where('status', 'in', PENDING_STATUSES)
      .where('expires_at', '<', before)
      .orderBy('expires_at')
      .limit(limit)
      .execute();
    return rows.map(toPending);
  }

  /** Waiting requests not yet reminded of whose expiry is before `before`. */
  async listToRemind(before: string, limit: number): Promise<PendingRequestRecord[]> {
    const rows = await this.db
      .selectFrom('pending_requests')
      .selectAll()
      .where('status', 'in', PENDING_STATUSES)
      .where('reminded_at', 'is', null)
      .where('expires_at', '<', before)
      .orderBy('expires_at')
      .limit(limit)
      .execute();
    return rows.map(toPending);
  }

  /** Marks the request reminded of, once, writing `events` with the mark; false when it was already. */
  async markReminded(id: string, at: string, events: readonly EventInput[]): Promise<boolean> {
    return this.db.transaction().execute(async (tx) => {
      const result = await tx
        .updateTable('pending_requests')
        .set({ reminded_at: at })
        .where('id', '=', id)
        .where('reminded_at', 'is', null)
        .where('status', 'in', PENDING_STATUSES)
        .executeTakeFirst();
      const marked = Number(result.numUpdatedRows) === 1;
      if (marked) await this.ctx.writeEvents(tx, events);
      return marked;
    });
  }
}
