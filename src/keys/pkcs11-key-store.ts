// A KeyStore on any PKCS#11 token, through graphene-pk11. SoftHSM is the default token (see softhsm.ts),
// but nothing here is SoftHSM-specific: module path, token label and PIN come from configuration.
import { createPublicKey, randomBytes } from 'node:crypto';
import { availableParallelism } from 'node:os';
import { performance } from 'node:perf_hooks';
import * as graphene from 'graphene-pk11';
import pkcs11js from 'pkcs11js';
import {
  algorithmInfo,
  DIGEST_LENGTH,
  type KeySpec,
  keyInfo,
  type NamedCurve,
  type SigningAlgorithm,
} from '../crypto/algorithms.js';
import { DIGEST_INFO_PREFIX, ecdsaRawToDer } from '../crypto/encoding.js';
import { EC_FIELD_BYTES, ecPointSpkiPem } from '../crypto/spki.js';
import { ApiError } from '../errors.js';
import { withLockFile } from '../fs-private.js';
import { type CreatedKey, type KeyStore, KeyStoreOutage } from './key-store.js';
import { keyStoreUnavailable, tokenFault } from './pkcs11-faults.js';
import type { Sealer } from './sealer.js';
import { type SignJob, SignThreadPool } from './sign-thread-pool.js';

export interface Pkcs11KeyStoreOptions {
  modulePath: string;
  tokenLabel: string;
  pin: string;
  /** Sessions kept open; concurrent signatures beyond this wait for a free one. */
  sessions?: number;
  /** When the labelled token does not exist, initialise the first free slot with this SO PIN (SoftHSM). */
  initialiseWithSoPin?: string;
  /** A lock file held while looking for the token and creating it, so two processes starting at once make one. */
  initialiseLock?: string;
  /**
   * Threads that run C_SignInit + C_Sign (default: one per core). 0 signs from the main thread with C_Sign on
   * libuv's pool instead, for modules that do not tolerate calls from several threads.
   */
  signThreads?: number;
  /**
   * Sign on the event loop instead of a signing thread when no thread is busy and this key spec's signatures take
   * the token less than this many ms (measured, moving average). Default 2; 0 always uses the threads.
   */
  inlineBelowMs?: number;
}

/** Weight of the newest measurement in the moving average of a key spec's signing time. */
const SIGN_COST_WEIGHT = 0.2;

/** DER-encoded namedCurve OIDs for CKA_EC_PARAMS. */
const CURVE_PARAMS: Record<NamedCurve, Buffer> = {
  'P-256': Buffer.from('06082a8648ce3d030107', 'hex'),
  'P-384': Buffer.from('06052b81040022', 'hex'),
  'P-521': Buffer.from('06052b81040023', 'hex'),
};

/** The same mechanisms as plain pkcs11js structures, which can cross to a signing thread. */
const PSS_RAW = {
  sha256: { hashAlg: pkcs11js.CKM_SHA256, mgf: pkcs11js.CKG_MGF1_SHA256, saltLen: 32 },
  sha384: { hashAlg: pkcs11js.CKM_SHA384, mgf: pkcs11js.CKG_MGF1_SHA384, saltLen: 48 },
  sha512: { hashAlg: pkcs11js.CKM_SHA512, mgf: pkcs11js.CKG_MGF1_SHA512, saltLen: 64 },
};

const KEY_REF_PREFIX = 'pkcs11:id=';
/** The token's AES key that seals the software key store's private keys (never a key ref: no key ref has no '='). */
const SEALING_KEY_LABEL = 'signbridge-sealing-key';

function gcm(iv: Buffer, aad: Buffer): pkcs11js.Mechanism {
  return {
    mechanism: pkcs11js.CKM_AES_GCM,
    parameter: { type: pkcs11js.CK_PARAMS_AES_GCM, iv, aad, ivBits: 96, tagBits: 128 } as pkcs11js.AesGCM,
  };
}

/** Session states of a logged-in user (PKCS#11 CKS_*; pkcs11js does not export them). */
const CKS_RO_USER_FUNCTIONS = 1;
const CKS_RW_USER_FUNCTIONS = 3;

/**
 * Back-off between attempts to re-open a token that is away: the first after 1 s, then twice as long each time up
 * to 10 s, so a token that comes back is in use again at most ~10 s later. Requests meanwhile get 503 at once.
 */
