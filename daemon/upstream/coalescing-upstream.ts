// Concurrent C_Sign calls for one key become one sign_batch request: the daemon's event loop (and the service's)
// pays for one HTTP exchange, one authentication and one policy decision per batch instead of per signature.
//
// Calls join a batch only when they share everything the service decides on (tenant, key spec, padding, digest
// length, policy inputs), so a batch answers each of them as a single request would have. A call is sent at once
// while fewer than `lanes` requests for its group are at the service: a lone signer, or a few concurrent ones, waits
// for nobody. Beyond that, calls wait for the next answer of their group or `windowMs` (≤ 1 ms), whichever is first,
// and go together, up to `maxBatch`.
import type { Logger } from 'pino';
import { WireStatus } from '../../wire/wire.js';
import {
  BatchNeedsApproval,
  BatchUnsupported,
  type CollectInput,
  type PublicKeyInfo,
  type SignBatchInput,
  type SignBatchResult,
  type SignInput,
  type SignResult,
  type Upstream,
  UpstreamError,
} from './upstream.js';

export interface CoalescingOptions {
  /** How long a call may wait for others to join it, ms (0: only those that arrive in the same event-loop turn). */
  windowMs: number;
  /** Digests in one batch at most (the service's signing.batchMax must allow it). */
  maxBatch: number;
  /** Requests of one group at the service at a time before calls start to wait for each other. */
  lanes: number;
  log?: Pick<Logger, 'warn' | 'info'>;
}

export const DEFAULT_COALESCING: Omit<CoalescingOptions, 'log'> = { windowMs: 1, maxBatch: 100, lanes: 2 };

type BatchingUpstream = Upstream & Required<Pick<Upstream, 'signBatch'>>;
type Signed = Extract<SignResult, { kind: 'signed' }>;
type Pending = Extract<SignResult, { kind: 'pending' }>;
type BatchSigned = Extract<SignBatchResult, { kind: 'signed' }>;

interface Waiting {
  input: SignInput;
  resolve(result: SignResult): void;
  reject(err: unknown): void;
}

interface Group {
  id: string;
  queue: Waiting[];
  inFlight: number;
  timer: NodeJS.Timeout | NodeJS.Immediate | undefined;
}

/**
 * A batch the service holds for approval: each caller got its request id and polls with its own digest; the
 * batch is collected whole (request_id and the same digests in the same order, as the service requires) and each
 * caller is handed its own item.
 */
interface HeldBatch {
  batch: Omit<SignBatchInput, 'requestId'>;
  collecting: Promise<SignBatchResult> | undefined;
  signed: BatchSigned | undefined;
  handedOut: boolean[];
}

/** Held batches remembered at most; the oldest is forgotten first (its callers then cannot collect here). */
const MAX_HELD = 1_000;

export class CoalescingUpstream implements Upstream {
  readonly description: string;
  private readonly inner: BatchingUpstream;
  private readonly opts: CoalescingOptions;
  private readonly groups = new Map<string, Group>();
  private readonly held = new Map<string, HeldBatch>();
  /** Off for good once the service says it has no sign_batch. */
  private batching = true;

  constructor(inner: BatchingUpstream, opts: CoalescingOptions) {
    this.inner = inner;
    this.opts = { ...opts, maxBatch: Math.max(1, opts.maxBatch), lanes: Math.max(1, opts.lanes) };
    this.description = inner.description;
    if (inner.consoleUrlFor) this.consoleUrlFor = (requestId) => inner.consoleUrlFor?.(requestId) ?? '';
    if (inner.threadsBusy) this.threadsBusy = () => inner.threadsBusy?.() ?? 0;
  }

  consoleUrlFor?: (requestId: string) => string;
  threadsBusy?: () => number;

  getPublicKey(tenantId: string): Promise<PublicKeyInfo> {
    return this.inner.getPublicKey(tenantId);
  }

  inclusionProof(tenantId: string, index: number): Promise<unknown | 'not-yet'> {
    if (!this.inner.inclusionProof) return Promise.resolve('not-yet');
    return this.inner.inclusionProof(tenantId, index);
  }

  pkcs11Sign(input: SignInput): Promise<SignResult> {
    // sign_batch carries digests only: a message (pure Ed25519) goes alone.
    if (!this.batching || input.message !== undefined) return this.inner.pkcs11Sign(input);
    const id = groupId(input);
    let group = this.groups.get(id);
    if (!group) {
      group = { id, queue: [], inFlight: 0, timer: undefined };
      this.groups.set(id, group);
    }
    const g = group;
    return new Promise<SignResult>((resolve, reject) => {
      g.queue.push({ input, resolve, reject });
      if (g.queue.length >= this.opts.maxBatch || g.inFlight < this.opts.lanes) this.flush(g);
      else if (g.timer === undefined) {
        const flush = () => {
          g.timer = undefined;
          this.flush(g);
        };
        g.timer = this.opts.windowMs > 0 ? setTimeout(flush, this.opts.windowMs) : setImmediate(flush);
      }
    });
  }

