// Tenants and their key versions. Every write here raises the cache epoch in its transaction: the signing path
// reads the current key through the access cache (access-cache.ts).
import type { Transaction } from 'kysely';
import type { KeySpec } from '../../crypto/algorithms.js';
import type { KeyOrigin, KeyStoreKind } from '../../keys/key-store.js';
import { type EventsFor, eventsOf } from '../events/event-store.js';
import type { EventInput } from '../records/event-kinds.js';
import type { KeyRecord, TenantRecord } from '../records/tenant-key.js';
import { isUniqueViolation, raiseCacheEpoch, type StoreContext, StorePart } from '../store-context.js';
import { ConflictError } from '../store-errors.js';
import type { Database } from '../tables.js';

function toTenant(row: Database['tenants']): TenantRecord {
  return { id: row.id, currentKeyId: row.current_key_id, createdAt: row.created_at };
}

export function toKey(row: Database['keys']): KeyRecord {
  return {
    id: row.id,
    tenantId: row.tenant_id,
    version: Number(row.version),
    keySpec: row.key_spec as KeySpec,
    keyRef: row.key_ref,
    publicKeyPem: row.public_key_pem,
    createdAt: row.created_at,
    keyStore: row.key_store as KeyStoreKind,
    origin: row.origin as KeyOrigin,
    materialExpiresAt: row.material_expires_at,
  };
}

export function fromKey(k: KeyRecord): Database['keys'] {
  return {
    id: k.id,
    tenant_id: k.tenantId,
    version: k.version,
    key_spec: k.keySpec,
    key_ref: k.keyRef,
    public_key_pem: k.publicKeyPem,
    created_at: k.createdAt,
    key_store: k.keyStore,
    origin: k.origin,
    material_expires_at: k.materialExpiresAt,
  };
}

/** Adds `key` as the tenant's next version and makes it current, in the transaction `tx`. */
export async function addKeyVersion(
  tx: Transaction<Database>,
  tenantId: string,
  key: Omit<KeyRecord, 'version'>,
): Promise<KeyRecord> {
  const { max } = await tx
    .selectFrom('keys')
    .select((eb) => eb.fn.max<number>('version').as('max'))
    .where('tenant_id', '=', tenantId)
    .executeTakeFirstOrThrow();
  const record: KeyRecord = { ...key, version: Number(max ?? 0) + 1 };
  await tx.insertInto('keys').values(fromKey(record)).execute();
  await tx.updateTable('tenants').set({ current_key_id: record.id }).where('id', '=', tenantId).execute();
  return record;
}

export class TenantStore extends StorePart {
  constructor(
    ctx: StoreContext,
    /** The read behind currentKey's cache: readCurrentKeyRow, or the SQLite store's prepared statement. */
    private readonly readCurrentKey: (tenantId: string) => KeyRecord | undefined | Promise<KeyRecord | undefined>,
  ) {
    super(ctx);
  }

  /** Throws ConflictError if the tenant exists. */
  async create(tenantId: string, firstKey: KeyRecord, events?: readonly EventInput[]): Promise<TenantRecord> {
    return this.ctx.access.changing(() => this.createTenantOnce(tenantId, firstKey, events));
  }

  private async createTenantOnce(
    tenantId: string,
    firstKey: KeyRecord,
    events: readonly EventInput[] | undefined,
  ): Promise<TenantRecord> {
    const tenant = { id: tenantId, current_key_id: firstKey.id, created_at: firstKey.createdAt };
    try {
      await this.db.transaction().execute(async (tx) => {
        await tx.insertInto('tenants').values(tenant).execute();
        await tx.insertInto('keys').values(fromKey(firstKey)).execute();
        await raiseCacheEpoch(tx);
        await this.ctx.writeEvents(tx, events);
      });
    } catch (err) {
      if (isUniqueViolation(err)) throw new ConflictError(`tenant ${tenantId} exists`);
      throw err;
    }
    return toTenant(tenant);
  }

  async get(tenantId: string): Promise<TenantRecord | undefined> {
    const row = await this.db.selectFrom('tenants').selectAll().where('id', '=', tenantId).executeTakeFirst();
    return row && toTenant(row);
  }

  /** The tenant's current key in one round trip (the signing path); undefined if no such tenant. */
  currentKey(tenantId: string): Promise<KeyRecord | undefined> {
    return this.ctx.access.currentKey(tenantId, this.readCurrentKey);
  }

  /** The database read behind currentKey's cache (the SQLite store answers it from a prepared statement instead). */
  async readCurrentKeyRow(tenantId: string): Promise<KeyRecord | undefined> {
    const row = await this.db
      .selectFrom('tenants')
      .innerJoin('keys', 'keys.id', 'tenants.current_key_id')
      .selectAll('keys')
      .where('tenants.id', '=', tenantId)
      .executeTakeFirst();
    return row && toKey(row);
  }

  /** Adds `key` as the next version and makes it current; returns the new version number. */
  async rotateKey(
    tenantId: string,
    key: Omit<KeyRecord, 'version'>,
    events?: EventsFor<KeyRecord>,
  ): Promise<KeyRecord> {
    return this.ctx.access.changing(() => this.rotateKeyOnce(tenantId, key, events));
  }

  private rotateKeyOnce(
    tenantId: string,
    key: Omit<KeyRecord, 'version'>,
    events: EventsFor<KeyRecord> | undefined,
  ): Promise<KeyRecord> {
    return this.db.transaction().execute(async (tx) => {
      const record = await addKeyVersion(tx, tenantId, key);
      await raiseCacheEpoch(tx);
      await this.ctx.writeEvents(tx, eventsOf(events, record));
      return record;
    });
  }

  /** Every tenant's id, in order (Vault transit's key list for a key bound to no tenant). */
  async listIds(): Promise<string[]> {
    const rows = await this.db.selectFrom('tenants').select('id').orderBy('id').execute();
    return rows.map((row) => row.id);
  }

  async getKey(tenantId: string, keyId: string): Promise<KeyRecord | undefined> {
    const row = await this.db
      .selectFrom('keys')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .where('id', '=', keyId)
      .executeTakeFirst();
    return row && toKey(row);
  }

  async listKeys(tenantId: string): Promise<KeyRecord[]> {
    const rows = await this.db
      .selectFrom('keys')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .orderBy('version')
      .execute();
    return rows.map(toKey);
  }
}