export const REOPEN_BACKOFF = { firstMs: 1000, maxMs: 10_000 } as const;
/** How long a re-open waits for the operations still under way at the token to end before it gives up this try. */
const DRAIN_TIMEOUT_MS = 30_000;

/**
 * A fixed set of open sessions handed out one operation at a time (a PKCS#11 session runs one operation). After
 * the token lost its sessions, `replace` swaps in new ones; an old one still in use is closed when it comes back.
 */
class SessionPool {
  private idle: graphene.Session[];
  private current: Set<graphene.Session>;
  /** Sessions of before a C_Finalize that were in use then: dropped when they come back, never closed. */
  private forgotten = new Set<graphene.Session>();
  private readonly waiters: Array<(s: graphene.Session) => void> = [];

  constructor(sessions: graphene.Session[]) {
    this.idle = [...sessions];
    this.current = new Set(sessions);
  }

  /**
   * Hands out `sessions` from now on; returns the idle old ones for the caller to close. `forgetOld`: the old ones
   * ended with C_Finalize (their handle numbers may be new sessions' now), so none is ever closed when it comes back.
   */
  replace(sessions: graphene.Session[], forgetOld = false): graphene.Session[] {
    const old = this.idle;
    this.idle = [];
    if (forgetOld) this.forgotten = new Set([...this.forgotten, ...this.current]);
    this.current = new Set(sessions);
    for (const s of sessions) this.release(s);
    return old;
  }

  /** An idle session now, or undefined when all are in use. Give it back with `release`. */
  take(): graphene.Session | undefined {
    return this.idle.pop();
  }

  release(session: graphene.Session): void {
    if (!this.current.has(session)) {
      if (!this.forgotten.delete(session)) closeQuietly(session);
      return;
    }
    const next = this.waiters.shift();
    if (next) next(session);
    else this.idle.push(session);
  }

  async use<T>(fn: (session: graphene.Session) => Promise<T>): Promise<T> {
    const session = this.idle.pop() ?? (await new Promise<graphene.Session>((resolve) => this.waiters.push(resolve)));
    try {
      return await fn(session);
    } finally {
      this.release(session);
    }
  }
}

function promisify<T>(start: (cb: (err: Error | null, value: T | null) => void) => void): Promise<T> {
  return new Promise((resolve, reject) => {
    start((err, value) =>
      err || value === null ? reject(err ?? new Error('PKCS#11 call returned nothing')) : resolve(value),
    );
  });
}

export class Pkcs11KeyStore implements KeyStore, Sealer {
  readonly kind = 'pkcs11' as const;
  readonly description: string;
  private readonly mod: graphene.Module;
  private readonly pool: SessionPool;
  private sessions: graphene.Session[];
  /** keyRef -> private key object handle; token object handles stay valid for the whole login. */
  private readonly handles = new Map<string, Buffer>();
  /** Raised each time the sessions are re-opened: handles found before belong to the old login. */
  private generation = 0;
  private reopening: Promise<void> | undefined;
  /**
   * Set while the token is away: the last fault, the outage (start, refusals), when the next attempt is due and the
   * back-off before the one after it; a timer makes that attempt even when no request comes.
   */
  private away:
    | { fault: string; outage: KeyStoreOutage; nextAttemptAt: number; backoffMs: number; timer?: NodeJS.Timeout }
    | undefined;
  /**
   * Operations between the recovery gate and their last PKCS#11 call (withRecovery, sign). A re-open waits until
   * none is left, so C_Finalize never runs while a thread is inside the module and no operation uses a session or
   * object handle of the old login (after C_Initialize, SoftHSM hands out the same handle numbers again).
   */
  private leases = 0;
  private readonly drainWaiters: Array<() => void> = [];
  private outageListener: ((outage: KeyStoreOutage) => void) | undefined;
  /** Token faults seen and re-opens that worked, for /metrics and tests. */
  readonly faults = { seen: 0, recovered: 0 };
  /** Told when the token faults, stays away and comes back (the service logs it); never given a PIN. */
  onEvent: (message: string) => void = () => undefined;
  private closed = false;
  private readonly threads: SignThreadPool | undefined;
  private readonly inlineBelowMs: number;
  /** Moving average of the token's time per signature, by key spec (ms). */
  private readonly signCost = new Map<KeySpec, number>();
  private signedInlineThisTurn = false;
  /** Where signatures were made, for diagnostics and tests: on the event loop (inline) or on a signing thread. */
  readonly signedOn = { eventLoop: 0, threads: 0 };

