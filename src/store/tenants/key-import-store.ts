// Keys awaiting imported material (BYOK, migration 0011): from get_import_params until import_key adds the key
// version (tenant-store.ts), and the sweep that removes wrapping keys whose parameters ended.
import type { KeySpec } from '../../crypto/algorithms.js';
import type { KeyStoreKind, WrappingAlgorithm, WrappingKeySpec } from '../../keys/key-store.js';
import { type EventsFor, eventsOf } from '../events/event-store.js';
import type { KeyImportRecord, KeyRecord } from '../records/tenant-key.js';
import { isUniqueViolation, raiseCacheEpoch, StorePart } from '../store-context.js';
import { ConflictError } from '../store-errors.js';
import type { Database } from '../tables.js';
import { addKeyVersion, toKey } from './tenant-store.js';

function toKeyImport(row: Database['key_imports']): KeyImportRecord {
  return {
    id: row.id,
    tenantId: row.tenant_id,
    keySpec: row.key_spec as KeySpec,
    keyStore: row.key_store as KeyStoreKind,
    keyRef: row.key_ref,
    wrappingKeyRef: row.wrapping_key_ref,
    wrappingAlgorithm: row.wrapping_algorithm as WrappingAlgorithm,
    wrappingKeySpec: row.wrapping_key_spec as WrappingKeySpec,
    createdAt: row.created_at,
    validTo: row.valid_to,
  };
}

export class KeyImportStore extends StorePart {
  /** Key import (migration 0011): inserts, or replaces the parameters of, the key awaiting material `record.id`. */
  async put(r: KeyImportRecord): Promise<void> {
    const row: Database['key_imports'] = {
      id: r.id,
      tenant_id: r.tenantId,
      key_spec: r.keySpec,
      key_store: r.keyStore,
      key_ref: r.keyRef,
      wrapping_key_ref: r.wrappingKeyRef,
      wrapping_algorithm: r.wrappingAlgorithm,
      wrapping_key_spec: r.wrappingKeySpec,
      created_at: r.createdAt,
      valid_to: r.validTo,
    };
    const { id: _id, ...changes } = row;
    await this.db
      .insertInto('key_imports')
      .values(row)
      .onConflict((oc) => oc.column('id').doUpdateSet(changes))
      .execute();
  }

  async get(tenantId: string, id: string): Promise<KeyImportRecord | undefined> {
    const row = await this.db
      .selectFrom('key_imports')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .where('id', '=', id)
      .executeTakeFirst();
    return row && toKeyImport(row);
  }

  /** Imports whose parameters ended by `before` and whose wrapping key is still in the token (the sweep). */
  async listExpired(before: string): Promise<KeyImportRecord[]> {
    const rows = await this.db
      .selectFrom('key_imports')
      .selectAll()
      .where('valid_to', '<=', before)
      .where('wrapping_key_ref', 'is not', null)
      .execute();
    return rows.map(toKeyImport);
  }

  /** The sweep removed the wrapping key: forget it, unless new parameters replaced it meanwhile. */
  async clearWrappingKey(id: string, wrappingKeyRef: string): Promise<void> {
    await this.db
      .updateTable('key_imports')
      .set({ wrapping_key_ref: null })
      .where('id', '=', id)
      .where('wrapping_key_ref', '=', wrappingKeyRef)
      .execute();
  }

  /**
   * The material arrived: adds `key` (id = the import's id) as the tenant's next key version, makes it current
   * and removes the import row, in one transaction. ConflictError when another import of the same key won.
   */
  async complete(tenantId: string, key: Omit<KeyRecord, 'version'>, events?: EventsFor<KeyRecord>): Promise<KeyRecord> {
    try {
      return await this.ctx.access.changing(() => this.completeKeyImportOnce(tenantId, key, events));
    } catch (err) {
      if (isUniqueViolation(err)) throw new ConflictError(`key ${key.id} was imported meanwhile`);
      throw err;
    }
  }

  private completeKeyImportOnce(
    tenantId: string,
    key: Omit<KeyRecord, 'version'>,
    events: EventsFor<KeyRecord> | undefined,
  ): Promise<KeyRecord> {
    return this.db.transaction().execute(async (tx) => {
      const record = await addKeyVersion(tx, tenantId, key);
      await tx.deleteFrom('key_imports').where('id', '=', key.id).execute();
      await raiseCacheEpoch(tx);
      await this.ctx.writeEvents(tx, eventsOf(events, record));
      return record;
    });
  }

  /** The same material again for an imported key: its (new) key reference and expiry; removes the import row. */
  async reimport(
    tenantId: string,
    keyId: string,
    keyRef: string,
    materialExpiresAt: string | null,
    events?: EventsFor<KeyRecord>,
  ): Promise<KeyRecord> {
    return this.ctx.access.changing(() => this.reimportKeyOnce(tenantId, keyId, keyRef, materialExpiresAt, events));
  }

  private reimportKeyOnce(
    tenantId: string,
    keyId: string,
    keyRef: string,
    materialExpiresAt: string | null,
    events: EventsFor<KeyRecord> | undefined,
  ): Promise<KeyRecord> {
    return this.db.transaction().execute(async (tx) => {
      await tx
        .updateTable('keys')
        .set({ key_ref: keyRef, material_expires_at: materialExpiresAt })
        .where('tenant_id', '=', tenantId)
        .where('id', '=', keyId)
        .execute();
      await tx.deleteFrom('key_imports').where('id', '=', keyId).execute();
      await raiseCacheEpoch(tx);
      const row = await tx
        .selectFrom('keys')
        .selectAll()
        .where('tenant_id', '=', tenantId)
        .where('id', '=', keyId)
        .executeTakeFirstOrThrow();
      const record = toKey(row);
      await this.ctx.writeEvents(tx, eventsOf(events, record));
      return record;
    });
  }
}
