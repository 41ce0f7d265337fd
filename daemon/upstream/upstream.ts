// What the daemon needs from a signing service, whatever carries it: the remote service over HTTP(S)
// (remote-upstream.ts) or the service's own SigningService in this process (in-process-upstream.ts).
import type { KeySpec, SigningAlgorithm } from '../../src/crypto/algorithms.js';
import { WireStatus, type WireStatusCode, wireStatusName } from '../../wire/wire.js';

export interface PublicKeyInfo {
  /** The service's key id (a key version). */
  keyId: string;
  keySpec: KeySpec;
  publicKeyPem: string;
  signingAlgorithms: SigningAlgorithm[];
}

/** Policy inputs that travel with a signature (the module's CTX_* fields; the SBOM already read). */
export interface SignContext {
  project?: string;
  environment?: string;
  artifactType?: string;
  artifactVersion?: string;
  sbom?: string;
}

export interface SignInput {
  tenantId: string;
  /** With message: its SHA-512, which the service records in place of the message. */
  digest: Buffer;
  /** Pure Ed25519 (CKM_EDDSA): the message itself, which the key signs (sent as pkcs11_sign's `message`). */
  message?: Buffer;
  keySpec: KeySpec;
  pss: boolean;
  /**
   * The key version the module was shown (its CKA_LABEL): the service refuses with key_changed, signing nothing,
   * when it is no longer current (sent as pkcs11_sign's key_id).
   */
  keyId?: string;
  context: SignContext;
}

/** Collecting a pending request: the service releases its signature only against the same digest. */
export interface CollectInput {
  tenantId: string;
  requestId: string;
  digest: Buffer;
}

export type SignResult =
  | {
      kind: 'signed';
      /** As the service returns it: RSA raw, ECDSA DER. */
      signature: Buffer;
      keyId: string;
      algorithm: SigningAlgorithm;
      requestId?: string;
      /** The service's Signbridge-Log-Index: where the signature's audit entry is (for the daemon's log only). */
      logIndex?: number;
      /** The C2SP tlog-proof of the signature's entry, when asked for (`Prefer: wait-for-log`) and given. */
      logProof?: string;
    }
  | {
      kind: 'pending';
      requestId: string;
      status: string;
      message: string;
      /** The service's console page for the request (its 202's approve_url), when the service has a public URL. */
      approveUrl?: string;
    };

/**
 * Several digests for one key, under one set of policy inputs, in one request (POST /v1/sign_batch): every digest
 * resolves to the same algorithm (the same key spec, padding and length).
 */
export interface SignBatchInput {
  tenantId: string;
  keySpec: KeySpec;
  pss: boolean;
  /** Named, as `sign` does (`signbridge sign` of many files); absent: from keySpec, pss and the digests' length. */
  algorithm?: SigningAlgorithm;
  /** As SignInput.keyId: the key version every digest is for (sign_batch's key_id). */
  keyId?: string;
  context: SignContext;
  digests: Buffer[];
  /** Collecting a held batch: the request the service named, sent with the same digests in the same order. */
  requestId?: string;
  /** Ask for each signature's log proof in the answer (`Prefer: wait-for-log`), as RemoteUpstream.sign does. */
  logProof?: LogProofRequest;
}

/** `Prefer: wait-for-log` (docs/api.md): with `witnessed`, a checkpoint the witnesses cosigned, up to `waitSeconds`. */
export interface LogProofRequest {
  witnessed?: boolean;
  waitSeconds?: number;
}

/** One digest's outcome in a signed batch: its signature, or why this one item failed (the others still signed). */
export type BatchItem = { signature: Buffer; logIndex?: number; logProof?: string } | { error: UpstreamError };

export type SignBatchResult =
  | {
      kind: 'signed';
      keyId: string;
      algorithm: SigningAlgorithm;
      requestId?: string;
      /** results[i] answers digests[i]. */
      results: BatchItem[];
    }
  /** The whole batch is one held request: a person approves it once, and it is collected whole. */
  | Extract<SignResult, { kind: 'pending' }>;

/** A failure with the wire status the module should see; `message` is safe to show to the module's user. */
export class UpstreamError extends Error {
  readonly status: WireStatusCode;
  readonly requestId: string | undefined;

  constructor(status: WireStatusCode, message: string, requestId?: string) {
    super(message);
    this.name = 'UpstreamError';
    this.status = status;
    this.requestId = requestId;
  }

  override toString(): string {
    return `${wireStatusName(this.status)}: ${this.message}`;
  }
}

/** The service has no sign_batch (a service older than it): nothing was signed; sign one by one instead. */
export class BatchUnsupported extends UpstreamError {
  constructor(message: string, requestId?: string) {
    super(WireStatus.INTERNAL, message, requestId);
    this.name = 'BatchUnsupported';
  }
}

/**
 * The policy would hold this batch for a person's decision, and an approval covers one digest (409
 * batch_needs_approval): nothing was signed; sign these one by one, each then a held request of its own.
 */
export class BatchNeedsApproval extends UpstreamError {
  constructor(message: string, requestId?: string) {
    super(WireStatus.INTERNAL, message, requestId);
    this.name = 'BatchNeedsApproval';
  }
}

export interface Upstream {
  /** For logs and `signbridge status`, e.g. "https://signbridge.example.com" or "in-process (pkcs11:...)". */
  readonly description: string;
  /** The tenant's current key. */
  getPublicKey(tenantId: string): Promise<PublicKeyInfo>;
  /** pkcs11_sign: always signs with the tenant's current key. */
  pkcs11Sign(input: SignInput): Promise<SignResult>;
  /** The outcome of a pending pkcs11_sign: still pending, the signature, or an UpstreamError (rejected, expired). */
  collect(input: CollectInput): Promise<SignResult>;
  /**
   * sign_batch: the tenant's current key signs every digest (absent where the upstream cannot batch). A failure of
   * the whole batch (validation, policy, velocity, outage) is thrown as an UpstreamError, as pkcs11Sign's is.
   */
  signBatch?(input: SignBatchInput): Promise<SignBatchResult>;
  /**
   * The service's inclusion proof of log entry `index` (GET /log/proof/inclusion, its JSON), or 'not-yet' while no
   * checkpoint holds it (404); for keeping proofs beside signatures (log-proofs.ts). Absent in-process.
   */
  inclusionProof?(tenantId: string, index: number): Promise<unknown | 'not-yet'>;
  /** Where a person approves a pending request: the service's console page for it (none in-process). */
  consoleUrlFor?(requestId: string): string;
  /** Signatures under way on this process's own signing threads (in-process mode); busy polling yields to them. */
  threadsBusy?(): number;
  close(): Promise<void>;
}