  private constructor(
    mod: graphene.Module,
    sessions: graphene.Session[],
    description: string,
    threads: SignThreadPool | undefined,
    inlineBelowMs: number,
    private readonly options: Pkcs11KeyStoreOptions,
  ) {
    this.inlineBelowMs = inlineBelowMs;
    this.mod = mod;
    this.sessions = sessions;
    this.pool = new SessionPool(sessions);
    this.description = description;
    this.threads = threads;
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
    const mod = graphene.Module.load(options.modulePath, 'signbridge-keystore');
    // CKF_OS_LOCKING_OK: signatures run on libuv's thread pool, several at once.
    mod.initialize({ flags: 2 });
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
    const out = await this.withRecovery(true, () =>
      this.pool.use(async (session) => {
        const key = this.sealingKey(session, true);
        const lib = session.lib;
        lib.C_EncryptInit(session.handle, gcm(iv, aad), key);
        return lib.C_Encrypt(session.handle, plaintext, Buffer.alloc(plaintext.length + 16));
      }),
    );
    return Buffer.concat([iv, out]);
  }

  /** Opens what seal() made; throws when the blob or its `aad` was altered (GCM tag) or the sealing key is gone. */
  async unseal(sealed: Buffer, aad: Buffer): Promise<Buffer> {
    if (sealed.length < 12 + 16) throw new Error('sealed blob too short');
    const iv = sealed.subarray(0, 12);
    const body = sealed.subarray(12);
    return this.withRecovery(true, () =>
      this.pool.use(async (session) => {
        const key = this.sealingKey(session, false);
        const lib = session.lib;
        lib.C_DecryptInit(session.handle, gcm(iv, aad), key);
        try {
          return lib.C_Decrypt(session.handle, body, Buffer.alloc(body.length));
        } catch (err) {
          // SoftHSM answers a GCM tag mismatch with CKR_GENERAL_ERROR, which otherwise means a token fault (re-open,
          // 503): a session that still answers says it was the blob (an altered import token, say).
          if (tokenFault(err) && sessionAnswers(session)) throw new Error('the sealed blob or its aad was altered');
          throw err;
        }
      }),
    );
  }

  /**
   * Runs `fn` on one of the key store's logged-in sessions, with the same recovery from token faults as signing
   * (`retry`: run it again after a re-open). Key import (src/keys/import/pkcs11-import.ts) unwraps through it.
   */
  inSession<T>(fn: (session: graphene.Session) => T | Promise<T>, retry = false): Promise<T> {
    return this.withRecovery(retry, () => this.pool.use(async (session) => fn(session)));
  }

  /** The sealing key's handle (cached with the key handles, so a re-open finds it again). */
  private sealingKey(session: graphene.Session, create: boolean): Buffer {
    const cached = this.handles.get(SEALING_KEY_LABEL);
    if (cached) return cached;
    const generation = this.generation;
    const found = session.find({ class: graphene.ObjectClass.SECRET_KEY, label: SEALING_KEY_LABEL });
    let handle: Buffer;
    if (found.length > 0) handle = found.items(0).handle;
    else if (!create) throw new ApiError('key_not_found', 'the token holds no sealing key for the software key store');
    else {
      handle = session.generateKey(graphene.KeyGenMechanism.AES, {
        class: graphene.ObjectClass.SECRET_KEY,
        keyType: graphene.KeyType.AES,
        token: true,
        private: true,
        sensitive: true,
        extractable: false,
        encrypt: true,
        decrypt: true,
        label: SEALING_KEY_LABEL,
        valueLen: 32,
      }).handle;
    }
    if (generation === this.generation) this.handles.set(SEALING_KEY_LABEL, handle);
    return handle;
  }