  async collect(input: CollectInput): Promise<SignResult> {
    const held = this.held.get(input.requestId);
    if (!held) return this.inner.collect(input);
    if (held.batch.tenantId !== input.tenantId) {
      throw new UpstreamError(
        WireStatus.BAD_REQUEST,
        `request ${input.requestId} belongs to another tenant`,
        input.requestId,
      );
    }
    const index = itemIndex(held, input.digest);
    if (index < 0) {
      throw new UpstreamError(
        WireStatus.BAD_REQUEST,
        `request ${input.requestId} was made for other digests`,
        input.requestId,
      );
    }
    if (!held.signed) {
      held.collecting ??= this.inner.signBatch({ ...held.batch, requestId: input.requestId }).finally(() => {
        held.collecting = undefined;
      });
      let outcome: SignBatchResult;
      try {
        outcome = await held.collecting;
      } catch (err) {
        // Rejected or expired: final for every caller of the batch, each of whom hears it from the service.
        if (
          !(err instanceof UpstreamError) ||
          (err.status !== WireStatus.UNAVAILABLE && err.status !== WireStatus.TIMEOUT)
        ) {
          this.held.delete(input.requestId);
        }
        throw err;
      }
      if (outcome.kind === 'pending') return outcome;
      held.signed = outcome;
    }
    const signed = held.signed;
    held.handedOut[index] = true;
    if (held.handedOut.every(Boolean)) this.held.delete(input.requestId);
    return answerFor(signed, index, input.requestId);
  }

  async close(): Promise<void> {
    // Calls still waiting for a batch were never sent: they fail as a service that went away would fail them.
    for (const group of this.groups.values()) {
      this.clearTimer(group);
      for (const w of group.queue.splice(0)) {
        w.reject(new UpstreamError(WireStatus.UNAVAILABLE, 'the daemon is shutting down; nothing was signed'));
      }
    }
    await this.inner.close();
  }

  /** Sends what waits in the group: one call alone as pkcs11_sign, several as one sign_batch. */
  private flush(group: Group): void {
    this.clearTimer(group);
    const waiting = group.queue.splice(0, this.opts.maxBatch);
    if (waiting.length === 0) return;
    group.inFlight++;
    const sent = waiting.length === 1 ? this.sendOne(waiting[0] as Waiting) : this.sendBatch(waiting);
    void sent.finally(() => {
      group.inFlight--;
      // An answer frees a lane: whoever waited meanwhile goes now, together.
      if (group.queue.length > 0) this.flush(group);
      else if (group.inFlight === 0) this.groups.delete(group.id);
    });
    if (group.queue.length >= this.opts.maxBatch) this.flush(group);
  }

  private async sendOne(w: Waiting): Promise<void> {
    try {
      w.resolve(await this.inner.pkcs11Sign(w.input));
    } catch (err) {
      w.reject(err);
    }
  }

  private async sendBatch(waiting: Waiting[]): Promise<void> {
    const first = (waiting[0] as Waiting).input;
    const batch: Omit<SignBatchInput, 'requestId'> = {
      tenantId: first.tenantId,
      keySpec: first.keySpec,
      pss: first.pss,
      ...(first.keyId !== undefined && { keyId: first.keyId }),
      context: first.context,
      digests: waiting.map((w) => w.input.digest),
    };
    let outcome: SignBatchResult;
    try {
      outcome = await this.inner.signBatch(batch);
    } catch (err) {
      if (err instanceof BatchUnsupported) {
        if (this.batching) this.opts.log?.warn({ reason: err.message }, 'the service cannot batch; signing one by one');
        this.batching = false;
        await Promise.all(waiting.map((w) => this.sendOne(w)));
        return;
      }
      if (err instanceof BatchNeedsApproval) {
        // Each signature becomes a held request of its own, as without coalescing; later batches still batch.
        await Promise.all(waiting.map((w) => this.sendOne(w)));
        return;
      }
      // The whole batch was refused (validation, policy, velocity, outage): each caller hears why.
      for (const w of waiting) w.reject(err);
      return;
    }
    if (outcome.kind === 'pending') {
      this.hold(outcome, batch);
      for (const w of waiting) w.resolve(outcome);
      return;
    }
    waiting.forEach((w, i) => {
      try {
        w.resolve(answerFor(outcome, i));
      } catch (err) {
        w.reject(err);
      }
    });
  }

  private hold(pending: Pending, batch: Omit<SignBatchInput, 'requestId'>): void {
    if (this.held.size >= MAX_HELD) {
      const oldest = this.held.keys().next().value;
      if (oldest !== undefined) this.held.delete(oldest);
    }
    this.held.set(pending.requestId, {
      batch,
      collecting: undefined,
      signed: undefined,
      handedOut: batch.digests.map(() => false),
    });
  }

  private clearTimer(group: Group): void {
    if (group.timer === undefined) return;
    clearTimeout(group.timer as NodeJS.Timeout);
    clearImmediate(group.timer as NodeJS.Immediate);
    group.timer = undefined;
  }
}

/** Everything the service decides on: calls that share it get the answer a single request would have had. */
function groupId(input: SignInput): string {
  const c = input.context;
  return JSON.stringify([
    input.tenantId,
    input.keySpec,
    input.keyId,
    input.pss,
    input.digest.length,
    c.project,
    c.environment,
    c.artifactType,
    c.artifactVersion,
    c.sbom,
  ]);
}

/** The caller's item: the first not yet handed out with its digest (two callers may sign the same digest). */
function itemIndex(held: HeldBatch, digest: Buffer): number {
  let seen = -1;
  for (const [i, d] of held.batch.digests.entries()) {
    if (!d.equals(digest)) continue;
    if (!held.handedOut[i]) return i;
    if (seen < 0) seen = i;
  }
  return seen;
}

/** One item of a signed batch as pkcs11_sign's answer; a failed item throws its own error. */
function answerFor(outcome: BatchSigned, index: number, heldRequestId?: string): Signed {
  const item = outcome.results[index];
  if (!item) throw new UpstreamError(WireStatus.INTERNAL, `sign_batch: no result for item ${index}`);
  if ('error' in item) throw item.error;
  const requestId = heldRequestId ?? outcome.requestId;
  return {
    kind: 'signed',
    signature: item.signature,
    keyId: outcome.keyId,
    algorithm: outcome.algorithm,
    ...(requestId !== undefined && { requestId }),
    ...(item.logIndex !== undefined && { logIndex: item.logIndex }),
  };
}
