// A signature made by the key version's key store and recorded, with its audit entry, before it is handed out; and
// the key stores' outages in the audit log.

import { createHash } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { SigningAlgorithm } from '../crypto/algorithms.js';
import {
  type KeyStoreOutage,
  type KeyStores,
  type MadeSignature,
  outageOf,
  type SignOptions,
  signMany,
} from '../keys/key-store.js';
import type { SignatureAction } from '../store/records/audit-vocabulary.js';
import type { EventInput } from '../store/records/event-kinds.js';
import type { AuditEntryInput, CompletedBatch, KeyRecord, Store } from '../store/store.js';
import { BatchTree } from '../transparency/batch-tree.js';
import { signatureSha256Of } from '../transparency/verify/batch-item.js';
import { answeringIdempotently, idempotencyRecordOf } from './idempotent-request.js';
import type { Audit } from './service-audit.js';
import type { Signed, SignOutcomeObserver } from './sign-outcome.js';
import { timeOrderedId } from './time-ordered-id.js';

/**
 * The held request a signature is made for (an approval): completed in the commit of the signature's record and
 * `signed` entry, with the events of its approval (group-commit.ts: RequestCompletion).
 */
export interface CompletesRequest {
  requestId: string;
  /** The approval's events (signature.approved, signature.signed), given the signature record's id. */
  events: (signatureId: string) => EventInput[];
}

/** The held batch an approval signs for: completed in the one commit of all its signatures (recordBatch). */
export interface CompletesBatch {
  requestId: string;
  /** The batch with every digest's result, given the signatures made (entry: index among the write's entries). */
  batch: (recorded: ReadonlyArray<{ signature: string; signature_id: string; entry: number }>) => CompletedBatch;
}

/** A batch's signatures for recordBatch: one `signed` entry records them all. */
export interface BatchToRecord {
  key: KeyRecord;
  algorithm: SigningAlgorithm;
  callerId: string;
  /** The entry's action (sign_batch, approve_sign). */
  action: SignatureAction;
  /** The entry's details besides `batch` (the decision's facts: key, algorithm, policy inputs, via). */
  details: Record<string, unknown>;
  /** What names the batch (details.batch: its id, size, digests_sha256); the root and count are added. */
  batch: Record<string, unknown>;
  /** The signatures made, each with its digest's index in the request (failed digests are absent). */
  made: ReadonlyArray<{ index: number; digest: Buffer; signature: Buffer }>;
  /**
   * The outbox events of the batch, given the signatures' ids: an approved held batch's (signature.approved and each
   * signature's signature.signed, ordered with its request's other events).
   */
  events?: ((signatureIds: readonly string[]) => EventInput[]) | undefined;
  /**
   * A batch made at once (sign_batch) for a tenant with a subscription that wants signature.signed: the dispatcher
   * reads each signature's event from the entry and its items (docs/events.md, "Events read from the log"), so the
   * entry carries the policy inputs the events show (`event_inputs`, when there are any) and no outbox row is written.
   */
  toldByLog?: { eventInputs: Record<string, unknown> } | undefined;
  completes?: CompletesBatch | undefined;
  /** When the request's decision started (for /metrics); default now. */
  start?: number | undefined;
}

/**
 * A batched signature's id: its batch entry's details.signature_id, a dot, and its index in the request (the
 * entry is the batch's one record; docs/api.md, sign_batch).
 */
export function batchSignatureId(entrySignatureId: string, index: number): string {
  return `${entrySignatureId}.${index}`;
}

/** One signature for signNow: what signs what, for whom, and what its record and `signed` entry carry. */
export interface SignNowRequest {
  key: KeyRecord;
  algorithm: SigningAlgorithm;
  digest: Buffer;
  /** Pure Ed25519: the message the key store signs; `digest`, its SHA-512, is what the record names. */
  message?: Buffer | undefined;
  callerId: string;
  /** The audit entry's action (sign, pkcs11_sign, sign_batch, approve_sign). */
  action: SignatureAction;
  /** The `signed` entry's details. */
  details: Record<string, unknown>;
  /** When the request's decision started (for /metrics); default now. */
  start?: number | undefined;
  /**
   * A subscription of the tenant wants signature.signed, which the dispatcher reads from this `signed` entry
   * (docs/events.md, "Events read from the log"): the entry carries the policy inputs the event shows
   * (`event_inputs`, when there are any), and is never written ahead of the signature.
   */
  toldByLog?: { eventInputs: Record<string, unknown> } | undefined;
  completes?: CompletesRequest | undefined;
  signOptions?: SignOptions | undefined;
}