  async createKey(spec: KeySpec, label: string): Promise<CreatedKey> {
    const info = keyInfo(spec);
    if (info.family !== 'rsa' && info.family !== 'ec') {
      throw new ApiError('unsupported_key_spec', `key_spec ${spec} is not supported by ${this.description}`);
    }
    const id = randomBytes(16);
    const common = { token: true, id, label };
    const generation = this.generation;
    return this.withRecovery(false, () =>
      this.pool.use(async (session) => {
        const pair =
          info.family === 'rsa'
            ? await promisify<graphene.IKeyPair>((cb) =>
                session.generateKeyPair(
                  graphene.KeyGenMechanism.RSA,
                  {
                    ...common,
                    keyType: graphene.KeyType.RSA,
                    verify: true,
                    modulusBits: info.bits,
                    publicExponent: Buffer.from([1, 0, 1]),
                  },
                  privateTemplate(common, graphene.KeyType.RSA),
                  cb,
                ),
              )
            : await promisify<graphene.IKeyPair>((cb) =>
                session.generateKeyPair(
                  graphene.KeyGenMechanism.EC,
                  { ...common, keyType: graphene.KeyType.EC, verify: true, paramsEC: CURVE_PARAMS[info.curve] },
                  privateTemplate(common, graphene.KeyType.EC),
                  cb,
                ),
              );
        const keyRef = KEY_REF_PREFIX + id.toString('hex');
        if (generation === this.generation) this.handles.set(keyRef, pair.privateKey.handle);
        const publicKeyPem =
          info.family === 'rsa'
            ? rsaPublicKeyPem(pair.publicKey.getAttribute({ modulus: null, publicExponent: null }))
            : ecPublicKeyPem(info.curve, pair.publicKey.getAttribute({ pointEC: null }).pointEC as Buffer);
        return { keyRef, publicKeyPem };
      }),
    );
  }

  async sign(keyRef: string, spec: KeySpec, algorithm: SigningAlgorithm, digest: Buffer): Promise<Buffer> {
    if (this.closed) throw new ApiError('key_store_unavailable', 'the key store is shutting down');
    const alg = algorithmInfo(algorithm);
    if (alg.family !== 'rsa' && alg.family !== 'ec') throw new Error(`a PKCS#11 token here cannot sign ${algorithm}`);
    if (digest.length !== DIGEST_LENGTH[alg.hash]) throw new Error('digest length does not match the algorithm');
    let mechanism: SignJob['mechanism'];
    let input: Buffer;
    if (alg.padding === 'pkcs1') {
      mechanism = { mechanism: pkcs11js.CKM_RSA_PKCS };
      input = Buffer.concat([DIGEST_INFO_PREFIX[alg.hash], digest]);
    } else if (alg.padding === 'pss') {
      mechanism = {
        mechanism: pkcs11js.CKM_RSA_PKCS_PSS,
        parameter: { type: pkcs11js.CK_PARAMS_RSA_PSS, ...PSS_RAW[alg.hash] },
      };
      input = digest;
    } else {
      mechanism = { mechanism: pkcs11js.CKM_ECDSA };
      input = digest;
    }
    // The recovery gate (see guarded); written out here so a signature allocates no closure.
    while (this.away || this.reopening) await this.reopen(this.generation);
    const generation = this.generation;
    let signature: Buffer;
    try {
      signature = await this.leased(this.signOnce(keyRef, spec, mechanism, input));
    } catch (err) {
      signature = await this.afterFault(err, generation, () =>
        this.guarded(() => this.signOnce(keyRef, spec, mechanism, input)),
      );
    }
    if (alg.padding !== 'ecdsa') return signature;
    const info = keyInfo(spec);
    if (info.family !== 'ec' || signature.length !== 2 * EC_FIELD_BYTES[info.curve]) {
      throw new Error(`token returned an ECDSA signature of unexpected length ${signature.length}`);
    }
    return ecdsaRawToDer(signature);
  }

  private async signOnce(keyRef: string, spec: KeySpec, mechanism: SignJob['mechanism'], input: Buffer) {
    const handle = this.handles.get(keyRef) ?? (await this.pool.use(async (s) => this.findPrivateKey(s, keyRef)));
    return this.threads
      ? (this.signInline(spec, mechanism, handle, input) ?? (await this.signOnThread(spec, mechanism, handle, input)))
      : await this.pool.use(async (session) => {
          // C_SignInit is synchronous; C_Sign runs on libuv's thread pool so the event loop stays free.
          const lib = session.lib;
          lib.C_SignInit(session.handle, mechanism as pkcs11js.Mechanism, handle);
          return promisify<Buffer>((cb) => lib.C_Sign(session.handle, input, Buffer.alloc(1024), cb));
        });
  }

