// The service's domain logic: tenants, key versions and signing. Transport-free, so the HTTP routes and the
// daemon's in-process mode share it. It wires the parts and calls down to them: tenant-keys.ts (tenants and key
// versions), signer.ts (decide and sign), held-requests.ts (requests held for a decision: hold, continue, collect,
// expire) and approvals.ts (their decisions); policy-check.ts and signature-recorder.ts serve the signer and the
// approvals.

import type { KeySpec, SigningAlgorithm } from '../crypto/algorithms.js';
import { EventBuilder } from '../events/event-builder.js';
import { type KeyStore, KeyStores } from '../keys/key-store.js';
import type { PolicyEngine } from '../policy/policy.js';
import type { KeyRecord, Store, TenantRecord } from '../store/store.js';
import { type ApprovalResult, Approvals } from './approvals.js';
import { type BatchOutcome, BatchSigner, type BatchSignRequest } from './batch-signer.js';
import { DEFAULT_APPROVAL_RETRY_WINDOW_MS, HeldRequests } from './held-requests.js';
import { PolicyCheck } from './policy-check.js';
import type { PolicyContext } from './policy-context.js';
import { auditTo } from './service-audit.js';
import type { Pending, SignOutcome, SignOutcomeObserver, SignRequest } from './sign-outcome.js';
import { SignatureRecorder } from './signature-recorder.js';
import { Signer } from './signer.js';
import { TenantKeys } from './tenant-keys.js';

export type { ApprovalResult, Caller } from './approvals.js';
export type { BatchItem } from './batch-items.js';
export type { BatchOutcome, BatchSignRequest } from './batch-signer.js';
export { BATCH_MAX } from './batch-signer.js';
export { DEFAULT_APPROVAL_RETRY_WINDOW_MS } from './held-requests.js';
export type { Pending, Signed, SignOutcome, SignOutcomeObserver, SignRequest } from './sign-outcome.js';
export type { PolicyContext };

export interface SigningServiceDeps {
  store: Store;
  /** One key store, or several (each key version records which one holds it). */
  keyStore: KeyStore | KeyStores;
  policy: PolicyEngine;
  now?: () => Date;
  /** How long a pending request waits for its decisions (default 24 h). */
  approvalLifetimeMs?: number;
  /**
   * How long after a request was rejected or approved a retry of it gets that outcome again instead of opening a
   * new request (default 10 min; 0: only waiting requests are continued). docs/policy.md.
   */
  approvalRetryWindowMs?: number;
  /** Told the outcome of every signing request that reached the policy (for /metrics); must not throw. */
  onSignOutcome?: SignOutcomeObserver;
  /** Makes the events the changes tell of (docs/events.md); default: one without console links. */
  events?: EventBuilder;
  /** Test seam (tenant-keys.ts): awaited before a signing request reads the tenant's current key. */
  beforeSigningKeyRead?: (tenantId: string) => Promise<void>;
}

const noObserver: SignOutcomeObserver = () => undefined;

export class SigningService {
  private readonly keys: TenantKeys;
  private readonly signer: Signer;
  private readonly held: HeldRequests;
  private readonly approvals: Approvals;
  private readonly batches: BatchSigner;

  constructor(deps: SigningServiceDeps) {
    const observe = deps.onSignOutcome ?? noObserver;
    const store = deps.store;
    const events = deps.events ?? new EventBuilder(deps.store, undefined);
    const keyStores = KeyStores.of(deps.keyStore);
    const now = deps.now ?? (() => new Date());
    const audit = auditTo(store, now);
    const policy = new PolicyCheck({ store, policy: deps.policy, now, audit });
    const recorder = new SignatureRecorder({ store, keyStores, now, observe, audit });
    const keys = new TenantKeys({
      store,
      keyStores,
      events,
      now,
      audit,
      beforeSigningKeyRead: deps.beforeSigningKeyRead,
    });
    const held = new HeldRequests({
      store,
      events,
      now,
      observe,
      audit,
      keys,
      approvalLifetimeMs: deps.approvalLifetimeMs ?? 24 * 3600 * 1000,
      approvalRetryWindowMs: deps.approvalRetryWindowMs ?? DEFAULT_APPROVAL_RETRY_WINDOW_MS,
    });
    this.keys = keys;
    this.held = held;
    this.signer = new Signer({ store, events, observe, audit, keys, policy, recorder, held });
    this.approvals = new Approvals({ store, events, now, audit, keys, policy, recorder, held });
    this.batches = new BatchSigner({ store, events, observe, audit, keys, policy, recorder, held });
  }

  createTenant(tenantId: string, keySpec: KeySpec, actor: string): Promise<{ tenant: TenantRecord; key: KeyRecord }> {
    return this.keys.createTenant(tenantId, keySpec, actor);
  }

  rotateKey(tenantId: string, actor: string, keySpec?: KeySpec): Promise<{ key: KeyRecord; keys: KeyRecord[] }> {
    return this.keys.rotateKey(tenantId, actor, keySpec);
  }

  /** The tenant's current key, or the version named by `keyId` (tenant-keys.ts). */
  getKey(tenantId: string, keyId?: string): Promise<KeyRecord> {
    return this.keys.getKey(tenantId, keyId);
  }

  listKeys(tenantId: string): Promise<KeyRecord[]> {
    return this.keys.listKeys(tenantId);
  }

  /** `sign` (signer.ts). */
  sign(req: SignRequest & { algorithm: SigningAlgorithm }): Promise<SignOutcome> {
    return this.signer.sign(req);
  }

  /** `pkcs11_sign` (signer.ts). */
  pkcs11Sign(req: SignRequest & { keySpec?: KeySpec; pss: boolean }): Promise<SignOutcome> {
    return this.signer.pkcs11Sign(req);
  }

  /** `sign_batch` (batch-signer.ts). */
  signBatch(req: BatchSignRequest): Promise<BatchOutcome | Pending> {
    return this.batches.signBatch(req);
  }

  /** sign_batch with a request_id: a held batch's outcome, against the same digests (batch-signer.ts). */
  collectBatch(tenantId: string, requestId: string, digests: Buffer[]): Promise<BatchOutcome | Pending> {
    return this.batches.collect(tenantId, requestId, digests);
  }

  /** The requester collects the outcome of a held request (held-requests.ts). */
  collect(tenantId: string, requestId: string, digest: Buffer): Promise<SignOutcome> {
    return this.held.collect(tenantId, requestId, digest);
  }

  /** approve_sign, and the console's Approve and Reject (approvals.ts). */
  decide(...args: Parameters<Approvals['decide']>): Promise<ApprovalResult> {
    return this.approvals.decide(...args);
  }
}
