// The exposed tenants and their current keys, cached for a bounded time (default 60 s). A rotation shows up as
// a new service key id, hence a new CKA_ID, at the latest when the cache entry expires, and at once when a
// module asks to sign with a key id the cache does not know (see current(..., { refresh: true })).
import type { Logger } from 'pino';
import { WireStatus } from '../wire/wire.js';
import type { CertificateStore } from './certificate-store.js';
import { type KeyCertificates, loadCertificates } from './certificates.js';
import { ckaIdFor } from './key-id.js';
import { publicKeyParts } from './public-key.js';
import { type PublicKeyInfo, type Upstream, UpstreamError } from './upstream/upstream.js';

export interface TenantConfig {
  tenantId: string;
  /** Token label (CK_TOKEN_INFO.label), at most 32 bytes; the tenant id unless configured. */
  label: string;
  /** Service key id -> PEM file with the leaf certificate followed by its intermediates. */
  certificates: Record<string, string>;
  /** Where the transparency-log proof of each signature is kept (log-proofs.ts); none when absent. */
  logProofs?: string;
}

export interface CatalogEntry {
  tenant: TenantConfig;
  key: PublicKeyInfo;
  ckaId: Buffer;
  /** SubjectPublicKeyInfo, DER. */
  spki: Buffer;
  /** ML-DSA only: the raw public key (the module's CKA_VALUE; μ starts with its SHAKE256). */
  rawPublicKey?: Buffer;
  certs: KeyCertificates;
  fetchedAt: number;
}

export interface KeyCatalogOptions {
  upstream: Upstream;
  tenants: TenantConfig[];
  ttlMs: number;
  log: Logger;
  /** Chains registered with `signbridge cert import`; a file named in the configuration wins over it. */
  certificateStore?: CertificateStore;
  /** The tenants as they are now, asked on each use (a `signbridge login` for another tenant); default: `tenants`. */
  tenantSource?: () => TenantConfig[];
  now?: () => number;
}

export class KeyCatalog {
  private readonly opts: KeyCatalogOptions;
  private fixedTenants: Map<string, TenantConfig>;
  private sourced: TenantConfig[] | undefined;
  private readonly entries = new Map<string, CatalogEntry>();
  private readonly inFlight = new Map<string, Promise<CatalogEntry>>();
  private readonly now: () => number;

  constructor(opts: KeyCatalogOptions) {
    this.opts = opts;
    this.fixedTenants = new Map(opts.tenants.map((t) => [t.tenantId, t]));
    this.now = opts.now ?? Date.now;
  }

  private get tenants(): Map<string, TenantConfig> {
    const now = this.opts.tenantSource?.();
    if (now && now !== this.sourced && !sameTenants(now, [...this.fixedTenants.values()])) {
      for (const id of this.fixedTenants.keys()) this.entries.delete(id);
      this.fixedTenants = new Map(now.map((t) => [t.tenantId, t]));
      this.opts.log.info({ tenants: now.map((t) => t.tenantId) }, 'tenants changed');
    }
    this.sourced = now;
    return this.fixedTenants;
  }

  get tenantList(): TenantConfig[] {
    return [...this.tenants.values()];
  }

  tenant(tenantId: string): TenantConfig | undefined {
    return this.tenants.get(tenantId);
  }

  /**
   * The tenant's current key, from the cache while it is fresh; `refresh` forces a look-up. With `staleOnOutage`
   * (a SIGN), a cached key past its time is still used when the service cannot be reached to renew it (a restart):
   * the service signs with whatever key is current, and a signature by another key is refused afterwards.
   */
  async current(tenantId: string, options: { refresh?: boolean; staleOnOutage?: boolean } = {}): Promise<CatalogEntry> {
    const tenant = this.tenants.get(tenantId);
    if (!tenant) {
      throw new UpstreamError(WireStatus.KEY_NOT_FOUND, `tenant ${tenantId} is not exposed by this daemon`);
    }
    const cached = this.entries.get(tenantId);
    if (cached && !options.refresh && this.now() - cached.fetchedAt < this.opts.ttlMs) return cached;
    let fetching = this.inFlight.get(tenantId);
    if (!fetching) {
      fetching = this.fetch(tenant).finally(() => this.inFlight.delete(tenantId));
      this.inFlight.set(tenantId, fetching);
    }
    if (!options.staleOnOutage || !cached) return fetching;
    try {
      return await fetching;
    } catch (err) {
      if (!(err instanceof UpstreamError) || err.status !== WireStatus.UNAVAILABLE) throw err;
      this.opts.log.info({ tenant: tenantId, keyId: cached.key.keyId, reason: err.message }, 'cached key used');
      return cached;
    }
  }

  invalidate(tenantId: string): void {
    this.entries.delete(tenantId);
  }

  private async fetch(tenant: TenantConfig): Promise<CatalogEntry> {
    let key: PublicKeyInfo;
    try {
      key = await this.opts.upstream.getPublicKey(tenant.tenantId);
    } catch (err) {
      if (err instanceof UpstreamError && err.status === WireStatus.KEY_NOT_FOUND) this.entries.delete(tenant.tenantId);
      throw err;
    }
    let parts: ReturnType<typeof publicKeyParts>;
    try {
      parts = publicKeyParts(key);
    } catch (err) {
      throw new UpstreamError(
        WireStatus.INTERNAL,
        `tenant ${tenant.tenantId}: unreadable public key (${(err as Error).message})`,
      );
    }
    const previous = this.entries.get(tenant.tenantId);
    if (previous && previous.key.keyId !== key.keyId) {
      this.opts.log.info(
        { tenant: tenant.tenantId, from: previous.key.keyId, to: key.keyId },
        'key rotation picked up',
      );
    }
    const { spki, rawPublicKey } = parts;
    const entry: CatalogEntry = {
      tenant,
      key,
      ckaId: ckaIdFor(key.keyId),
      spki,
      ...(rawPublicKey && { rawPublicKey }),
      certs: this.certificatesFor(tenant, key.keyId, spki),
      fetchedAt: this.now(),
    };
    this.entries.set(tenant.tenantId, entry);
    return entry;
  }

  private certificatesFor(tenant: TenantConfig, keyId: string, spki: Buffer): KeyCertificates {
    const path = tenant.certificates[keyId];
    try {
      if (path) return loadCertificates(path, spki);
      return this.opts.certificateStore?.load(tenant.tenantId, keyId, spki) ?? { chain: [] };
    } catch (err) {
      this.opts.log.warn({ tenant: tenant.tenantId, keyId, err: (err as Error).message }, 'certificate not published');
      return { chain: [] };
    }
  }
}

function sameTenants(a: TenantConfig[], b: TenantConfig[]): boolean {
  return a.length === b.length && a.every((t, i) => t.tenantId === b[i]?.tenantId && t.label === b[i]?.label);
}