  /**
   * Runs `op`. When the token answers with a fault that may have cost it the sessions, the login or the object
   * handles (pkcs11-faults.ts), the sessions are opened again, the key store logs in again, cached handles are
   * dropped, and `op` runs once more (if `retry`; creating a key is not repeated, it might exist). While the token
   * stays away every caller gets key_store_unavailable (503) and attempts follow REOPEN_BACKOFF, so signing resumes
   * by itself when the token is back. Success costs no PKCS#11 call.
   */
  private async withRecovery<T>(retry: boolean, op: () => Promise<T>): Promise<T> {
    while (this.away || this.reopening) await this.reopen(this.generation);
    const generation = this.generation;
    try {
      return await this.leased(op());
    } catch (err) {
      return this.afterFault(err, generation, retry ? () => this.guarded(op) : undefined);
    }
  }

  /**
   * The recovery gate, then `op` under a lease: waits out a re-open under way (or makes one that is due), throws
   * key_store_unavailable while the token is away. The last check of the gate and the lease happen in one
   * synchronous stretch, so no re-open can start in between.
   */
  private async guarded<T>(op: () => Promise<T>): Promise<T> {
    while (this.away || this.reopening) await this.reopen(this.generation);
    return this.leased(op());
  }

  /**
   * Holds a lease while `running` is under way. Callers start the operation and call this in the same synchronous
   * stretch as their last gate check, so a re-open that starts later waits for the lease.
   */
  private async leased<T>(running: Promise<T>): Promise<T> {
    this.leases++;
    try {
      return await running;
    } finally {
      this.leases--;
      if (this.leases === 0) for (const wake of this.drainWaiters.splice(0)) wake();
    }
  }

