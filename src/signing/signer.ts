// A signing request for one digest decided and signed: the key's current version (the one the request is pinned
// to, if it names one: tenant-keys.ts signingKey), the decision step (decision-step.ts: velocity limits, then the
// rules, a denial recorded), then a signature at once or a request held for a person's decision.

import { algorithmForPkcs11, checkSigningRequest, type KeySpec, type SigningAlgorithm } from '../crypto/algorithms.js';
import { ApiError } from '../errors.js';
import { type EventBuilder, eventInputs } from '../events/event-builder.js';
import type { KeyRecord, Store } from '../store/store.js';
import { type DecisionDeps, decide } from './decision-step.js';
import type { HeldRequests } from './held-requests.js';
import type { PolicyCheck } from './policy-check.js';
import { checkPureEd25519Request, pureEd25519NotHeld } from './pure-ed25519.js';
import type { Audit } from './service-audit.js';
import type { SignOutcome, SignOutcomeObserver, SignRequest } from './sign-outcome.js';
import type { SignatureRecorder } from './signature-recorder.js';
import type { TenantKeys } from './tenant-keys.js';

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
  private readonly keys: TenantKeys;
  private readonly recorder: SignatureRecorder;
  private readonly held: HeldRequests;
  /** What the decision step uses (decision-step.ts). */
  private readonly decisionDeps: DecisionDeps;

  constructor(deps: SignerDeps) {
    this.keys = deps.keys;
    this.recorder = deps.recorder;
    this.held = deps.held;
    this.decisionDeps = deps;
  }

  /** `sign`: the caller names the algorithm (KMS names); it must fit the key and the digest. */
  async sign(req: SignRequest & { algorithm: SigningAlgorithm }): Promise<SignOutcome> {
    const key = await this.keys.signingKey(req.tenantId, req.expectedKeyId);
    // A message is signed only by pure Ed25519; without one, pure Ed25519 is refused by checkSigningRequest's words.
    if (req.message !== undefined) checkPureEd25519Request(key.keySpec, req.algorithm, req.message);
    else checkSigningRequest(key.keySpec, req.algorithm, req.digest);
    return this.decideAndSign(key, req.algorithm, req);
  }

  /** `pkcs11_sign`: the algorithm follows from the key spec, the digest length and `pss`. */
  async pkcs11Sign(req: SignRequest & { keySpec?: KeySpec; pss: boolean }): Promise<SignOutcome> {
    if (req.message !== undefined) {
      throw new ApiError('invalid_request', 'pkcs11_sign takes a digest; a message is signed only with pure Ed25519');
    }
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
    const { decision, about, wantsSignedEvent, start } = await decide(this.decisionDeps, {
      key,
      algorithm,
      req,
      hash: req.digest.toString('base64'),
      // A held request is signed on approval from what its record keeps, and that is never the message.
      ...(req.message !== undefined && { refuseHold: pureEd25519NotHeld }),
    });
    if (decision.outcome !== 'allow') {
      return this.held.holdForDecision(key, algorithm, req, decision, about, start);
    }
    // signature.signed for every signature made at once, where a subscription of the tenant wants it: read by the
    // dispatcher from the `signed` entry, which then carries the inputs the event shows (docs/events.md).
    const toldByLog = (await wantsSignedEvent) ? { eventInputs: eventInputs(req.context) } : undefined;
    return this.recorder.signNow({
      key,
      algorithm,
      digest: req.digest,
      ...(req.message !== undefined && { message: req.message }),
      callerId: req.callerId,
      action: req.action ?? 'sign',
      details: about,
      start,
      toldByLog,
      signOptions: req.pssSaltLength === undefined ? undefined : { pssSaltLength: req.pssSaltLength },
    });
  }
}
