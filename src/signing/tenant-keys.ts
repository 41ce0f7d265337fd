// Tenants and their key versions: creating a tenant with its first key, rotating, reading a tenant's keys, and
// whether a key version may sign.

import { randomUUID } from 'node:crypto';
import { type KeySpec, keyInfo } from '../crypto/algorithms.js';
import { ApiError } from '../errors.js';
import type { EventBuilder } from '../events/event-builder.js';
import type { KeyStores } from '../keys/key-store.js';
import { ConflictError, type KeyRecord, type Store, type TenantRecord } from '../store/store.js';
import type { Audit } from './service-audit.js';

export interface TenantKeysDeps {
  store: Store;
  keyStores: KeyStores;
  events: EventBuilder;
  now: () => Date;
  audit: Audit;
  /**
   * Test seam: awaited just before a signing request reads the tenant's current key, so a test can rotate the key in
   * the window between a door resolving it and the signature. Absent in production (no cost but this check).
   */
  beforeSigningKeyRead?: ((tenantId: string) => Promise<void>) | undefined;
}

export class TenantKeys {
  private readonly store: Store;
  private readonly keyStores: KeyStores;
  private readonly events: EventBuilder;
  private readonly now: () => Date;
  private readonly audit: Audit;
  private readonly beforeSigningKeyRead: TenantKeysDeps['beforeSigningKeyRead'];

  constructor(deps: TenantKeysDeps) {
    this.store = deps.store;
    this.keyStores = deps.keyStores;
    this.events = deps.events;
    this.now = deps.now;
    this.audit = deps.audit;
    this.beforeSigningKeyRead = deps.beforeSigningKeyRead;
  }

  async createTenant(
    tenantId: string,
    keySpec: KeySpec,
    actor: string,
  ): Promise<{ tenant: TenantRecord; key: KeyRecord }> {
    this.requireSupported(keySpec);
    if (await this.store.tenants.get(tenantId)) {
      throw new ApiError('tenant_exists', `tenant ${tenantId} already exists`);
    }
    const key = await this.newKey(tenantId, keySpec, 1);
    try {
      const tenant = await this.store.tenants.create(tenantId, key, [
        await this.events.tenantCreated(tenantId, key, actor),
      ]);
      await this.audit(tenantId, actor, 'create_tenant', 'created', { key_id: key.id, key_spec: keySpec });
      return { tenant, key };
    } catch (err) {
      // Lost a race with a concurrent create_tenant: the key we made is orphaned, remove it.
      await this.destroy(key);
      if (err instanceof ConflictError) throw new ApiError('tenant_exists', `tenant ${tenantId} already exists`);
      throw err;
    }
  }

  async rotateKey(tenantId: string, actor: string, keySpec?: KeySpec): Promise<{ key: KeyRecord; keys: KeyRecord[] }> {
    const current = await this.currentKey(tenantId);
    const spec = keySpec ?? current.keySpec;
    this.requireSupported(spec);
    const made = await this.newKey(tenantId, spec, 0);
    let key: KeyRecord;
    try {
      const by = await this.events.actor(actor);
      key = await this.store.tenants.rotateKey(tenantId, made, (k) => [
        this.events.keyEvent('key.rotated', k, by, current.id),
      ]);
    } catch (err) {
      await this.destroy(made);
      throw err;
    }
    await this.audit(tenantId, actor, 'rotate_key', 'rotated', {
      key_id: key.id,
      key_spec: key.keySpec,
      version: key.version,
    });
    return { key, keys: await this.store.tenants.listKeys(tenantId) };
  }

  /** The tenant's current key, or the version named by `keyId`. */
  async getKey(tenantId: string, keyId?: string): Promise<KeyRecord> {
    if (keyId === undefined) return this.currentKey(tenantId);
    await this.requireTenant(tenantId);
    const key = await this.store.tenants.getKey(tenantId, keyId);
    if (!key) throw new ApiError('key_not_found', `tenant ${tenantId} has no key ${keyId}`);
    return key;
  }

  async listKeys(tenantId: string): Promise<KeyRecord[]> {
    await this.requireTenant(tenantId);
    return this.store.tenants.listKeys(tenantId);
  }

  /** Imported material with an expiry stops working then, until the same material is imported again (AWS KMS). */
  requireUsable(key: KeyRecord): void {
    if (key.materialExpiresAt === null || Date.parse(key.materialExpiresAt) > this.now().getTime()) return;
    throw new ApiError(
      'key_not_usable',
      `the key material of key ${key.id} expired at ${key.materialExpiresAt}; import the same material again ` +
        `(get_import_params with kms_key_id ${key.id}, then import_key)`,
    );
  }

  async requireTenant(tenantId: string): Promise<TenantRecord> {
    const tenant = await this.store.tenants.get(tenantId);
    if (!tenant) throw new ApiError('tenant_not_found', `tenant ${tenantId} does not exist`);
    return tenant;
  }

  async currentKey(tenantId: string): Promise<KeyRecord> {
    const key = await this.store.tenants.currentKey(tenantId);
    if (!key) throw new ApiError('tenant_not_found', `tenant ${tenantId} does not exist`);
    return key;
  }

  /**
   * The key a signing request signs with: the tenant's current version, which must be the one the request expects
   * (SignRequest.expectedKeyId) when it names one; otherwise key_changed, before anything is decided or signed.
   */
  async signingKey(tenantId: string, expectedKeyId: string | undefined): Promise<KeyRecord> {
    if (this.beforeSigningKeyRead) await this.beforeSigningKeyRead(tenantId);
    const key = await this.currentKey(tenantId);
    if (expectedKeyId !== undefined && expectedKeyId !== key.id) {
      throw new ApiError(
        'key_changed',
        `key ${expectedKeyId} is no longer tenant ${tenantId}'s current key (now ${key.id}, version ${key.version}): ` +
          'the key was rotated; read the key again and send a request for the current one',
      );
    }
    return key;
  }

  private requireSupported(spec: KeySpec): void {
    keyInfo(spec); // not a key spec at all: throws unsupported_key_spec
    this.keyStores.forNewKey(spec);
  }

  /** Undoes a key made for a tenant creation or rotation that did not happen; best effort. */
  private async destroy(key: KeyRecord): Promise<void> {
    await Promise.resolve()
      .then(() => this.keyStores.forKey(key.keyStore).destroyKey(key.keyRef))
      .catch(() => undefined);
  }

  private async newKey(tenantId: string, keySpec: KeySpec, version: number): Promise<KeyRecord> {
    const id = randomUUID();
    const keyStore = this.keyStores.forNewKey(keySpec);
    const made = await keyStore.createKey(keySpec, `${tenantId}/${id}`);
    return {
      id,
      tenantId,
      version,
      keySpec,
      keyRef: made.keyRef,
      publicKeyPem: made.publicKeyPem,
      createdAt: this.now().toISOString(),
      keyStore: keyStore.kind,
      origin: 'generated',
      materialExpiresAt: null,
    };
  }
}