  /** Resolves true once no operation holds a lease, false after DRAIN_TIMEOUT_MS (a module call that hangs). */
  private drained(): Promise<boolean> {
    if (this.leases === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), DRAIN_TIMEOUT_MS).unref();
      this.drainWaiters.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }

  /** The failure half of withRecovery (sign() calls it directly, so a signature allocates no closure). */
  private async afterFault<T>(err: unknown, generation: number, retry: (() => Promise<T>) | undefined): Promise<T> {
    const fault = tokenFault(err);
    if (!fault) throw err;
    this.faults.seen++;
    await this.reopen(generation, fault);
    if (!retry) throw keyStoreUnavailable(fault);
    try {
      return await retry();
    } catch (again) {
      const stillFailing = tokenFault(again);
      if (!stillFailing) throw again;
      // The token opened and logged in again but still fails this operation: this request fails; others (other
      // keys) go on, so the token is not marked away.
      this.faults.seen++;
      throw keyStoreUnavailable(stillFailing);
    }
  }

  /**
   * Re-opens the token, unless someone already did since `seenGeneration`. One re-open at a time; callers that
   * fault meanwhile wait for it. While the token is away an attempt is made only when due (REOPEN_BACKOFF); before
   * that, callers get key_store_unavailable at once.
   */
  private reopen(seenGeneration: number, fault?: string): Promise<void> {
    if (this.closed) return Promise.reject(new ApiError('key_store_unavailable', 'the key store is closed'));
    if (this.generation !== seenGeneration && !this.away) return Promise.resolve();
    if (this.reopening) return this.reopening;
    if (this.away && Date.now() < this.away.nextAttemptAt) {
      return Promise.reject(keyStoreUnavailable(this.away.fault, this.away.outage));
    }
    return this.startReopen(fault ?? this.away?.fault ?? 'CKR_DEVICE_ERROR');
  }

  private startReopen(fault: string): Promise<void> {
    this.reopening = this.openAgain(fault).finally(() => {
      this.reopening = undefined;
    });
    return this.reopening;
  }

  /**
   * Escalates: first new sessions and a new login on the module as it is; if the token is still not usable that
   * way, C_Finalize + C_Initialize the module (a token that went away and came back is only seen again after that
   * by SoftHSM and by many network HSM clients), find the token by label again, log in again. Either way every
   * signing thread opens a new session and every cached object handle is dropped. It starts once the operations
   * under way at the token have ended (leases), and new ones wait for it at the gate.
   */
  private async openAgain(fault: string): Promise<void> {
    if (!this.away) this.onEvent(`token fault ${fault}: opening new sessions and logging in again`);
    if (!(await this.drained())) {
      return this.stillAway(new Error(`operations at the token did not end within ${DRAIN_TIMEOUT_MS} ms`), fault);
    }
    if (this.closed) throw new ApiError('key_store_unavailable', 'the key store is closed');
    try {
      await this.openSessions(false);
    } catch (light) {
      try {
        this.reinitialiseModule();
        await this.openSessions(true);
      } catch (err) {
        return this.stillAway(err, fault);
      }
      this.onEvent(`the token was only usable again after C_Finalize + C_Initialize (${describe(light)})`);
    }
    const away = this.away;
    if (away) {
      clearTimeout(away.timer);
      this.away = undefined;
      away.outage.end();
      this.outageListener?.(away.outage);
    }
    this.faults.recovered++;
    this.onEvent(`key store re-opened after ${fault}: new sessions, logged in, key handles looked up again`);
  }

  /**
   * New logged-in sessions on the token found by label, checked to be usable, handed out from now on; then every
   * signing thread opens a new one. `afterReinitialise`: the old sessions ended with C_Finalize and their handle
   * numbers may belong to new sessions now, so they are forgotten, never closed.
   */
  private async openSessions(afterReinitialise: boolean): Promise<void> {
    const sessions = openLoggedIn(findToken(this.mod, this.options.tokenLabel), this.options);
    try {
      checkUsable(sessions[0] as graphene.Session);
    } catch (err) {
      for (const s of sessions) closeQuietly(s);
      throw err;
    }
    this.generation++;
    this.handles.clear();
    const old = this.pool.replace(sessions, afterReinitialise);
    if (!afterReinitialise) for (const s of old) closeQuietly(s);
    this.sessions = sessions;
    await this.threads?.reopenSessions(afterReinitialise);
  }

  /** C_Finalize (which ends every session of the process, the signing threads' too) and C_Initialize again. */
  private reinitialiseModule(): void {
    try {
      this.mod.finalize();
    } catch {
      // not initialised (an earlier C_Initialize failed): initialise below all the same
    }
    this.mod.initialize({ flags: 2 });
  }

  private stillAway(err: unknown, fault: string): never {
    if (this.closed) throw new ApiError('key_store_unavailable', 'the key store is closed');
    const lastFault = tokenFault(err) ?? fault;
    let away = this.away;
    if (!away) {
      const outage = new KeyStoreOutage(this.description, lastFault);
      away = { fault: lastFault, outage, nextAttemptAt: 0, backoffMs: REOPEN_BACKOFF.firstMs };
      this.away = away;
      this.onEvent(`the token cannot be re-opened yet (${describe(err)}); signing answers 503 until it is back`);
      this.outageListener?.(outage);
    } else {
      away.fault = lastFault;
      away.backoffMs = Math.min(away.backoffMs * 2, REOPEN_BACKOFF.maxMs);
    }
    // The next attempt, also when no request or /readyz asks (the outage's end is recorded when it works).
    clearTimeout(away.timer);
    away.nextAttemptAt = Date.now() + away.backoffMs;
    away.timer = setTimeout(() => {
      if (!this.closed && this.away && !this.reopening) this.startReopen(this.away.fault).catch(noop);
    }, away.backoffMs);
    away.timer.unref();
    throw keyStoreUnavailable(lastFault, away.outage);
  }

  /** The outage under way: the token is away and re-opening it has failed so far. */
  get outage(): KeyStoreOutage | undefined {
    return this.away?.outage;
  }

  reportOutages(listener: (outage: KeyStoreOutage) => void): void {
    this.outageListener = listener;
  }

  /**
   * When nothing else is signing, handing a cheap signature to a thread costs more than making it: two thread
   * wake-ups (~0.2-0.4 ms on a VM whose idle cores sleep) against SoftHSM's 0.07 ms for P-256 or 0.6 ms for
   * RSA-2048. So a key spec the token signs in under `inlineBelowMs` is signed right here while the threads are
   * idle; under load (a thread busy, or a second request in the same turn) signatures go to the threads and use
   * every core. Undefined: use a thread.
   */
  private signInline(spec: KeySpec, mechanism: SignJob['mechanism'], handle: Buffer, input: Buffer) {
    const cost = this.signCost.get(spec);
    if (cost === undefined || cost >= this.inlineBelowMs || this.threads?.inFlight !== 0) return undefined;
    // One inline signature per event-loop turn: the requests of a burst arrive in the same turn, and signing them
    // all here would keep the threads idle (they are never busy when each one asks) and the loop saturated.
    if (this.signedInlineThisTurn) return undefined;
    const session = this.pool.take();
    if (!session) return undefined;
    this.signedInlineThisTurn = true;
    setImmediate(() => {
      this.signedInlineThisTurn = false;
    });
    try {
      const start = performance.now();
      session.lib.C_SignInit(session.handle, mechanism as pkcs11js.Mechanism, handle);
      const signature = session.lib.C_Sign(session.handle, input, Buffer.alloc(1024));
      this.noteCost(spec, performance.now() - start);
      this.signedOn.eventLoop++;
      return signature;
    } finally {
      this.pool.release(session);
    }
  }

  private async signOnThread(spec: KeySpec, mechanism: SignJob['mechanism'], handle: Buffer, input: Buffer) {
    const { signature, tokenMs } = await (this.threads as SignThreadPool).sign({ mechanism, handle, input });
    this.noteCost(spec, tokenMs);
    this.signedOn.threads++;
    return signature;
  }

  private noteCost(spec: KeySpec, ms: number): void {
    const previous = this.signCost.get(spec);
    this.signCost.set(spec, previous === undefined ? ms : previous + SIGN_COST_WEIGHT * (ms - previous));
  }

  async destroyKey(keyRef: string): Promise<void> {
    const id = Buffer.from(keyRef.slice(KEY_REF_PREFIX.length), 'hex');
    await this.withRecovery(true, () =>
      this.pool.use(async (session) => {
        session.destroy({ id });
      }),
    );
    this.handles.delete(keyRef);
  }

  threadsBusy(): number {
    return this.threads?.inFlight ?? 0;
  }

  /**
   * Ready means able to sign: the sessions are alive and logged in. An idle session is asked (C_GetSessionInfo);
   * a fault there re-opens the token like a failed signature would. With every session busy, they are signing.
   */
  async ping(): Promise<void> {
    if (this.closed) throw new ApiError('key_store_unavailable', 'the key store is closed');
    while (this.away || this.reopening) await this.reopen(this.generation);
    const generation = this.generation;
    const session = this.pool.take();
    if (!session) return;
    let fault: string | undefined;
    try {
      const { state } = session.lib.C_GetSessionInfo(session.handle);
      if (state !== CKS_RO_USER_FUNCTIONS && state !== CKS_RW_USER_FUNCTIONS) {
        fault = 'CKR_USER_NOT_LOGGED_IN';
      }
    } catch (err) {
      fault = tokenFault(err);
      if (!fault) throw err;
    } finally {
      this.pool.release(session);
    }
    if (fault) {
      this.faults.seen++;
      await this.reopen(generation, fault);
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.away) clearTimeout(this.away.timer);
    await this.threads?.close();
    for (const s of this.sessions) closeQuietly(s);
    this.mod.finalize();
  }

  private findPrivateKey(session: graphene.Session, keyRef: string): Buffer {
    const cached = this.handles.get(keyRef);
    if (cached) return cached;
    const generation = this.generation;
    if (!keyRef.startsWith(KEY_REF_PREFIX)) throw new Error(`not a PKCS#11 key reference: ${keyRef}`);
    const id = Buffer.from(keyRef.slice(KEY_REF_PREFIX.length), 'hex');
    const found = session.find({ class: graphene.ObjectClass.PRIVATE_KEY, id });
    if (found.length !== 1) {
      throw new ApiError('key_not_found', `the key store holds no private key for ${keyRef}`);
    }
    const handle = found.items(0).handle;
    // A handle found on a session of the old login must not outlive a re-open that happened meanwhile.
    if (generation === this.generation) this.handles.set(keyRef, handle);
    return handle;
  }
}

