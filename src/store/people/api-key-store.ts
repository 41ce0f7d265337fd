// API keys: the admins' keys, people's keys and the keys a workload token exchange mints. Every write raises the
// cache epoch in its transaction: the signing path reads the caller's key through the access cache.
import type { ApiKeyRecord } from '../records/api-key.js';
import type { EventInput } from '../records/event-kinds.js';
import type { Role } from '../records/roles.js';
import type { WorkloadIdentity } from '../records/workload-identity.js';
import { raiseCacheEpoch, type StoreContext, StorePart } from '../store-context.js';
import type { Database } from '../tables.js';

/** An api_keys row, with its owner's disabled_at when the key belongs to a person (API_KEY_WITH_OWNER). */
export type ApiKeyRow = Database['api_keys'] & { person_disabled_at?: string | null };

export function toApiKey(row: ApiKeyRow): ApiKeyRecord {
  return {
    id: row.id,
    secretHash: row.secret_hash,
    tenantId: row.tenant_id,
    role: row.role as Role,
    label: row.label,
    createdAt: row.created_at,
    revokedAt: row.revoked_at,
    roles: row.roles ? (JSON.parse(row.roles) as Role[]) : [row.role as Role],
    personId: row.person_id ?? null,
    expiresAt: row.expires_at ?? null,
    createdVia: row.created_via ?? null,
    personDisabledAt: row.person_disabled_at ?? null,
    workload: row.workload ? (JSON.parse(row.workload) as WorkloadIdentity) : null,
    sealedSecret: row.sealed_secret ?? null,
  };
}

/** The key and, for a person's key, whether its owner is disabled: one read on the signing path. */
export const API_KEY_WITH_OWNER =
  'SELECT api_keys.*, people.disabled_at AS person_disabled_at FROM api_keys ' +
  'LEFT JOIN people ON people.id = api_keys.person_id WHERE api_keys.id = ?';

export class ApiKeyStore extends StorePart {
  constructor(
    ctx: StoreContext,
    /** The read behind get's cache: readApiKeyRow, or the SQLite store's prepared statement. */
    private readonly readApiKey: (id: string) => ApiKeyRecord | undefined | Promise<ApiKeyRecord | undefined>,
  ) {
    super(ctx);
  }

  async create(r: ApiKeyRecord, events?: readonly EventInput[]): Promise<void> {
    await this.ctx.access.changing(() => this.createApiKeyOnce(r, events));
  }

  private async createApiKeyOnce(r: ApiKeyRecord, events: readonly EventInput[] | undefined): Promise<void> {
    await this.db.transaction().execute(async (tx) => {
      await tx
        .insertInto('api_keys')
        .values({
          id: r.id,
          secret_hash: r.secretHash,
          tenant_id: r.tenantId,
          role: r.role,
          label: r.label,
          created_at: r.createdAt,
          revoked_at: r.revokedAt,
          person_id: r.personId ?? null,
          roles: r.roles ? JSON.stringify(r.roles) : null,
          expires_at: r.expiresAt ?? null,
          created_via: r.createdVia ?? null,
          workload: r.workload ? JSON.stringify(r.workload) : null,
          sealed_secret: r.sealedSecret ?? null,
        })
        .execute();
      await raiseCacheEpoch(tx);
      await this.ctx.writeEvents(tx, events);
    });
  }

  get(id: string): Promise<ApiKeyRecord | undefined> {
    return this.ctx.access.apiKey(id, this.readApiKey);
  }

  /** The database read behind get's cache (the SQLite store answers it from a prepared statement instead). */
  async readApiKeyRow(id: string): Promise<ApiKeyRecord | undefined> {
    const row = await this.db
      .selectFrom('api_keys')
      .leftJoin('people', 'people.id', 'api_keys.person_id')
      .selectAll('api_keys')
      .select('people.disabled_at as person_disabled_at')
      .where('api_keys.id', '=', id)
      .executeTakeFirst();
    return row && toApiKey(row);
  }

  async list(): Promise<ApiKeyRecord[]> {
    const rows = await this.db.selectFrom('api_keys').selectAll().orderBy('created_at').execute();
    return rows.map(toApiKey);
  }

  /** Returns false when no such key was active. */
  async revoke(id: string, at: string, events?: readonly EventInput[]): Promise<boolean> {
    return this.ctx.access.changing(() => this.revokeApiKeyOnce(id, at, events));
  }

  private revokeApiKeyOnce(id: string, at: string, events: readonly EventInput[] | undefined): Promise<boolean> {
    return this.db.transaction().execute(async (tx) => {
      const result = await tx
        .updateTable('api_keys')
        .set({ revoked_at: at })
        .where('id', '=', id)
        .where('revoked_at', 'is', null)
        .executeTakeFirst();
      await raiseCacheEpoch(tx);
      const revoked = Number(result.numUpdatedRows) === 1;
      if (revoked) await this.ctx.writeEvents(tx, events);
      return revoked;
    });
  }
}