/** A batch's digests for signManyUnrecorded: signNow's request for many digests, less what only a record carries. */
export type UnrecordedSignRequest = Pick<
  SignNowRequest,
  'key' | 'algorithm' | 'callerId' | 'action' | 'start' | 'signOptions'
> & {
  digests: readonly Buffer[];
};

export interface SignatureRecorderDeps {
  store: Store;
  keyStores: KeyStores;
  now: () => Date;
  observe: SignOutcomeObserver;
  audit: Audit;
}

export class SignatureRecorder {
  private readonly store: Store;
  private readonly keyStores: KeyStores;
  private readonly now: () => Date;
  private readonly observe: SignOutcomeObserver;
  private readonly audit: Audit;
  /** The commit of each outage's start entry: a request refused in the outage is answered after it. */
  private readonly outageStarts = new WeakMap<KeyStoreOutage, Promise<void>>();

  constructor(deps: SignatureRecorderDeps) {
    this.store = deps.store;
    this.keyStores = deps.keyStores;
    this.now = deps.now;
    this.observe = deps.observe;
    this.audit = deps.audit;
    for (const keyStore of this.keyStores.stores) keyStore.reportOutages?.((outage) => this.auditOutage(outage));
  }

  /**
   * A key store outage's start, and its end with the count of signing requests refused meanwhile (each one counted
   * there has no sign_failed entry of its own; docs/policy.md). Best effort: if the store cannot write either, the
   * end entry still names the start, and the service's log has both.
   */
  private auditOutage(outage: KeyStoreOutage): void {
    const endedAt = outage.endedAt;
    const details = {
      key_store: outage.keyStore,
      fault: outage.fault,
      started_at: outage.startedAt.toISOString(),
      ...(endedAt && { ended_at: endedAt.toISOString(), refused: outage.refused }),
    };
    const written = this.audit(null, 'service', 'key_store_outage', endedAt ? 'ended' : 'started', details).catch(
      () => undefined,
    );
    if (!endedAt) this.outageStarts.set(outage, written);
  }

  /**
   * Signs, and records the signature and its `signed` audit entry (one transaction) before handing it out: a
   * signature the store could not record is never handed out. A store that commits on a thread of its own gets
   * both ahead of the signature, so the commit runs while the key store signs; if the key store then fails, the
   * record is withdrawn and a `sign_failed` entry naming it follows in the log. A store that commits on the event
   * loop gets them right after the signature: there the commit could not overlap an inline signature anyway, and
   * writing ahead cost 10-20% of the throughput under load (docs/benchmarks.md).
   *
   * `toldByLog`: a subscription reads the signature's signature.signed event from the `signed` entry itself, so
   * the entry always follows the signature: an event read from an entry written ahead could be delivered before a
   * key store failure withdrew its signature.
   *
   * `completes` names the held request an approval signs for: it moves to `approved` with the signature in the
   * same transaction (so after the signature, which it holds), and its events go with it. A process killed at any
   * moment leaves either no `signed` entry and the request in `signing`, or both the entry and the request
   * approved with the signature its approver's retry gets.
   */
  async signNow(request: SignNowRequest): Promise<Signed> {
    const { key, algorithm, digest, callerId, action, toldByLog, completes, signOptions } = request;
    const eventInputs = toldByLog && Object.keys(toldByLog.eventInputs).length > 0 ? toldByLog.eventInputs : undefined;
    const details = eventInputs ? { ...request.details, event_inputs: eventInputs } : request.details;
    const start = request.start ?? performance.now();
    // `signature`: known when the entry follows the signature; its SHA-256 then goes on the entry's row.
    const record = (signature?: Buffer): { id: string; written: Promise<number | undefined> } => {
      const at = this.now();
      const { id, audit, signatureSha256 } = this.signedEntry(key, callerId, action, details, at, signature);
      const events = completes?.events(id) ?? [];
      // A request with an Idempotency-Key: its record rides in this commit (never ahead: it holds the signature).
      // Not for a held request's signature, whose answer names the request: the door keeps that one itself.
      const idempotency =
        signature && completes === undefined
          ? idempotencyRecordOf([{ kind: 'signed', signature, keyId: key.id, algorithm, signatureId: id }])
          : undefined;
      const written = this.store.signatures.recordSigned(
        audit,
        signatureSha256,
        events.length > 0 ? events : undefined,
        completes &&
          signature && {
            id: completes.requestId,
            signature: signature.toString('base64'),
            updated_at: at.toISOString(),
          },
        idempotency,
      );
      return { id, written };
    };
    // Not ahead while the key store is known to be away: the record would only be withdrawn again.
    const ahead =
      this.store.signatures.writesOnThread &&
      toldByLog === undefined &&
      completes === undefined &&
      !answeringIdempotently() &&
      this.keyStores.outageOf(key.keyStore) === undefined
        ? record()
        : undefined;
    // The commit may fail while a signing thread still works; it is awaited below, but a rejection with no
    // handler meanwhile would end the process (Node's default for unhandled rejections).
    ahead?.written.catch(() => undefined);
    let signature: Buffer;
    try {
      signature = await this.keyStores
        .forKey(key.keyStore)
        .sign(key.keyRef, key.keySpec, algorithm, request.message ?? digest, signOptions);
    } catch (err) {
      await this.recordFailure(key, algorithm, digest, callerId, action, err, ahead);
      this.observe('failed', algorithm, key.tenantId, (performance.now() - start) / 1000);
      throw err;
    }
    const made = ahead ?? record(signature);
    let seq: number | undefined;
    try {
      seq = await made.written;
    } catch (err) {
      this.observe('failed', algorithm, key.tenantId, (performance.now() - start) / 1000);
      throw err;
    }
    // Its event is read from the entry just committed: the dispatcher passes soon (as an outbox row's writer nudges it).
    if (toldByLog) this.store.events.onWritten?.();
    // Written ahead, the entry could not name the signature: its SHA-256 is set on the entry's row by a later
    // group commit, not waited for (a crash before that loses only the hash: the entry is still found by its
    // digest; docs/api.md, "Signbridge-Log-Index").
    if (ahead && seq !== undefined) {
      this.store.signatures
        .recordLookup({ auditSeq: seq, signatureSha256: createHash('sha256').update(signature).digest() })
        .catch(() => undefined);
    }
    this.observe('signed', algorithm, key.tenantId, (performance.now() - start) / 1000);
    return {
      kind: 'signed',
      signature,
      keyId: key.id,
      algorithm,
      signatureId: made.id,
      ...(seq !== undefined && { logIndex: seq - 1 }),
    };
  }

