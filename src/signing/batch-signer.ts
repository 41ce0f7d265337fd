// `sign_batch` (docs/api.md): many digests with one set of policy inputs, one velocity count of all of them, one
// policy decision, then each digest signed through the one-signature path (signature-recorder.ts: its own record,
// `signed` audit entry and transparency-log leaf), all at once, so that their records share group commits and the
// key store's threads sign them side by side. A denied batch writes one `denied` entry (naming the batch's digests
// by their SHA-256 and count); a batch the policy would hold for a person is refused (batch_needs_approval), since
// an approval covers one digest today: such digests are sent one by one.
import { createHash, randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { algorithmForPkcs11, checkSigningRequest, type KeySpec, type SigningAlgorithm } from '../crypto/algorithms.js';
import { ApiError } from '../errors.js';
import type { PolicyDecided } from '../events/event-builder.js';
import type { KeyRecord } from '../store/store.js';
import { denial } from './policy-check.js';
import type { Signed, SignRequest } from './sign-outcome.js';
import type { SignerDeps } from './signer.js';
import { workloadAuditDetails } from './workload-context.js';

/** The most digests one batch may carry (the request schema's limit too). */
export const BATCH_MAX = 1000;

export interface BatchSignRequest extends Omit<SignRequest, 'digest' | 'action'> {
  digests: Buffer[];
  /** As `sign`; or, without it, as `pkcs11_sign` from the key spec, each digest's length and `pss`. */
  algorithm?: SigningAlgorithm;
  keySpec?: KeySpec;
  pss?: boolean;
}

/** One digest's outcome: its signature, or why it alone failed after the batch was allowed. */
export type BatchItem = { kind: 'signed'; signed: Signed } | { kind: 'failed'; error: unknown };

export interface BatchOutcome {
  batchId: string;
  keyId: string;
  algorithm: SigningAlgorithm;
  items: BatchItem[];
}

/** The signer's parts but the held requests (a batch is never held: see above). */
export type BatchSignerDeps = Omit<SignerDeps, 'held'>;

export class BatchSigner {
  constructor(private readonly deps: BatchSignerDeps) {}

  async signBatch(req: BatchSignRequest): Promise<BatchOutcome> {
    const { keys, policy, store } = this.deps;
    if (req.digests.length === 0 || req.digests.length > BATCH_MAX) {
      throw new ApiError('invalid_request', `hashes must hold 1 to ${BATCH_MAX} digests, got ${req.digests.length}`);
    }
    const key = await keys.currentKey(req.tenantId);
    const algorithm = this.algorithmOf(key, req);
    keys.requireUsable(key);
    const start = performance.now();
    const batchId = randomUUID();
    const batch = {
      id: batchId,
      size: req.digests.length,
      // What the batch was, in one hash: SHA-256 over its digests in order.
      digests_sha256: req.digests.reduce((h, d) => h.update(d), createHash('sha256')).digest('hex'),
    };
    const told = store.wantsEvent(req.tenantId, 'signature.signed');
    told.catch(() => undefined);
    const workload = req.workload ? { workload: workloadAuditDetails(req.workload) } : {};
    const first = { ...req, action: 'sign_batch' as const, digest: req.digests[0] as Buffer };
    await policy.enforceVelocity(key, algorithm, first, { ...workload, batch }, req.digests.length);
    const decision = await policy.evaluate(key, algorithm, req.callerId, req.tenantId, req.context);
    const about = {
      key_id: key.id,
      algorithm,
      rule: decision.rule,
      reason: decision.reason,
      inputs_digest: decision.inputsDigest,
      ...(req.personId && { person: req.personId }),
      ...workload,
      ...(req.via && { via: req.via }),
    };
    const decided = (digest: Buffer): PolicyDecided => ({
      tenantId: req.tenantId,
      keyId: key.id,
      algorithm,
      digest: digest.toString('base64'),
      rule: decision.rule,
      reason: decision.reason,
      inputs: req.context as Record<string, unknown>,
      requester: req.callerId,
    });
    if (decision.outcome === 'deny') {
      const denied = await this.deps.events.denied({
        ...decided(first.digest),
        ...(decision.vulnId !== undefined && { vulnId: decision.vulnId }),
        ...(decision.fixVersion !== undefined && { fixVersion: decision.fixVersion }),
      });
      await this.deps.audit(
        req.tenantId,
        req.callerId,
        'sign_batch',
        'denied',
        { ...about, batch, vuln_id: decision.vulnId, fix_version: decision.fixVersion },
        [denied],
      );
      this.deps.observe('denied', algorithm, req.tenantId, (performance.now() - start) / 1000);
      throw denial(decision);
    }
    if (decision.outcome !== 'allow') {
      const reason = `${decision.rule}: ${decision.reason}`;
      await this.deps.audit(req.tenantId, req.callerId, 'sign_batch', 'refused', { ...about, batch, held: reason });
      throw new ApiError(
        'batch_needs_approval',
        `${reason}; the policy holds these signatures for a person's decision, which covers one digest: ` +
          'send them one by one (POST /v1/sign or pkcs11_sign) to open approval requests',
      );
    }
    const wantsEvent = await told;
    const items = await Promise.all(
      req.digests.map(async (digest, index): Promise<BatchItem> => {
        try {
          const signedEvent = wantsEvent
            ? await this.deps.events.signedAtOnce({ ...decided(digest), personId: req.personId ?? null })
            : undefined;
          const signed = await this.deps.recorder.signNow(
            key,
            algorithm,
            digest,
            req.callerId,
            'sign_batch',
            { ...about, hash: digest.toString('base64'), batch: { id: batchId, index, size: batch.size } },
            start,
            signedEvent,
          );
          return { kind: 'signed', signed };
        } catch (error) {
          // The signature-recorder recorded the failure (a sign_failed entry or the outage's count); the caller
          // answers this item with the error, the others still signed.
          return { kind: 'failed', error };
        }
      }),
    );
    return { batchId, keyId: key.id, algorithm, items };
  }

  /** The one algorithm of every digest: named, or worked out as pkcs11_sign does; mixed ones are refused. */
  private algorithmOf(key: KeyRecord, req: BatchSignRequest): SigningAlgorithm {
    if (req.keySpec !== undefined && req.keySpec !== key.keySpec) {
      throw new ApiError(
        'key_spec_mismatch',
        `key_spec ${req.keySpec} does not match tenant ${req.tenantId}'s current key (${key.keySpec})`,
      );
    }
    let algorithm: SigningAlgorithm | undefined;
    for (const [i, digest] of req.digests.entries()) {
      let mine: SigningAlgorithm;
      try {
        if (req.algorithm !== undefined) {
          checkSigningRequest(key.keySpec, req.algorithm, digest);
          mine = req.algorithm;
        } else {
          mine = algorithmForPkcs11(key.keySpec, digest, req.pss ?? false);
        }
      } catch (err) {
        if (err instanceof ApiError) throw new ApiError(err.code, `hashes[${i}]: ${err.message}`, err.details);
        throw err;
      }
      if (algorithm !== undefined && mine !== algorithm) {
        throw new ApiError(
          'invalid_request',
          `hashes[${i}] is for ${mine} but hashes[0] for ${algorithm}: a batch has one algorithm (one digest length)`,
        );
      }
      algorithm = mine;
    }
    return algorithm as SigningAlgorithm;
  }
}