function privateTemplate(common: { token: boolean; id: Buffer; label: string }, keyType: graphene.KeyType) {
  return {
    ...common,
    keyType,
    private: true,
    sign: true,
    sensitive: true,
    extractable: false,
  };
}

function noop(): void {}

function describe(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * Throws a token fault unless `session` is logged in and the token's objects can be searched: a token that came
 * back after going away can open sessions and still fail every use (SoftHSM answers CKR_GENERAL_ERROR).
 */
function checkUsable(session: graphene.Session): void {
  const lib = session.lib;
  const { state } = lib.C_GetSessionInfo(session.handle);
  if (state !== CKS_RO_USER_FUNCTIONS && state !== CKS_RW_USER_FUNCTIONS) {
    throw new Error('CKR_USER_NOT_LOGGED_IN: the new session is not logged in');
  }
  lib.C_FindObjectsInit(session.handle, [{ type: pkcs11js.CKA_CLASS, value: pkcs11js.CKO_PRIVATE_KEY }]);
  try {
    lib.C_FindObjects(session.handle, 1);
  } finally {
    lib.C_FindObjectsFinal(session.handle);
  }
}

function sessionAnswers(session: graphene.Session): boolean {
  try {
    session.lib.C_GetSessionInfo(session.handle);
    return true;
  } catch {
    return false;
  }
}

function closeQuietly(session: graphene.Session): void {
  try {
    session.close();
  } catch {
    // already closed by the token; nothing to release
  }
}

/** The key store's sessions on `slot`, logged in as the user (the login is the token's, shared by all of them). */
function openLoggedIn(slot: graphene.Slot, options: Pkcs11KeyStoreOptions): graphene.Session[] {
  const count = Math.max(1, options.sessions ?? 8);
  const sessions: graphene.Session[] = [];
  try {
    for (let i = 0; i < count; i++) {
      sessions.push(slot.open(graphene.SessionFlag.SERIAL_SESSION | graphene.SessionFlag.RW_SESSION));
    }
    try {
      sessions[0]?.login(options.pin, graphene.UserType.USER);
    } catch (err) {
      if (!/CKR_USER_ALREADY_LOGGED_IN/.test(String(err))) throw err;
    }
    return sessions;
  } catch (err) {
    for (const s of sessions) closeQuietly(s);
    throw err;
  }
}

/** The slot holding the token labelled `label` now (slot ids may change when a token comes back). */
function findToken(mod: graphene.Module, label: string): graphene.Slot {
  const slot = [...mod.getSlots(true)].find((s) => s.getToken().label.trim() === label);
  if (!slot) throw new Error(`CKR_TOKEN_NOT_PRESENT: no PKCS#11 token labelled "${label}"`);
  return slot;
}

function findOrInitialiseToken(mod: graphene.Module, options: Pkcs11KeyStoreOptions): graphene.Slot {
  const slots = [...mod.getSlots(true)];
  const labelled = slots.find((s) => s.getToken().label.trim() === options.tokenLabel);
  if (labelled) return labelled;
  if (options.initialiseWithSoPin === undefined) {
    const labels = slots.map((s) => `"${s.getToken().label.trim()}"`).join(', ') || 'none';
    throw new Error(`no PKCS#11 token labelled "${options.tokenLabel}" (tokens present: ${labels})`);
  }
  const free = slots.find((s) => !(s.getToken().flags & graphene.TokenFlag.TOKEN_INITIALIZED));
  if (!free) throw new Error('no uninitialised PKCS#11 slot to create the signbridge token in');
  // graphene's Slot.initToken mishandles pkcs11js 2's return value; call C_InitToken directly.
  free.lib.C_InitToken(free.handle, options.initialiseWithSoPin, options.tokenLabel.padEnd(32, ' '));
  // SoftHSM moves a freshly initialised token to a new slot id: look it up again by label.
  const slot = [...mod.getSlots(true)].find((s) => s.getToken().label.trim() === options.tokenLabel);
  if (!slot) throw new Error(`token "${options.tokenLabel}" vanished after initialisation`);
  const session = slot.open(graphene.SessionFlag.SERIAL_SESSION | graphene.SessionFlag.RW_SESSION);
  try {
    session.login(options.initialiseWithSoPin, graphene.UserType.SO);
    session.initPin(options.pin);
    session.logout();
  } finally {
    session.close();
  }
  return slot;
}

function rsaPublicKeyPem(attrs: { modulus?: Buffer | null; publicExponent?: Buffer | null }): string {
  if (!attrs.modulus || !attrs.publicExponent) throw new Error('token returned an RSA public key without modulus');
  return createPublicKey({
    key: { kty: 'RSA', n: attrs.modulus.toString('base64url'), e: attrs.publicExponent.toString('base64url') },
    format: 'jwk',
  })
    .export({ type: 'spki', format: 'pem' })
    .toString();
}

function ecPublicKeyPem(curve: NamedCurve, pointEc: Buffer): string {
  // CKA_EC_POINT is a DER OCTET STRING around the uncompressed point 04||X||Y.
  let point = pointEc;
  if (point[0] === 0x04 && point.length !== 1 + 2 * EC_FIELD_BYTES[curve]) {
    const lenByte = point[1] ?? 0;
    point = point.subarray(lenByte & 0x80 ? 2 + (lenByte & 0x7f) : 2);
  }
  try {
    return ecPointSpkiPem(curve, point);
  } catch {
    throw new Error('token returned a malformed EC point');
  }
}
