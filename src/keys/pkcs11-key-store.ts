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
import { ApiError } from '../errors.js';
import type { CreatedKey, KeyStore } from './key-store.js';
import { type SignJob, SignThreadPool } from './sign-thread-pool.js';

export interface Pkcs11KeyStoreOptions {
  modulePath: string;
  tokenLabel: string;
  pin: string;
  /** Sessions kept open; concurrent signatures beyond this wait for a free one. */
  sessions?: number;
  /** When the labelled token does not exist, initialise the first free slot with this SO PIN (SoftHSM). */
  initialiseWithSoPin?: string;
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
const CURVE_FIELD_BYTES: Record<NamedCurve, number> = { 'P-256': 32, 'P-384': 48, 'P-521': 66 };

/** The same mechanisms as plain pkcs11js structures, which can cross to a signing thread. */
const PSS_RAW = {
  sha256: { hashAlg: pkcs11js.CKM_SHA256, mgf: pkcs11js.CKG_MGF1_SHA256, saltLen: 32 },
  sha384: { hashAlg: pkcs11js.CKM_SHA384, mgf: pkcs11js.CKG_MGF1_SHA384, saltLen: 48 },
  sha512: { hashAlg: pkcs11js.CKM_SHA512, mgf: pkcs11js.CKG_MGF1_SHA512, saltLen: 64 },
};

const KEY_REF_PREFIX = 'pkcs11:id=';

/** A fixed set of open sessions handed out one operation at a time (a PKCS#11 session runs one operation). */
class SessionPool {
  private readonly idle: graphene.Session[];
  private readonly waiters: Array<(s: graphene.Session) => void> = [];

  constructor(sessions: graphene.Session[]) {
    this.idle = [...sessions];
  }

  /** An idle session now, or undefined when all are in use. Give it back with `release`. */
  take(): graphene.Session | undefined {
    return this.idle.pop();
  }