  /**
   * Signs a batch's digests at the key store (its batch path: a slice per signing thread) and hands the signatures
   * back unrecorded, in the digests' order, for recordBatch to record together. A digest that failed is recorded as
   * signNow records a failure (a sign_failed entry, or the outage's count) and stays failed in its place.
   */
  async signManyUnrecorded(request: UnrecordedSignRequest): Promise<MadeSignature[]> {
    const { key, algorithm, digests, callerId, action, signOptions } = request;
    const start = request.start ?? performance.now();
    let made: MadeSignature[];
    try {
      const store = this.keyStores.forKey(key.keyStore);
      made = await signMany(store, key.keyRef, key.keySpec, algorithm, digests, signOptions);
    } catch (error) {
      // No key store to ask (not configured here): every digest fails with that error.
      made = digests.map(() => ({ kind: 'failed', error }));
    }
    await Promise.all(
      made.map(async (m, i) => {
        if (m.kind === 'made') return;
        await this.recordFailure(key, algorithm, digests[i] as Buffer, callerId, action, m.error);
        this.observe('failed', algorithm, key.tenantId, (performance.now() - start) / 1000);
      }),
    );
    return made;
  }

  /**
   * Records a batch's signatures (signManyUnrecorded's) as one `signed` entry with its items, in one transaction with
   * their events and, for an approved held batch, the completion of its request: a process killed at any moment
   * leaves either none of them (and the request in `signing`), or all of them (and the request approved with every
   * result its requester collects). The entry's details.batch carries the Merkle root over the items and their
   * count (`signed`), so that each signature proves by its path in the batch plus the entry's inclusion in the log
   * (docs/transparency.md, "A batch's items"). Each signature's id is the entry's signature_id and its index
   * (batchSignatureId); answers them in `made`'s order, all on the entry's log index.
   */
  async recordBatch(batch: BatchToRecord): Promise<Signed[]> {
    const { key, algorithm, callerId, action, made, completes, toldByLog } = batch;
    const start = batch.start ?? performance.now();
    const eventInputs = toldByLog && Object.keys(toldByLog.eventInputs).length > 0 ? toldByLog.eventInputs : undefined;
    const at = this.now();
    const id = timeOrderedId(at.getTime());
    const items = made.map((m) => ({
      index: m.index,
      digest: m.digest,
      signatureSha256: signatureSha256Of(m.signature),
    }));
    const root = new BatchTree(items).root();
    const audit: AuditEntryInput = {
      at: at.toISOString(),
      tenantId: key.tenantId,
      actor: callerId,
      action,
      outcome: 'signed',
      details: {
        ...batch.details,
        ...(eventInputs && { event_inputs: eventInputs }),
        batch: { ...batch.batch, signed: items.length, root: root.toString('base64') },
        key_store: key.keyStore,
        signature_id: id,
      },
    };
    const ids = made.map((m) => batchSignatureId(id, m.index));
    const signed = made.map(
      (m, i): Signed => ({ kind: 'signed', signature: m.signature, keyId: key.id, algorithm, signatureId: ids[i] }),
    );
    // A sign_batch with an Idempotency-Key: its record rides in this commit (not an approved held batch's).
    const batchId = typeof batch.batch.id === 'string' ? batch.batch.id : undefined;
    const idempotency = completes === undefined ? idempotencyRecordOf(signed, batchId) : undefined;
    const seconds = () => (performance.now() - start) / 1000;
    let seq: number | undefined;
    try {
      seq = await this.store.signatures.recordBatch(
        audit,
        items,
        batch.events?.(ids) ?? [],
        completes && {
          id: completes.requestId,
          updated_at: at.toISOString(),
          batch: completes.batch(
            made.map((m, i) => ({
              signature: m.signature.toString('base64'),
              signature_id: ids[i] as string,
              entry: 0,
            })),
          ),
        },
        idempotency,
      );
    } catch (err) {
      for (const _ of made) this.observe('failed', algorithm, key.tenantId, seconds());
      throw err;
    }
    // Its events are read from the entry just committed: the dispatcher passes soon (as an outbox row's writer nudges it).
    if (toldByLog) this.store.events.onWritten?.();
    for (const _ of made) this.observe('signed', algorithm, key.tenantId, seconds());
    return signed.map((one) => (seq !== undefined ? { ...one, logIndex: seq - 1 } : one));
  }

