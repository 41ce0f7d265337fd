// A KeyStore on any PKCS#11 token, through graphene-pk11. SoftHSM is the default token (see softhsm.ts),
// but nothing here is SoftHSM-specific: module path, token label and PIN come from configuration.
// This class composes the parts under pkcs11/: the module and the token (token.ts), the session pool, recovery from
// token faults (recovery.ts), sealing, key objects and their public keys, and where signatures are made (signing.ts).
import { randomBytes } from 'node:crypto';
import { availableParallelism } from 'node:os';
import type * as graphene from 'graphene-pk11';
import {
  algorithmInfo,
  DIGEST_LENGTH,
  EC_FIELD_BYTES,
  type KeySpec,
  keyInfo,
  type SigningAlgorithm,
} from '../../crypto/algorithms.js';
import { ecdsaRawToDer } from '../../crypto/der.js';
import { ApiError } from '../../errors.js';
import { withLockFile } from '../../fs-private.js';
import {
  type CreatedKey,
  type KeyStore,
  type KeyStoreOutage,
  type MadeSignature,
  type SignOptions,
  signEachDigest,
} from '../key-store.js';
import type { Sealer } from '../sealer.js';
import { findPrivateKeyHandle, generateKeyPair, keyIdOf, keyRefOf } from './key-objects.js';
import type { Pkcs11KeyStoreOptions } from './options.js';
import { tokenFault } from './pkcs11-faults.js';
import { tokenPublicKeyPem } from './public-key-pem.js';
import { TokenRecovery } from './recovery.js';
import { findOrCreateSealingKey, gcmDecrypt, gcmEncrypt, SEALING_KEY_LABEL } from './sealing.js';
import { closeQuietly, SessionPool } from './session-pool.js';
import { type SignJob, SignThreadPool } from './sign-thread-pool.js';
import { SignPlacement, signInput, signMechanism, signOnLibuv } from './signing.js';
import {
  findOrInitialiseToken,
  isLoggedIn,
  loadModule,
  openLoggedIn,
  openUsableSessions,
  reinitialiseModule,
} from './token.js';

export type { Pkcs11KeyStoreOptions } from './options.js';

/** The signature as the KeyStore contract gives it: ECDSA's raw r || s from the token as DER (as KMS returns it). */
function asKmsSignature(padding: string, spec: KeySpec, signature: Buffer): Buffer {
  if (padding !== 'ecdsa') return signature;
  const info = keyInfo(spec);
  if (info.family !== 'ec' || signature.length !== 2 * EC_FIELD_BYTES[info.curve]) {
    throw new Error(`token returned an ECDSA signature of unexpected length ${signature.length}`);
  }
  return ecdsaRawToDer(signature);
}

export { REOPEN_BACKOFF } from './recovery.js';

/** How often a key not found makes the module read the token's objects again (mayRescanFor). */
const RESCAN_EVERY_MS = 10_000;
/** Keys remembered for that (a bound on the map; forgetting them all costs at most one more re-read each). */
const RESCANNED_KEYS_MAX = 1024;

export class Pkcs11KeyStore implements KeyStore, Sealer {
  readonly kind = 'pkcs11' as const;
  readonly description: string;
  private readonly mod: graphene.Module;
  private readonly pool: SessionPool;
  private sessions: graphene.Session[];
  /** keyRef -> private key object handle; token object handles stay valid for the whole login. */
  private readonly handles = new Map<string, Buffer>();
  private readonly recovery: TokenRecovery;
  /** keyRef -> when a signature that did not find it last made the module read the token again (mayRescanFor). */
  private readonly rescannedFor = new Map<string, number>();
  /** Token faults seen and re-opens that worked, for /metrics and tests. */
  readonly faults: { seen: number; recovered: number };
  /** Told when the token faults, stays away and comes back (the service logs it); never given a PIN. */
  onEvent: (message: string) => void = () => undefined;
  private readonly threads: SignThreadPool | undefined;
  private readonly placement: SignPlacement;
  /** Where signatures were made, for diagnostics and tests: on the event loop (inline) or on a signing thread. */
  readonly signedOn: { eventLoop: number; threads: number };

