// Policy exceptions: a tenant admin lets a named vulnerability pass for a while, optionally only for one
// project or artifact type. Expiry is required and bounded, so no exception is forgotten forever.

import { randomUUID } from 'node:crypto';
import { ApiError } from '../errors.js';
import { EventBuilder } from '../events/event-builder.js';
import type { AuditAction, AuditOutcome } from '../store/records/audit-vocabulary.js';
import type { ExceptionRecord, Store } from '../store/store.js';

export type ExceptionStatus = 'active' | 'expired' | 'revoked';

export interface NewException {
  vulnId: string;
  project?: string;
  artifactType?: string;
  reason: string;
  expiresAt: string;
}

export class ExceptionService {
  constructor(
    private readonly store: Store,
    private readonly maxLifetimeMs: number,
    private readonly now: () => Date = () => new Date(),
    private readonly events: EventBuilder = new EventBuilder(store, undefined),
  ) {}

  status(record: ExceptionRecord): ExceptionStatus {
    if (record.revokedAt !== null) return 'revoked';
    return Date.parse(record.expiresAt) <= this.now().getTime() ? 'expired' : 'active';
  }

  async create(tenantId: string, createdBy: string, input: NewException): Promise<ExceptionRecord> {
    await this.requireTenant(tenantId);
    const now = this.now();
    const expires = Date.parse(input.expiresAt);
    if (Number.isNaN(expires)) throw new ApiError('invalid_exception', 'body.expires_at must be an ISO 8601 date-time');
    if (expires <= now.getTime()) throw new ApiError('invalid_exception', 'body.expires_at must be in the future');
    if (expires - now.getTime() > this.maxLifetimeMs) {
      const days = Math.round(this.maxLifetimeMs / 86_400_000);
      throw new ApiError('invalid_exception', `body.expires_at may be at most ${days} days ahead`);
    }
    const record: ExceptionRecord = {
      id: randomUUID(),
      tenantId,
      vulnId: input.vulnId,
      project: input.project ?? null,
      artifactType: input.artifactType ?? null,
      reason: input.reason,
      createdBy,
      createdAt: now.toISOString(),
      expiresAt: new Date(expires).toISOString(),
      revokedAt: null,
      revokedBy: null,
    };
    await this.store.exceptions.create(record, [await this.events.exception('exception.created', record)]);
    await this.audit(tenantId, createdBy, 'create_exception', 'created', {
      exception_id: record.id,
      vuln_id: record.vulnId,
      project: record.project,
      artifact_type: record.artifactType,
      reason: record.reason,
      expires_at: record.expiresAt,
    });
    return record;
  }

  async list(tenantId: string, filter: { status?: ExceptionStatus; vulnId?: string } = {}): Promise<ExceptionRecord[]> {
    await this.requireTenant(tenantId);
    return (await this.store.exceptions.list(tenantId)).filter(
      (e) =>
        (filter.status === undefined || this.status(e) === filter.status) &&
        (filter.vulnId === undefined || e.vulnId === filter.vulnId),
    );
  }

  async revoke(tenantId: string, id: string, by: string): Promise<ExceptionRecord> {
    await this.requireTenant(tenantId);
    const existing = await this.store.exceptions.get(tenantId, id);
    if (!existing) throw new ApiError('exception_not_found', `tenant ${tenantId} has no exception ${id}`);
    const at = this.now().toISOString();
    const revokedEvent =
      existing && (await this.events.exception('exception.revoked', { ...existing, revokedAt: at, revokedBy: by }));
    if (!(await this.store.exceptions.revoke(tenantId, id, at, by, revokedEvent && [revokedEvent]))) {
      throw new ApiError('exception_not_active', `exception ${id} is already revoked`);
    }
    await this.audit(tenantId, by, 'revoke_exception', 'revoked', { exception_id: id, vuln_id: existing.vulnId });
    return (await this.store.exceptions.get(tenantId, id)) as ExceptionRecord;
  }

  private audit<A extends AuditAction>(
    tenantId: string,
    actor: string,
    action: A,
    outcome: AuditOutcome<A>,
    details: Record<string, unknown>,
  ) {
    return this.store.audit.append({ at: this.now().toISOString(), tenantId, actor, action, outcome, details });
  }

  private async requireTenant(tenantId: string): Promise<void> {
    if (!(await this.store.tenants.get(tenantId)))
      throw new ApiError('tenant_not_found', `tenant ${tenantId} does not exist`);
  }
}
