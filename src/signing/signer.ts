// A signing request decided and signed: the key's current version (the one the request is pinned to, if it names
// one: tenant-keys.ts signingKey), the policy (velocity limits, then the rules),
// then a signature at once, a denial, or a request held for a person's decision.

import { performance } from 'node:perf_hooks';
import { algorithmForPkcs11, checkSigningRequest, type KeySpec, type SigningAlgorithm } from '../crypto/algorithms.js';
import { ApiError } from '../errors.js';
import type { EventBuilder, PolicyDecided } from '../events/event-builder.js';
import type { KeyRecord, Store } from '../store/store.js';
import type { HeldRequests } from './held-requests.js';
import { denial, type PolicyCheck } from './policy-check.js';
import type { Audit } from './service-audit.js';
import type { SignOutcome, SignOutcomeObserver, SignRequest } from './sign-outcome.js';
import type { SignatureRecorder } from './signature-recorder.js';
import type { TenantKeys } from './tenant-keys.js';
import { workloadAuditDetails } from './workload-context.js';

export interface SignerDeps {
  store: Store;
  events: EventBuilder;
  observe: SignOutcomeObserver;
  audit: Audit;
  keys: TenantKeys;
  policy: PolicyCheck;
  recorder: SignatureRecorder;
  held: HeldRequests;
}

export class Signer {
  private readonly store: Store;
  private readonly events: EventBuilder;
  private readonly observe: SignOutcomeObserver;
  private readonly audit: Audit;
  private readonly keys: TenantKeys;
  private readonly policy: PolicyCheck;
  private readonly recorder: SignatureRecorder;
  private readonly held: HeldRequests;

  constructor(deps: SignerDeps) {
    this.store = deps.store;
    this.events = deps.events;
    this.observe = deps.observe;
    this.audit = deps.audit;
    this.keys = deps.keys;
    this.policy = deps.policy;
    this.recorder = deps.recorder;
    this.held = deps.held;
  }

  /** `sign`: the caller names the algorithm (KMS names); it must fit the key and the digest. */
  async sign(req: SignRequest & { algorithm: SigningAlgorithm }): Promise<SignOutcome> {
    const key = await this.keys.signingKey(req.tenantId, req.expectedKeyId);
    checkSigningRequest(key.keySpec, req.algorithm, req.digest);
    return this.decideAndSign(key, req.algorithm, req);
  }

  /** `pkcs11_sign`: the algorithm follows from the key spec, the digest length and `pss`. */
  async pkcs11Sign(req: SignRequest & { keySpec?: KeySpec; pss: boolean }): Promise<SignOutcome> {
    const key = await this.keys.signingKey(req.tenantId, req.expectedKeyId);
    if (req.keySpec !== undefined && req.keySpec !== key.keySpec) {
      throw new ApiError(
        'key_spec_mismatch',
        `key_spec ${req.keySpec} does not match tenant ${req.tenantId}'s current key (${key.keySpec})`,
      );
    }
    const algorithm = algorithmForPkcs11(key.keySpec, req.digest, req.pss);
    return this.decideAndSign(key, algorithm, req);
  }

  private async decideAndSign(key: KeyRecord, algorithm: SigningAlgorithm, req: SignRequest): Promise<SignOutcome> {
    this.keys.requireUsable(key);
    const start = performance.now();
    // Asked now, in the turn the key was read in: the cache's epoch check (one round trip on PostgreSQL) is then
    // the one that turn made already. Awaited only if the policy allows; a failure then fails the request.
    const told = this.store.wantsEvent(req.tenantId, 'signature.signed');
    told.catch(() => undefined);
    const workload = req.workload ? { workload: workloadAuditDetails(req.workload) } : {};
    await this.policy.enforceVelocity(key, algorithm, req, workload);
    const decision = await this.policy.evaluate(key, algorithm, req.callerId, req.tenantId, req.context);
    const about = {
      key_id: key.id,
      algorithm,
      hash: req.digest.toString('base64'),
      rule: decision.rule,
      reason: decision.reason,
      inputs_digest: decision.inputsDigest,
      ...(req.personId && { person: req.personId }),
      ...workload,
      ...(req.via && { via: req.via }),
      ...(req.pssSaltLength !== undefined && { pss_salt_length: req.pssSaltLength }),
    };
    const decided: PolicyDecided = {
      tenantId: req.tenantId,
      keyId: key.id,
      algorithm,
      digest: req.digest.toString('base64'),
      rule: decision.rule,
      reason: decision.reason,
      inputs: req.context as Record<string, unknown>,
      requester: req.callerId,
    };
    if (decision.outcome === 'deny') {
      const denied = await this.events.denied({
        ...decided,
        ...(decision.vulnId !== undefined && { vulnId: decision.vulnId }),
        ...(decision.fixVersion !== undefined && { fixVersion: decision.fixVersion }),
      });
      await this.audit(
        req.tenantId,
        req.callerId,
        req.action ?? 'sign',
        'denied',
        { ...about, vuln_id: decision.vulnId, fix_version: decision.fixVersion },
        [denied],
      );
      this.observe('denied', algorithm, req.tenantId, (performance.now() - start) / 1000);
      throw denial(decision);
    }
    if (decision.outcome !== 'allow') return this.held.holdForDecision(key, algorithm, req, decision, about, start);
    // signature.signed for every signature made at once, where a subscription of the tenant wants it (docs/events.md).
    const signedEvent = (await told)
      ? await this.events.signedAtOnce({ ...decided, personId: req.personId ?? null })
      : undefined;
    return this.recorder.signNow(
      key,
      algorithm,
      req.digest,
      req.callerId,
      req.action ?? 'sign',
      about,
      start,
      signedEvent,
      undefined,
      req.pssSaltLength === undefined ? undefined : { pssSaltLength: req.pssSaltLength },
    );
  }
}