  private constructor(
    mod: graphene.Module,
    sessions: graphene.Session[],
    description: string,
    threads: SignThreadPool | undefined,
    inlineBelowMs: number,
    options: Pkcs11KeyStoreOptions,
  ) {
    this.mod = mod;
    this.sessions = sessions;
    this.pool = new SessionPool(sessions);
    this.description = description;
    this.threads = threads;
    this.placement = new SignPlacement(this.pool, threads, inlineBelowMs);
    this.signedOn = this.placement.signedOn;
    this.recovery = new TokenRecovery(
      description,
      {
        openUsableSessions: () => openUsableSessions(mod, options),
        adoptSessions: (fresh, afterReinitialise) => this.adoptSessions(fresh, afterReinitialise),
        reinitialiseModule: () => reinitialiseModule(mod),
      },
      (message) => this.onEvent(message),
    );
    this.faults = this.recovery.faults;
  }

  /**
   * Loads the module, finds (or creates) the token and logs in. With `initialiseLock`, all of it runs under that
   * lock: a process that loaded SoftHSM while another was between C_InitToken and C_InitPIN would keep seeing a
   * token without a user PIN.
   */
  static open(options: Pkcs11KeyStoreOptions): Pkcs11KeyStore {
    const { initialiseLock } = options;
    return initialiseLock
      ? withLockFile(initialiseLock, () => Pkcs11KeyStore.openNow(options))
      : Pkcs11KeyStore.openNow(options);
  }

  private static openNow(options: Pkcs11KeyStoreOptions): Pkcs11KeyStore {
    const mod = loadModule(options.modulePath);
    try {
      const sessions = openLoggedIn(findOrInitialiseToken(mod, options), options);
      const threadCount = options.signThreads ?? availableParallelism();
      const threads =
        threadCount > 0 ? new SignThreadPool(options.modulePath, options.tokenLabel, threadCount) : undefined;
      return new Pkcs11KeyStore(
        mod,
        sessions,
        `pkcs11:${mod.libraryDescription.trim()}/${options.tokenLabel}`,
        threads,
        options.inlineBelowMs ?? 2,
        options,
      );
    } catch (err) {
      mod.finalize();
      throw err;
    }
  }

  /** RSA and NIST EC keys: what PKCS#11 2.40 tokens (SoftHSM 2.6.1) hold; ML-DSA and SM2 go to the software store. */
  supports(spec: KeySpec): boolean {
    const { family } = keyInfo(spec);
    return family === 'rsa' || family === 'ec';
  }

  /**
   * Seals `plaintext` with AES-256-GCM under the token's sealing key (made on first use: sensitive, never
   * extractable, so it never leaves the token). Output: 12-byte IV || ciphertext || 16-byte tag. `aad` binds the
   * blob to its use (the software store passes the key's label), so a blob moved to another key fails to open.
   */
  async seal(plaintext: Buffer, aad: Buffer): Promise<Buffer> {
    const iv = randomBytes(12);
    const out = await this.recovery.withRecovery(true, () =>
      this.pool.use(async (session) => gcmEncrypt(session, this.sealingKey(session, true), iv, aad, plaintext)),
    );
    return Buffer.concat([iv, out]);
  }

  /** Opens what seal() made; throws when the blob or its `aad` was altered (GCM tag) or the sealing key is gone. */
  async unseal(sealed: Buffer, aad: Buffer): Promise<Buffer> {
    if (sealed.length < 12 + 16) throw new Error('sealed blob too short');
    const iv = sealed.subarray(0, 12);
    const body = sealed.subarray(12);
    return this.recovery.withRecovery(true, () =>
      this.pool.use(async (session) => gcmDecrypt(session, this.sealingKey(session, false), iv, aad, body)),
    );
  }

  /**
   * Runs `fn` on one of the key store's logged-in sessions, with the same recovery from token faults as signing
   * (`retry`: run it again after a re-open). Key import (src/keys/import/pkcs11-import.ts) unwraps through it.
   */
  inSession<T>(fn: (session: graphene.Session) => T | Promise<T>, retry = false): Promise<T> {
    return this.recovery.withRecovery(retry, () => this.pool.use(async (session) => fn(session)));
  }

  /** The sealing key's handle (cached with the key handles, so a re-open finds it again). */
  private sealingKey(session: graphene.Session, create: boolean): Buffer {
    const cached = this.handles.get(SEALING_KEY_LABEL);
    if (cached) return cached;
    const generation = this.recovery.generation;
    const handle = findOrCreateSealingKey(session, create);
    if (generation === this.recovery.generation) this.handles.set(SEALING_KEY_LABEL, handle);
    return handle;
  }

