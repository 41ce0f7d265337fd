import type { KeySpec, SigningAlgorithm } from '../crypto/algorithms.js';

/** A key as the key store made it: `keyRef` is opaque to everyone but that store. */
export interface CreatedKey {
  keyRef: string;
  /** SubjectPublicKeyInfo, PEM. */
  publicKeyPem: string;
}

/**
 * Where private keys live. Implementations: any PKCS#11 token (SoftHSM by default) and, later, AWS KMS.
 * Private key material never crosses this interface; only digests go in and signatures come out.
 */
export interface KeyStore {
  /** Human-readable name for logs and /readyz, e.g. "pkcs11:SoftHSM/signbridge". */
  readonly description: string;
  supports(spec: KeySpec): boolean;
  createKey(spec: KeySpec, label: string): Promise<CreatedKey>;
  /**
   * Signs a pre-computed digest. The caller has already checked that algorithm, key spec and digest length
   * agree. ECDSA signatures come back DER-encoded (as KMS returns them), RSA ones as the raw signature.
   */
  sign(keyRef: string, spec: KeySpec, algorithm: SigningAlgorithm, digest: Buffer): Promise<Buffer>;
  /** Removes a key made by createKey (used to undo a half-finished tenant creation or rotation). */
  destroyKey(keyRef: string): Promise<void>;
  /** Signatures under way on this process's own threads, if it signs on threads (busy-poll.ts yields to them). */
  threadsBusy?(): number;
  /** Readiness probe for /readyz: resolves when the key store can sign now. */
  ping(): Promise<void>;
  /** Token faults seen and recoveries from them, if the key store recovers by itself (for /metrics). */
  readonly faults?: { readonly seen: number; readonly recovered: number };
  close(): Promise<void>;
}
