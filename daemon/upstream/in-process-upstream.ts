// The service's own SigningService in the daemon's process, on a local PKCS#11 token and a SQLite store: for
// build hosts with their own HSM, and to measure the bridge without HTTP. Same outcomes, same wire statuses as
// the remote upstream (status-map.ts), because the same ApiError codes come out.

import { resolveConfig } from '../../src/config/config.js';
import { algorithmsForKey, type SigningAlgorithm } from '../../src/crypto/algorithms.js';
import { isApiError } from '../../src/errors.js';
import type { KeyStore, KeyStores } from '../../src/keys/key-store.js';
import { openStores } from '../../src/open-stores.js';
import type { PolicyEngine } from '../../src/policy/policy.js';
import { policySettings } from '../../src/signing/policy-settings.js';
import { type SigningCaller, signDigest, signDigests } from '../../src/signing/signing-entry.js';
import { SigningService } from '../../src/signing/signing-service.js';
import type { Store } from '../../src/store/store.js';
import { storeFault, storeUnavailable } from '../../src/store/store-errors.js';
import { WireStatus } from '../../wire/wire.js';
import { messageFor, wireStatusFor } from './status-map.js';
import {
  BatchNeedsApproval,
  type CollectInput,
  type PublicKeyInfo,
  type SignBatchInput,
  type SignBatchResult,
  type SignInput,
  type SignResult,
  type Upstream,
  UpstreamError,
} from './upstream.js';

export interface InProcessUpstreamOptions {
  dataDir: string;
  /** The service's configuration file (key store, store path), as `signbridge server --config` reads it. */
  configFile?: string | undefined;
  /** Default: the policy file of the service configuration, as `signbridge server` loads it; else allow-all. */
  policy?: PolicyEngine;
  /** Recorded as the caller of every signature (the service records an API key id there). */
  callerId?: string;
  /**
   * Commit each signature's record and audit entry on the store's writer thread while the token signs, the
   * thread taking new writes for this long after each commit before it sleeps (the daemon's busy-poll window).
   * Undefined: commit on the event loop, after the signature.
   */
  writerSpinMs?: number;
}

/** Signed (older service) or Signed | Pending (with approvals): read structurally so both work. */
type ServiceOutcome =
  | {
      kind?: 'signed';
      signature: Buffer;
      keyId: string;
      algorithm: SigningAlgorithm;
      requestId?: string;
      logIndex?: number;
    }
  | { kind: 'pending'; requestId: string; status: string; message: string };

export class InProcessUpstream implements Upstream {
  readonly description: string;
  readonly signing: SigningService;
  private readonly store: Store;
  private readonly keyStore: KeyStore | KeyStores;
  /** The daemon signs as itself: it holds the data dir, not an API key (signing-entry.ts). */
  private readonly caller: SigningCaller;
  /** Named by every `signed` entry this daemon makes, as the HTTP doors name theirs (docs/api.md). */
  private readonly via: Record<string, string>;

  private constructor(store: Store, keyStore: KeyStore | KeyStores, signing: SigningService, callerId: string) {
    this.store = store;
    this.keyStore = keyStore;
    this.signing = signing;
    this.caller = { inProcess: callerId };
    this.via = { api: 'daemon-in-process', caller: callerId };
    this.description = `in-process (${keyStore.description}, ${store.description})`;
  }

  static async open(opts: InProcessUpstreamOptions): Promise<InProcessUpstream> {
    const config = resolveConfig({
      dataDir: opts.dataDir,
      ...(opts.configFile !== undefined && { configFile: opts.configFile }),
    });
    const { store, keyStore } = await openStores(
      config,
      undefined,
      opts.writerSpinMs === undefined ? {} : { writerThread: { spinMs: opts.writerSpinMs } },
    );
    // The same policy the service would apply to this data dir: in-process signing must not be a way around it.
    const { exceptionMaxLifetimeMs: _exceptions, ...settings } = policySettings(config, store);
    const signing = new SigningService({
      store,
      keyStore,
      ...settings,
      ...(opts.policy && { policy: opts.policy }),
    });
    return new InProcessUpstream(store, keyStore, signing, opts.callerId ?? 'signbridge-daemon');
  }

