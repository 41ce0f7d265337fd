// The service's domain logic: tenants, key versions and signing. Transport-free, so the HTTP routes and the
// daemon's in-process mode share it.
import { randomUUID } from 'node:crypto';
import {
  algorithmForPkcs11,
  checkSigningRequest,
  type KeySpec,
  keyInfo,
  type SigningAlgorithm,
} from '../crypto/algorithms.js';
import { ApiError } from '../errors.js';
import type { KeyStore } from '../keys/key-store.js';
import type { PolicyEngine, PolicyInput } from '../policy/policy.js';
import { ConflictError, type KeyRecord, type Store, type TenantRecord } from '../store/store.js';

export type PolicyContext = Omit<PolicyInput, 'tenantId' | 'keyId' | 'keySpec' | 'algorithm' | 'callerId'>;

export interface SignRequest {
  tenantId: string;
  callerId: string;
  digest: Buffer;
  context: PolicyContext;
}

export interface Signed {
  signature: Buffer;
  keyId: string;
  algorithm: SigningAlgorithm;
}

export interface SigningServiceDeps {
  store: Store;
  keyStore: KeyStore;
  policy: PolicyEngine;
  now?: () => Date;
}

export class SigningService {
  private readonly store: Store;
  private readonly keyStore: KeyStore;
  private readonly policy: PolicyEngine;
  private readonly now: () => Date;

  constructor(deps: SigningServiceDeps) {
    this.store = deps.store;
    this.keyStore = deps.keyStore;
    this.policy = deps.policy;
    this.now = deps.now ?? (() => new Date());
  }

  async createTenant(tenantId: string, keySpec: KeySpec): Promise<{ tenant: TenantRecord; key: KeyRecord }> {
    this.requireSupported(keySpec);
    if (await this.store.getTenant(tenantId)) {
      throw new ApiError('tenant_exists', `tenant ${tenantId} already exists`);
    }
    const key = await this.newKey(tenantId, keySpec, 1);
    try {
      const tenant = await this.store.createTenant(tenantId, key);
      return { tenant, key };
    } catch (err) {
      // Lost a race with a concurrent create_tenant: the key we made is orphaned, remove it.
      await this.keyStore.destroyKey(key.keyRef).catch(() => undefined);
      if (err instanceof ConflictError) throw new ApiError('tenant_exists', `tenant ${tenantId} already exists`);
      throw err;
    }
  }

  async rotateKey(tenantId: string, keySpec?: KeySpec): Promise<{ key: KeyRecord; keys: KeyRecord[] }> {
    const current = await this.currentKey(tenantId);
    const spec = keySpec ?? current.keySpec;
    this.requireSupported(spec);
    const made = await this.newKey(tenantId, spec, 0);
    let key: KeyRecord;
    try {
      key = await this.store.rotateKey(tenantId, made);
    } catch (err) {
      await this.keyStore.destroyKey(made.keyRef).catch(() => undefined);
      throw err;
    }
    return { key, keys: await this.store.listKeys(tenantId) };
  }

  /** The tenant's current key, or the version named by `keyId`. */
  async getKey(tenantId: string, keyId?: string): Promise<KeyRecord> {
    if (keyId === undefined) return this.currentKey(tenantId);
    await this.requireTenant(tenantId);
    const key = await this.store.getKey(tenantId, keyId);
    if (!key) throw new ApiError('key_not_found', `tenant ${tenantId} has no key ${keyId}`);
    return key;
  }

  async listKeys(tenantId: string): Promise<KeyRecord[]> {
    await this.requireTenant(tenantId);
    return this.store.listKeys(tenantId);
  }

  /** `sign`: the caller names the algorithm (KMS names); it must fit the key and the digest. */
  async sign(req: SignRequest & { algorithm: SigningAlgorithm }): Promise<Signed> {
    const key = await this.currentKey(req.tenantId);
    checkSigningRequest(key.keySpec, req.algorithm, req.digest);
    return this.signWithKey(key, req.algorithm, req);
  }

  /** `pkcs11_sign`: the algorithm follows from the key spec, the digest length and `pss`. */
  async pkcs11Sign(req: SignRequest & { keySpec?: KeySpec; pss: boolean }): Promise<Signed> {
    const key = await this.currentKey(req.tenantId);
    if (req.keySpec !== undefined && req.keySpec !== key.keySpec) {
      throw new ApiError(
        'key_spec_mismatch',
        `key_spec ${req.keySpec} does not match tenant ${req.tenantId}'s current key (${key.keySpec})`,
      );
    }
    const algorithm = algorithmForPkcs11(key.keySpec, req.digest, req.pss);
    return this.signWithKey(key, algorithm, req);
  }

  private async signWithKey(key: KeyRecord, algorithm: SigningAlgorithm, req: SignRequest): Promise<Signed> {
    const decision = await this.policy.evaluate({
      ...req.context,
      tenantId: req.tenantId,
      keyId: key.id,
      keySpec: key.keySpec,
      algorithm,
      callerId: req.callerId,
    });
    if (decision.outcome === 'deny') {
      throw new ApiError('policy_denied', `${decision.rule}: ${decision.reason}`, {
        ...(decision.vulnId !== undefined && { vuln_id: decision.vulnId }),
        ...(decision.fixVersion !== undefined && { fix_version: decision.fixVersion }),
      });
    }
    if (decision.outcome !== 'allow') {
      // Pending decisions need the approval workflow's durable records; until it lands, refuse plainly.
      throw new ApiError(
        'not_implemented',
        `policy asked for ${decision.outcome}, but approvals are not available yet`,
      );
    }
    const signature = await this.keyStore.sign(key.keyRef, key.keySpec, algorithm, req.digest);
    // Recorded before the signature is returned: a signature the store could not record is never handed out.
    await this.store.recordSignature({
      id: randomUUID(),
      tenantId: req.tenantId,
      keyId: key.id,
      algorithm,
      hash: req.digest.toString('base64'),
      caller: req.callerId,
      createdAt: this.now().toISOString(),
    });
    return { signature, keyId: key.id, algorithm };
  }

  private requireSupported(spec: KeySpec): void {
    keyInfo(spec); // unknown to every backend: throws unsupported_key_spec
    if (!this.keyStore.supports(spec)) {
      throw new ApiError('unsupported_key_spec', `key_spec ${spec} is not supported by ${this.keyStore.description}`);
    }
  }

  private async requireTenant(tenantId: string): Promise<TenantRecord> {
    const tenant = await this.store.getTenant(tenantId);
    if (!tenant) throw new ApiError('tenant_not_found', `tenant ${tenantId} does not exist`);
    return tenant;
  }

  private async currentKey(tenantId: string): Promise<KeyRecord> {
    const key = await this.store.getCurrentKey(tenantId);
    if (!key) throw new ApiError('tenant_not_found', `tenant ${tenantId} does not exist`);
    return key;
  }

  private async newKey(tenantId: string, keySpec: KeySpec, version: number): Promise<KeyRecord> {
    const id = randomUUID();
    const made = await this.keyStore.createKey(keySpec, `${tenantId}/${id}`);
    return {
      id,
      tenantId,
      version,
      keySpec,
      keyRef: made.keyRef,
      publicKeyPem: made.publicKeyPem,
      createdAt: this.now().toISOString(),
    };
  }
}
