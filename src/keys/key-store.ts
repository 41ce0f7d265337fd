import type { KeySpec, SigningAlgorithm } from '../crypto/algorithms.js';
import { ApiError } from '../errors.js';

/** The key stores a key version can live in; recorded per key (keys.key_store, migration 0010). */
export type KeyStoreKind = 'pkcs11' | 'aws-kms' | 'software';
export const KEY_STORE_KINDS: readonly KeyStoreKind[] = ['pkcs11', 'aws-kms', 'software'];

/** generated inside the key store, or imported (bring your own key). */
export type KeyOrigin = 'generated' | 'imported';

/** A key as the key store made it: `keyRef` is opaque to everyone but that store. */
export interface CreatedKey {
  keyRef: string;
  /** SubjectPublicKeyInfo, PEM. */
  publicKeyPem: string;
}

/** The contract's wrapping algorithms and wrapping key specs (AWS KMS names; RSAES_PKCS1_V1_5 and SM2PKE left out). */
export const WRAPPING_ALGORITHMS = [
  'RSAES_OAEP_SHA_1',
  'RSAES_OAEP_SHA_256',
  'RSA_AES_KEY_WRAP_SHA_1',
  'RSA_AES_KEY_WRAP_SHA_256',
] as const;
export type WrappingAlgorithm = (typeof WRAPPING_ALGORITHMS)[number];
export const WRAPPING_KEY_SPECS = ['RSA_2048', 'RSA_3072', 'RSA_4096'] as const;
export type WrappingKeySpec = (typeof WRAPPING_KEY_SPECS)[number];

/**
 * A stretch of time in which a key store could not serve at all (a PKCS#11 token that went away), from the fault
 * that began it until the key store works again. The signing service records its start and its end in the audit
 * log instead of one sign_failed entry per request it refused meanwhile (docs/policy.md).
 */
export class KeyStoreOutage {
  readonly startedAt = new Date();
  private ended: Date | undefined;
  private refusals = 0;

  constructor(
    /** The key store's description (as in /readyz and the logs). */
    readonly keyStore: string,
    /** The fault that began it, e.g. CKR_GENERAL_ERROR. */
    readonly fault: string,
  ) {}

  get endedAt(): Date | undefined {
    return this.ended;
  }

  /** Signing requests refused during the outage and counted here instead of having an audit entry of their own. */
  get refused(): number {
    return this.refusals;
  }

  end(): void {
    this.ended ??= new Date();
  }

  /**
   * Counts one refused request in this outage. False once the outage has ended: its end entry (with the count) may
   * already be written, so the caller records that request on its own.
   */
  countRefusal(): boolean {
    if (this.ended) return false;
    this.refusals++;
    return true;
  }
}

/** key_store_unavailable (503, Retry-After); `outage` when it was refused because the key store is in one. */
export class KeyStoreUnavailableError extends ApiError {
  constructor(
    reason: string,
    readonly outage?: KeyStoreOutage,
  ) {
    super('key_store_unavailable', reason);
  }
}

/** The outage a refusal belongs to, if the error says it was refused because the key store is in one. */
export function outageOf(err: unknown): KeyStoreOutage | undefined {
  return err instanceof KeyStoreUnavailableError ? err.outage : undefined;
}

export type ExpirationModel = 'KEY_MATERIAL_EXPIRES' | 'KEY_MATERIAL_DOES_NOT_EXPIRE';

/** What get_import_params hands a client: a wrapping public key and an import token that belong together. */
export interface ImportParameters {
  /** The key awaiting material: made by this call, or the one given for a reimport. */
  keyRef: string;
  /** Opaque to the client; binds key, wrapping key, algorithm and expiry. */
  importToken: Buffer;
  /** The wrapping public key, DER SubjectPublicKeyInfo. */
  wrappingPublicKey: Buffer;
  validTo: Date;
}

export interface KeyMaterialImport {
  keyRef: string;
  spec: KeySpec;
  importToken: Buffer;
  /** As the client sent it (EncryptedKeyMaterial): never logged. */
  encryptedKeyMaterial: Buffer;
  expiration: { model: 'KEY_MATERIAL_DOES_NOT_EXPIRE' } | { model: 'KEY_MATERIAL_EXPIRES'; validTo: Date };
}