  async createKey(spec: KeySpec, label: string): Promise<CreatedKey> {
    const info = keyInfo(spec);
    if (info.family !== 'rsa' && info.family !== 'ec') {
      throw new ApiError('unsupported_key_spec', `key_spec ${spec} is not supported by ${this.description}`);
    }
    const id = randomBytes(16);
    const generation = this.recovery.generation;
    return this.recovery.withRecovery(false, () =>
      this.pool.use(async (session) => {
        const pair = await generateKeyPair(session, info, id, label);
        const keyRef = keyRefOf(id);
        if (generation === this.recovery.generation) this.handles.set(keyRef, pair.privateKey.handle);
        return { keyRef, publicKeyPem: tokenPublicKeyPem(info, pair.publicKey) };
      }),
    );
  }

  async sign(
    keyRef: string,
    spec: KeySpec,
    algorithm: SigningAlgorithm,
    digest: Buffer,
    options: SignOptions = {},
  ): Promise<Buffer> {
    const recovery = this.recovery;
    if (recovery.closed) throw new ApiError('key_store_unavailable', 'the key store is shutting down');
    const alg = algorithmInfo(algorithm);
    if (alg.family !== 'rsa' && alg.family !== 'ec') throw new Error(`a PKCS#11 token here cannot sign ${algorithm}`);
    if (digest.length !== DIGEST_LENGTH[alg.hash]) throw new Error('digest length does not match the algorithm');
    const mechanism = signMechanism(alg, options.pssSaltLength);
    const input = signInput(alg, digest);
    // The recovery gate (see guarded); written out here so a signature allocates no closure.
    while (recovery.gateShut) await recovery.reopen(recovery.generation);
    const generation = recovery.generation;
    let signature: Buffer;
    try {
      signature = await recovery.leased(this.signOnce(keyRef, spec, mechanism, input));
    } catch (err) {
      signature = await this.afterSignFailed(err, generation, keyRef, spec, mechanism, input);
    }
    return asKmsSignature(alg.padding, spec, signature);
  }

  /**
   * A batch's digests on the signing threads, a slice per thread (sign-thread-pool.ts), under one pass of the
   * recovery gate and one lease. A digest the token failed goes the way a failed `sign` goes (a fault re-opens the
   * token and signs it once more, a key not found re-reads the token's objects), so each digest ends as `sign`
   * would have ended it. Without signing threads, or when the batch cannot start or finish as one (the token away,
   * the key not found, a signing thread that died with its slice: nothing of it was handed out), every digest goes
   * through `sign`.
   */
  async signMany(
    keyRef: string,
    spec: KeySpec,
    algorithm: SigningAlgorithm,
    digests: readonly Buffer[],
    options: SignOptions = {},
  ): Promise<MadeSignature[]> {
    const recovery = this.recovery;
    const alg = algorithmInfo(algorithm);
    const threads = this.threads;
    if (!threads || recovery.closed || digests.length < 2 || (alg.family !== 'rsa' && alg.family !== 'ec')) {
      return signEachDigest(this, keyRef, spec, algorithm, digests, options);
    }
    const digestLength = DIGEST_LENGTH[alg.hash];
    if (digests.some((digest) => digest.length !== digestLength)) {
      return signEachDigest(this, keyRef, spec, algorithm, digests, options);
    }
    const mechanism = signMechanism(alg, options.pssSaltLength);
    const inputs = digests.map((digest) => signInput(alg, digest));
    let generation: number;
    let made: Awaited<ReturnType<SignThreadPool['signMany']>>;
    try {
      while (recovery.gateShut) await recovery.reopen(recovery.generation);
      generation = recovery.generation;
      made = await recovery.leased(this.signManyOnce(keyRef, spec, threads, mechanism, inputs));
    } catch {
      return signEachDigest(this, keyRef, spec, algorithm, digests, options);
    }
    return Promise.all(
      made.results.map(async (result, i): Promise<MadeSignature> => {
        try {
          const signature =
            result instanceof Error
              ? await this.afterSignFailed(result, generation, keyRef, spec, mechanism, inputs[i] as Buffer)
              : result;
          return { kind: 'made', signature: asKmsSignature(alg.padding, spec, signature) };
        } catch (error) {
          return { kind: 'failed', error };
        }
      }),
    );
  }

  /** What `sign` does when the token failed a signature: re-reads the objects or recovers from a fault, or throws. */
  private afterSignFailed(
    err: unknown,
    generation: number,
    keyRef: string,
    spec: KeySpec,
    mechanism: SignJob['mechanism'],
    input: Buffer,
  ): Promise<Buffer> {
    const recovery = this.recovery;
    const again = () => recovery.guarded(() => this.signOnce(keyRef, spec, mechanism, input));
    return this.mayRescanFor(err, keyRef)
      ? recovery.rescan(generation).then(again)
      : recovery.afterFault(err, generation, again);
  }