  release(session: graphene.Session): void {
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

export class Pkcs11KeyStore implements KeyStore {
  readonly description: string;
  private readonly mod: graphene.Module;
  private readonly pool: SessionPool;
  private readonly sessions: graphene.Session[];
  /** keyRef -> private key object handle; token object handles stay valid for the whole login. */
  private readonly handles = new Map<string, Buffer>();
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
  ) {
    this.inlineBelowMs = inlineBelowMs;
    this.mod = mod;
    this.sessions = sessions;
    this.pool = new SessionPool(sessions);
    this.description = description;
    this.threads = threads;
  }

  static open(options: Pkcs11KeyStoreOptions): Pkcs11KeyStore {
    const mod = graphene.Module.load(options.modulePath, 'signbridge-keystore');
    // CKF_OS_LOCKING_OK: signatures run on libuv's thread pool, several at once.
    mod.initialize({ flags: 2 });
    try {
      const slot = findOrInitialiseToken(mod, options);
      const count = Math.max(1, options.sessions ?? 8);
      const sessions: graphene.Session[] = [];
      for (let i = 0; i < count; i++) {
        sessions.push(slot.open(graphene.SessionFlag.SERIAL_SESSION | graphene.SessionFlag.RW_SESSION));
      }
      try {
        sessions[0]?.login(options.pin, graphene.UserType.USER);
      } catch (err) {
        if (!/CKR_USER_ALREADY_LOGGED_IN/.test(String(err))) throw err;
      }
      const threadCount = options.signThreads ?? availableParallelism();
      const threads =
        threadCount > 0 ? new SignThreadPool(options.modulePath, options.tokenLabel, threadCount) : undefined;
      return new Pkcs11KeyStore(
        mod,
        sessions,
        `pkcs11:${mod.libraryDescription.trim()}/${options.tokenLabel}`,
        threads,
        options.inlineBelowMs ?? 2,
      );
    } catch (err) {
      mod.finalize();
      throw err;
    }
  }

  supports(spec: KeySpec): boolean {
    try {
      keyInfo(spec);
      return true;
    } catch {
      return false;
    }
  }

  async createKey(spec: KeySpec, label: string): Promise<CreatedKey> {
    const info = keyInfo(spec);
    const id = randomBytes(16);
    const common = { token: true, id, label };
    return this.pool.use(async (session) => {
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
      this.handles.set(keyRef, pair.privateKey.handle);
      const publicKeyPem =
        info.family === 'rsa'
          ? rsaPublicKeyPem(pair.publicKey.getAttribute({ modulus: null, publicExponent: null }))
          : ecPublicKeyPem(info.curve, pair.publicKey.getAttribute({ pointEC: null }).pointEC as Buffer);
      return { keyRef, publicKeyPem };
    });
  }

  async sign(keyRef: string, spec: KeySpec, algorithm: SigningAlgorithm, digest: Buffer): Promise<Buffer> {
    if (this.closed) throw new ApiError('key_store_unavailable', 'the key store is shutting down');
    const alg = algorithmInfo(algorithm);
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
    const handle = this.handles.get(keyRef) ?? (await this.pool.use(async (s) => this.findPrivateKey(s, keyRef)));
    const signature = this.threads
      ? (this.signInline(spec, mechanism, handle, input) ?? (await this.signOnThread(spec, mechanism, handle, input)))
      : await this.pool.use(async (session) => {
          // C_SignInit is synchronous; C_Sign runs on libuv's thread pool so the event loop stays free.
          const lib = session.lib;
          lib.C_SignInit(session.handle, mechanism as pkcs11js.Mechanism, handle);
          return promisify<Buffer>((cb) => lib.C_Sign(session.handle, input, Buffer.alloc(1024), cb));
        });
    if (alg.padding !== 'ecdsa') return signature;
    const info = keyInfo(spec);
    if (info.family !== 'ec' || signature.length !== 2 * CURVE_FIELD_BYTES[info.curve]) {
      throw new Error(`token returned an ECDSA signature of unexpected length ${signature.length}`);
    }
    return ecdsaRawToDer(signature);
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
    await this.pool.use(async (session) => {
      session.destroy({ id });
    });
    this.handles.delete(keyRef);
  }

  threadsBusy(): number {
    return this.threads?.inFlight ?? 0;
  }

  async ping(): Promise<void> {
    if (this.closed) throw new ApiError('key_store_unavailable', 'the key store is closed');
    await this.pool.use(async (session) => {
      session.slot.getToken();
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.threads?.close();
    for (const s of this.sessions) {
      try {
        s.close();
      } catch {
        // already closed by the token; nothing to release
      }
    }
    this.mod.finalize();
  }

  private findPrivateKey(session: graphene.Session, keyRef: string): Buffer {
    const cached = this.handles.get(keyRef);
    if (cached) return cached;
    if (!keyRef.startsWith(KEY_REF_PREFIX)) throw new Error(`not a PKCS#11 key reference: ${keyRef}`);
    const id = Buffer.from(keyRef.slice(KEY_REF_PREFIX.length), 'hex');
    const found = session.find({ class: graphene.ObjectClass.PRIVATE_KEY, id });
    if (found.length !== 1) {
      throw new ApiError('key_not_found', `the key store holds no private key for ${keyRef}`);
    }
    const handle = found.items(0).handle;
    this.handles.set(keyRef, handle);
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
  if (point[0] === 0x04 && point.length !== 1 + 2 * CURVE_FIELD_BYTES[curve]) {
    const lenByte = point[1] ?? 0;
    point = point.subarray(lenByte & 0x80 ? 2 + (lenByte & 0x7f) : 2);
  }
  const size = CURVE_FIELD_BYTES[curve];
  if (point[0] !== 0x04 || point.length !== 1 + 2 * size) throw new Error('token returned a malformed EC point');
  return createPublicKey({
    key: {
      kty: 'EC',
      crv: curve,
      x: point.subarray(1, 1 + size).toString('base64url'),
      y: point.subarray(1 + size).toString('base64url'),
    },
    format: 'jwk',
  })
    .export({ type: 'spki', format: 'pem' })
    .toString();
}