/** How a signature is made, where an algorithm leaves a choice. */
export interface SignOptions {
  /**
   * RSA PSS only: the salt length in bytes (0 up to the key's maximum, emLen - hLen - 2); absent: the hash's length,
   * as KMS signs. Vault transit asks for others (its salt_length). A key store that cannot make it refuses.
   */
  pssSaltLength?: number;
}

/** One digest's outcome in a batch: its signature, or why that digest alone failed. */
export type MadeSignature = { kind: 'made'; signature: Buffer } | { kind: 'failed'; error: unknown };

/**
 * Where private keys live. Implementations: any PKCS#11 token (SoftHSM by default), AWS KMS, and the software
 * store for key specs the token cannot hold (ML-DSA, SM2; sealed under a key that stays in the token).
 * Private key material never crosses this interface; only digests go in and signatures come out.
 */
export interface KeyStore {
  readonly kind: KeyStoreKind;
  /** Human-readable name for logs and /readyz, e.g. "pkcs11:SoftHSM/signbridge". */
  readonly description: string;
  supports(spec: KeySpec): boolean;
  createKey(spec: KeySpec, label: string): Promise<CreatedKey>;
  /**
   * Signs a pre-computed digest (ML-DSA: the 64-byte μ; SM2: SM3(Z_A || M)). The caller has already checked that
   * algorithm, key spec and digest length agree. ECDSA and SM2 signatures come back DER-encoded (as KMS returns
   * them), RSA and ML-DSA ones as the raw signature.
   */
  sign(
    keyRef: string,
    spec: KeySpec,
    algorithm: SigningAlgorithm,
    digest: Buffer,
    options?: SignOptions,
  ): Promise<Buffer>;
  /**
   * Signs a batch's digests with one key and algorithm, as `sign` signs each (the same checks, errors and recovery
   * from faults), answered in their order: a digest that fails fails alone. For a key store with a batch path (the
   * PKCS#11 token's signing threads take a slice of digests in one message). Callers use the `signMany` function
   * below, which serves the key stores without one (software, AWS KMS) with `sign` for each digest.
   */
  signMany?(
    keyRef: string,
    spec: KeySpec,
    algorithm: SigningAlgorithm,
    digests: readonly Buffer[],
    options?: SignOptions,
  ): Promise<MadeSignature[]>;
  /** Removes a key made by createKey (used to undo a half-finished tenant creation or rotation). */
  destroyKey(keyRef: string): Promise<void>;
  /** Signatures under way on this process's own threads, if it signs on threads (busy-poll.ts yields to them). */
  threadsBusy?(): number;
  /** Readiness probe for /readyz: resolves when the key store can sign now. */
  ping(): Promise<void>;
  /** The outage under way, if the key store cannot serve at all right now (a PKCS#11 token that is away). */
  readonly outage?: KeyStoreOutage | undefined;
  /**
   * Has `listener` told when an outage of this key store starts and when it ends (`endedAt` set), replacing any
   * listener before (the signing service audits them; one per key store, so nothing is recorded twice).
   */
  reportOutages?(listener: (outage: KeyStoreOutage) => void): void;
  /** Token faults seen and recoveries from them, if the key store recovers by itself (for /metrics). */
  readonly faults?: { readonly seen: number; readonly recovered: number };
  /**
   * Key import, for key stores that take wrapped material themselves (AWS KMS: CreateKey with Origin EXTERNAL,
   * GetParametersForImport). `keyRef` given: new parameters for a key that already exists (a reimport).
   */
  prepareImport?(
    spec: KeySpec,
    label: string,
    wrappingAlgorithm: WrappingAlgorithm,
    wrappingKeySpec: WrappingKeySpec,
    keyRef?: string,
  ): Promise<ImportParameters>;
  /** ImportKeyMaterial: the client's blob, untouched. Resolves with the key's public half. */
  importKeyMaterial?(request: KeyMaterialImport): Promise<CreatedKey>;
  close(): Promise<void>;
}