  private async signManyOnce(
    keyRef: string,
    spec: KeySpec,
    threads: SignThreadPool,
    mechanism: SignJob['mechanism'],
    inputs: Buffer[],
  ) {
    const handle = this.handles.get(keyRef) ?? (await this.pool.use(async (s) => this.findPrivateKey(s, keyRef)));
    const made = await threads.signMany(mechanism, handle, inputs);
    this.placement.noteThreadSignatures(spec, made.results.length, made.tokenMs);
    return made;
  }

  private async signOnce(keyRef: string, spec: KeySpec, mechanism: SignJob['mechanism'], input: Buffer) {
    const handle = this.handles.get(keyRef) ?? (await this.pool.use(async (s) => this.findPrivateKey(s, keyRef)));
    const placement = this.placement;
    return this.threads
      ? (placement.signInline(spec, mechanism, handle, input) ??
          (await placement.signOnThread(spec, mechanism, handle, input)))
      : await this.pool.use(async (session) => signOnLibuv(this.pool, session, mechanism, handle, input));
  }

  async destroyKey(keyRef: string): Promise<void> {
    const id = keyIdOf(keyRef);
    await this.recovery.withRecovery(true, () =>
      this.pool.use(async (session) => {
        session.destroy({ id });
      }),
    );
    this.handles.delete(keyRef);
  }

  threadsBusy(): number {
    return this.threads?.inFlight ?? 0;
  }

  /** The outage under way: the token is away and re-opening it has failed so far. */
  get outage(): KeyStoreOutage | undefined {
    return this.recovery.outage;
  }

  reportOutages(listener: (outage: KeyStoreOutage) => void): void {
    this.recovery.reportOutages(listener);
  }

  /**
   * Ready means able to sign: the sessions are alive and logged in. An idle session is asked (C_GetSessionInfo);
   * a fault there re-opens the token like a failed signature would. With every session busy, they are signing.
   */
  async ping(): Promise<void> {
    const recovery = this.recovery;
    if (recovery.closed) throw new ApiError('key_store_unavailable', 'the key store is closed');
    while (recovery.gateShut) await recovery.reopen(recovery.generation);
    const generation = recovery.generation;
    const session = this.pool.take();
    if (!session) return;
    let fault: string | undefined;
    try {
      if (!isLoggedIn(session)) fault = 'CKR_USER_NOT_LOGGED_IN';
    } catch (err) {
      fault = tokenFault(err);
      if (!fault) throw err;
    } finally {
      this.pool.release(session);
    }
    if (fault) {
      this.faults.seen++;
      await recovery.reopen(generation, fault);
    }
  }

  async close(): Promise<void> {
    if (this.recovery.closed) return;
    this.recovery.close();
    await this.threads?.close();
    for (const s of this.sessions) closeQuietly(s);
    this.mod.finalize();
  }

  /**
   * Whether a signature that found no key object should read the token's objects again first (TokenRecovery.rescan
   * says why): once per key per RESCAN_EVERY_MS, so that a key that is really gone costs no re-open per request.
   */
  private mayRescanFor(err: unknown, keyRef: string): boolean {
    if (!(err instanceof ApiError) || err.code !== 'key_not_found') return false;
    const now = Date.now();
    if (now - (this.rescannedFor.get(keyRef) ?? Number.NEGATIVE_INFINITY) < RESCAN_EVERY_MS) return false;
    if (this.rescannedFor.size >= RESCANNED_KEYS_MAX) this.rescannedFor.clear();
    this.rescannedFor.set(keyRef, now);
    return true;
  }

  private findPrivateKey(session: graphene.Session, keyRef: string): Buffer {
    const cached = this.handles.get(keyRef);
    if (cached) return cached;
    const generation = this.recovery.generation;
    const handle = findPrivateKeyHandle(session, keyRef);
    // A handle found on a session of the old login must not outlive a re-open that happened meanwhile.
    if (generation === this.recovery.generation) this.handles.set(keyRef, handle);
    return handle;
  }

  /**
   * After a re-open (recovery.ts): hands out `sessions` from now on and drops every cached object handle; then every
   * signing thread opens a new session. `afterReinitialise`: the old sessions ended with C_Finalize and their handle
   * numbers may belong to new sessions now, so they are forgotten, never closed.
   */
  private async adoptSessions(sessions: graphene.Session[], afterReinitialise: boolean): Promise<void> {
    this.handles.clear();
    const old = this.pool.replace(sessions, afterReinitialise);
    if (!afterReinitialise) for (const s of old) closeQuietly(s);
    this.sessions = sessions;
    await this.threads?.reopenSessions(afterReinitialise);
  }
}