  /**
   * A signature's `signed` entry, which is its record (issue 46: one row per signature): its id, the key, the
   * algorithm and the digest (in `details`, the decision's facts: key_id, algorithm, hash) and which key store signed (the software store, the
   * token and AWS KMS differ in what they guarantee). An entry that follows its signature names it (SHA-256 of its
   * bytes, also the entry row's lookup key), so the transparency log proves which signature this entry is about
   * (`signbridge audit prove --signature`); one written ahead cannot (its row gets the hash later: recordLookup).
   */
  private signedEntry(
    key: KeyRecord,
    callerId: string,
    action: SignatureAction,
    details: Record<string, unknown>,
    at: Date,
    signature?: Buffer,
  ): { id: string; audit: AuditEntryInput; signatureSha256: Buffer | undefined } {
    const signatureSha256 = signature && createHash('sha256').update(signature).digest();
    const id = timeOrderedId(at.getTime());
    return {
      id,
      signatureSha256,
      audit: {
        at: at.toISOString(),
        tenantId: key.tenantId,
        actor: callerId,
        action,
        outcome: 'signed',
        details: {
          ...details,
          key_store: key.keyStore,
          signature_id: id,
          ...(signatureSha256 && { signature_sha256: signatureSha256.toString('hex') }),
        },
      },
    };
  }

  /**
   * Every allowed request the key store failed is recorded once, whichever way the store commits: a sign_failed
   * entry (withdrawing a record written `ahead`, after that record's own commit, failed or not, so the withdrawal
   * follows it in the log), or, refused during a key store outage that has not ended yet, a count in that outage's
   * end entry. Never throws: the key store's error is the one to report.
   */
  private async recordFailure(
    key: KeyRecord,
    algorithm: SigningAlgorithm,
    digest: Buffer,
    callerId: string,
    action: SignatureAction,
    err: unknown,
    ahead?: { id: string; written: Promise<number | undefined> },
  ): Promise<void> {
    const failed = (signatureId?: string): AuditEntryInput => ({
      at: this.now().toISOString(),
      tenantId: key.tenantId,
      actor: callerId,
      action,
      outcome: 'sign_failed',
      details: {
        ...(signatureId !== undefined && { signature_id: signatureId }),
        key_id: key.id,
        key_store: key.keyStore,
        algorithm,
        hash: digest.toString('base64'),
        error: err instanceof Error ? err.message : String(err),
      },
    });
    const recorded =
      ahead !== undefined &&
      (await ahead.written.then(
        () => true,
        () => false,
      ));
    const outage = outageOf(err);
    const audited = recorded
      ? this.store.signatures.withdraw(ahead.id, failed(ahead.id))
      : outage?.countRefusal()
        ? this.outageStarts.get(outage)
        : this.store.audit.append(failed());
    await audited?.catch(() => undefined);
  }
}