/** A batch's digests signed by `store`: its own batch path, or `sign` for each digest side by side. */
export function signMany(
  store: KeyStore,
  keyRef: string,
  spec: KeySpec,
  algorithm: SigningAlgorithm,
  digests: readonly Buffer[],
  options?: SignOptions,
): Promise<MadeSignature[]> {
  return store.signMany
    ? store.signMany(keyRef, spec, algorithm, digests, options)
    : signEachDigest(store, keyRef, spec, algorithm, digests, options);
}

/** Every digest through `store.sign`, side by side; one that fails is its own `failed` outcome. */
export function signEachDigest(
  store: KeyStore,
  keyRef: string,
  spec: KeySpec,
  algorithm: SigningAlgorithm,
  digests: readonly Buffer[],
  options?: SignOptions,
): Promise<MadeSignature[]> {
  return Promise.all(
    digests.map(async (digest): Promise<MadeSignature> => {
      try {
        return { kind: 'made', signature: await store.sign(keyRef, spec, algorithm, digest, options) };
      } catch (error) {
        return { kind: 'failed', error };
      }
    }),
  );
}

/**
 * The key stores of one service: the primary one (configuration: `keyStore`), plus the others that hold keys made
 * before (a deployment that moved from SoftHSM to AWS KMS keeps signing with the old keys) or that serve what the
 * primary cannot hold (the software store next to a PKCS#11 token). Each key version records its store.
 */
export class KeyStores {
  private readonly byKind = new Map<KeyStoreKind, KeyStore>();

  /** `stores[0]` is the primary: new keys go there when it supports their spec, else to the first that does. */
  constructor(readonly stores: readonly KeyStore[]) {
    if (stores.length === 0) throw new Error('KeyStores needs at least one key store');
    for (const store of stores) this.byKind.set(store.kind, store);
  }

  static of(store: KeyStore | KeyStores): KeyStores {
    return store instanceof KeyStores ? store : new KeyStores([store]);
  }

  get primary(): KeyStore {
    return this.stores[0] as KeyStore;
  }

  get description(): string {
    return this.stores.map((s) => s.description).join(' + ');
  }

  supports(spec: KeySpec): boolean {
    return this.stores.some((s) => s.supports(spec));
  }

  /** The key store a new key of this spec goes to; unsupported_key_spec when none can hold it. */
  forNewKey(spec: KeySpec): KeyStore {
    const store = this.stores.find((s) => s.supports(spec));
    if (!store) throw new ApiError('unsupported_key_spec', `key_spec ${spec} is not supported by ${this.description}`);
    return store;
  }

  /** The key store that holds a key; a 503 when it is not configured here (it would come back with its config). */
  forKey(kind: KeyStoreKind): KeyStore {
    const store = this.byKind.get(kind);
    if (!store) {
      throw new ApiError(
        'key_store_unavailable',
        `this key is held by the ${kind} key store, which this service is not configured to reach`,
      );
    }
    return store;
  }

  /** Token faults and recoveries over every key store that counts them (for /metrics). */
  get faults(): { seen: number; recovered: number } | undefined {
    const counting = this.stores.filter((s) => s.faults);
    if (counting.length === 0) return undefined;
    return {
      seen: counting.reduce((n, s) => n + (s.faults?.seen ?? 0), 0),
      recovered: counting.reduce((n, s) => n + (s.faults?.recovered ?? 0), 0),
    };
  }

  /** The outage the key store of `kind` is in now, if any (undefined too when no such key store is configured). */
  outageOf(kind: KeyStoreKind): KeyStoreOutage | undefined {
    return this.byKind.get(kind)?.outage;
  }

  threadsBusy(): number {
    return this.stores.reduce((n, s) => n + (s.threadsBusy?.() ?? 0), 0);
  }

  async ping(): Promise<void> {
    await Promise.all(this.stores.map((s) => s.ping()));
  }

  async close(): Promise<void> {
    await Promise.allSettled(this.stores.map((s) => s.close()));
  }
}
