// `sign_batch` (docs/api.md): many digests with one set of policy inputs, one velocity count of all of them, one
// policy decision, then every digest signed at the key store side by side, and the batch recorded once
// (signature-recorder.ts: recordBatch): one `signed` audit entry and one transparency-log leaf whose details.batch
// holds the Merkle root over its items, each item (its index, digest and signature hash) a row of batch_items, so
// that each signature proves by its path in the batch plus the entry's inclusion (docs/transparency.md, "A batch's
// items"). A denied batch writes one `denied` entry (naming the batch's digests by their SHA-256 and count); a
// batch the policy would hold for a person is one signing request for all its digests (held-requests.ts, with
// pending_requests.batch): approved once, signed and recorded the same way at approval (approvals.ts), collected
// whole with sign_batch, its request_id and the same digests (collect below).
import { randomUUID } from 'node:crypto';
import { algorithmForPkcs11, checkSigningRequest, type KeySpec, type SigningAlgorithm } from '../crypto/algorithms.js';
import { ApiError, type ErrorCode } from '../errors.js';
import { eventInputs } from '../events/event-builder.js';
import type { MadeSignature } from '../keys/key-store.js';
import type { KeyRecord, PendingRequestRecord } from '../store/store.js';
import { type BatchItem, batchDigest } from './batch-items.js';
import { decide } from './decision-step.js';
import type { Pending, Signed, SignRequest } from './sign-outcome.js';
import type { SignerDeps } from './signer.js';

/** The most digests one batch may carry (the request schema's limit too). */
export const BATCH_MAX = 1000;

/**
 * `expectedKeyId` pins the batch to the key version its digests were built from, and `pssSaltLength` (Vault
 * transit's salt_length) is every digest's salt, at once or at the approval of a held batch.
 */
export interface BatchSignRequest extends Omit<SignRequest, 'digest' | 'action'> {
  digests: Buffer[];
  /** As `sign`; or, without it, as `pkcs11_sign` from the key spec, each digest's length and `pss`. */
  algorithm?: SigningAlgorithm;
  keySpec?: KeySpec;
  pss?: boolean;
}

export interface BatchOutcome {
  kind: 'signed';
  /** Names the batch in each of its entries (details.batch.id): the request's id for a batch that was held. */
  batchId: string;
  keyId: string;
  algorithm: SigningAlgorithm;
  items: BatchItem[];
}

export type BatchSignerDeps = SignerDeps;

export class BatchSigner {
  constructor(private readonly deps: BatchSignerDeps) {}

  async signBatch(req: BatchSignRequest): Promise<BatchOutcome | Pending> {
    const { keys } = this.deps;
    if (req.digests.length === 0 || req.digests.length > BATCH_MAX) {
      throw new ApiError('invalid_request', `hashes must hold 1 to ${BATCH_MAX} digests, got ${req.digests.length}`);
    }
    const key = await keys.signingKey(req.tenantId, req.expectedKeyId);
    const algorithm = this.algorithmOf(key, req);
    keys.requireUsable(key);
    const batchId = randomUUID();
    const batch = {
      id: batchId,
      size: req.digests.length,
      // What the batch was, in one hash: SHA-256 over its digests in order.
      digests_sha256: batchDigest(req.digests).toString('hex'),
    };
    const first = { ...req, action: 'sign_batch' as const, digest: req.digests[0] as Buffer };
    // One decision for the batch, as for one digest; each digest's `hash` goes in its own entry below.
    const { decision, about, wantsSignedEvent, start } = await decide(this.deps, {
      key,
      algorithm,
      req: first,
      batch: { details: batch, size: batch.size },
    });
    if (decision.outcome !== 'allow') {
      // One request for the whole batch: its `hash` is the batch's digest, its digests are kept with it.
      const held = await this.deps.held.holdForDecision(
        key,
        algorithm,
        { ...first, digest: batchDigest(req.digests) },
        decision,
        { ...about, hash: batchDigest(req.digests).toString('base64'), batch: { size: batch.size } },
        start,
        { hashes: req.digests.map((d) => d.toString('base64')) },
      );
      if (held.kind === 'pending') return held;
      // A repeat of a batch approved within the retry window: its signatures, as collecting it gives them.
      return this.approvedBatch(await this.deps.held.pendingRequest(req.tenantId, held.requestId as string));
    }
    const wantsEvent = await wantsSignedEvent;
    const signOptions = req.pssSaltLength === undefined ? undefined : { pssSaltLength: req.pssSaltLength };
    // Every digest signed at the key store first (a slice per signing thread), then the batch recorded as one
    // `signed` entry with its items: a process killed before that commit hands out nothing and logs nothing.
    const signatures = await this.deps.recorder.signManyUnrecorded({
      key,
      algorithm,
      digests: req.digests,
      callerId: req.callerId,
      action: 'sign_batch',
      start,
      signOptions,
    });
    const made = signatures.flatMap((s, index) =>
      s.kind === 'made' ? [{ index, digest: req.digests[index] as Buffer, signature: s.signature }] : [],
    );
    const failed = (s: MadeSignature): BatchItem => ({ kind: 'failed', error: (s as { error: unknown }).error });
    if (made.length === 0) return { kind: 'signed', batchId, keyId: key.id, algorithm, items: signatures.map(failed) };
    const { hash: _first, ...details } = about;
    const recorded = await this.deps.recorder.recordBatch({
      key,
      algorithm,
      callerId: req.callerId,
      action: 'sign_batch',
      details,
      batch,
      made,
      // Each signature's signature.signed is read from the entry and its items by the dispatcher (docs/events.md,
      // "Events read from the log"): no outbox or delivery row for a batch made at once.
      toldByLog: wantsEvent ? { eventInputs: eventInputs(req.context) } : undefined,
      start,
    });
    const byIndex = new Map(made.map((m, i) => [m.index, recorded[i] as Signed]));
    const items = signatures.map((s, index): BatchItem => {
      const signed = byIndex.get(index);
      return signed ? { kind: 'signed', signed } : failed(s);
    });
    return { kind: 'signed', batchId, keyId: key.id, algorithm, items };
  }

  /**
   * sign_batch with a request_id: the outcome of a batch held as one request, released only against the same
   * digests in the same order. 202 while it waits, every digest's result once approved, 403 once rejected, expired
   * or denied at approval (as collecting one held signature).
   */
  async collect(tenantId: string, requestId: string, digests: Buffer[]): Promise<BatchOutcome | Pending> {
    const outcome = await this.deps.held.collect(tenantId, requestId, batchDigest(digests), true);
    if (outcome.kind === 'pending') return outcome;
    return this.approvedBatch(await this.deps.held.pendingRequest(tenantId, requestId));
  }

  /** An approved batch request's results, in the order of its digests. */
  private approvedBatch(request: PendingRequestRecord): BatchOutcome {
    const results = request.batch?.results;
    if (!results) throw new ApiError('internal_error', `request ${request.id} is approved but holds no batch results`);
    return {
      kind: 'signed',
      batchId: request.id,
      keyId: request.keyId,
      algorithm: request.algorithm,
      items: results.map((r): BatchItem => {
        if ('error' in r) return { kind: 'failed', error: new ApiError(r.error.code as ErrorCode, r.error.message) };
        return {
          kind: 'signed',
          signed: {
            kind: 'signed',
            signature: Buffer.from(r.signature, 'base64'),
            keyId: request.keyId,
            algorithm: request.algorithm,
            requestId: request.id,
            logIndex: r.seq - 1,
            signatureId: r.signature_id,
          },
        };
      }),
    };
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