  async getPublicKey(tenantId: string): Promise<PublicKeyInfo> {
    const key = await guard(() => this.signing.getKey(tenantId));
    return {
      keyId: key.id,
      keySpec: key.keySpec,
      publicKeyPem: key.publicKeyPem,
      signingAlgorithms: algorithmsForKey(key.keySpec),
    };
  }

  async pkcs11Sign(input: SignInput): Promise<SignResult> {
    const ask = {
      tenantId: input.tenantId,
      via: this.via,
      expectedKeyId: input.keyId,
      context: { ...input.context },
    };
    // A message (CKM_EDDSA) is pure Ed25519 over it, as the /v1 door's pkcs11_sign with `message` signs it; the
    // signer records it under its SHA-512.
    const out = (await guard(() =>
      input.message !== undefined
        ? signDigest(this.signing, this.caller, { ...ask, algorithm: 'ED25519_SHA_512', message: input.message })
        : signDigest(this.signing, this.caller, {
            ...ask,
            digest: input.digest,
            keySpec: input.keySpec,
            pss: input.pss,
          }),
    )) as unknown as ServiceOutcome;
    return fromService(out);
  }

  /**
   * sign_batch in this process (the coalescer sends concurrent C_Sign calls here as one batch): one policy decision,
   * each digest its own record, entry and leaf. A batch the policy holds is one request (pending), collected whole
   * with its request id and the same digests.
   */
  async signBatch(input: SignBatchInput): Promise<SignBatchResult> {
    const asked =
      input.requestId !== undefined
        ? this.signing.collectBatch(input.tenantId, input.requestId, input.digests)
        : signDigests(this.signing, this.caller, {
            tenantId: input.tenantId,
            via: this.via,
            digests: input.digests,
            keySpec: input.keySpec,
            pss: input.pss,
            algorithm: input.algorithm,
            expectedKeyId: input.keyId,
            context: { ...input.context },
          });
    const outcome = await asked.catch((err: unknown) => {
      // A service before held batches refused them so; kept for data dirs whose code says it.
      if (isApiError(err) && err.code === 'batch_needs_approval') throw new BatchNeedsApproval(err.message);
      throw upstreamErrorFor(err);
    });
    if (outcome.kind === 'pending') return outcome;
    return {
      kind: 'signed',
      keyId: outcome.keyId,
      algorithm: outcome.algorithm,
      results: outcome.items.map((item) =>
        item.kind === 'signed'
          ? {
              signature: item.signed.signature,
              ...(item.signed.logIndex !== undefined && { logIndex: item.signed.logIndex }),
            }
          : { error: upstreamErrorFor(item.error) },
      ),
    };
  }

  async collect(input: CollectInput): Promise<SignResult> {
    const out = (await guard(() =>
      this.signing.collect(input.tenantId, input.requestId, input.digest),
    )) as unknown as ServiceOutcome;
    return fromService(out);
  }

  threadsBusy(): number {
    return this.keyStore.threadsBusy?.() ?? 0;
  }

  /** True while the store commits signature records and audit entries on its writer thread. */
  get writesOnThread(): boolean {
    return this.store.signatures.writesOnThread;
  }

  async close(): Promise<void> {
    await this.keyStore.close();
    await this.store.close();
  }
}

function fromService(out: ServiceOutcome): SignResult {
  if (out.kind === 'pending') return out;
  return {
    kind: 'signed',
    signature: out.signature,
    keyId: out.keyId,
    algorithm: out.algorithm,
    ...(out.requestId !== undefined && { requestId: out.requestId }),
    ...(out.logIndex !== undefined && { logIndex: out.logIndex }),
  };
}

async function guard<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw upstreamErrorFor(err);
  }
}

/** The service's error as the module sees it (the same wire status the remote upstream gets from the HTTP answer). */
export function upstreamErrorFor(caught: unknown): UpstreamError {
  // A store that cannot write now (full, I/O, busy) is UNAVAILABLE to the module, as the service's 503 is.
  const fault = storeFault(caught);
  const err = fault ? storeUnavailable(fault) : caught;
  if (isApiError(err)) {
    return new UpstreamError(
      wireStatusFor(err.statusCode, err.code),
      messageFor(err.statusCode, { error: err.code, reason: err.message, ...err.details }),
    );
  }
  return new UpstreamError(WireStatus.INTERNAL, `in-process service failed: ${(err as Error).message}`);
}
