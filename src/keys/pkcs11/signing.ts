// How the token signs a digest: the mechanism and its input for each algorithm, and where the signature is made
// (on the event loop, on a signing thread, or with C_Sign on libuv's pool).
import { performance } from 'node:perf_hooks';
import type * as graphene from 'graphene-pk11';
import pkcs11js from 'pkcs11js';
import type { DigestAlgorithmInfo, KeySpec } from '../../crypto/algorithms.js';
import { DIGEST_INFO_PREFIX } from '../../crypto/encoding.js';
import { promisify } from './promisify.js';
import type { SessionPool } from './session-pool.js';
import type { SignJob, SignThreadPool } from './sign-thread-pool.js';

/** Weight of the newest measurement in the moving average of a key spec's signing time. */
const SIGN_COST_WEIGHT = 0.2;

/** The same mechanisms as plain pkcs11js structures, which can cross to a signing thread. */
const PSS_RAW = {
  sha256: { hashAlg: pkcs11js.CKM_SHA256, mgf: pkcs11js.CKG_MGF1_SHA256, saltLen: 32 },
  sha384: { hashAlg: pkcs11js.CKM_SHA384, mgf: pkcs11js.CKG_MGF1_SHA384, saltLen: 48 },
  sha512: { hashAlg: pkcs11js.CKM_SHA512, mgf: pkcs11js.CKG_MGF1_SHA512, saltLen: 64 },
};

/** The mechanism that signs a digest with `alg`; PSS with `pssSaltLength` bytes of salt (default: the hash's length). */
export function signMechanism(alg: DigestAlgorithmInfo, pssSaltLength?: number): SignJob['mechanism'] {
  if (alg.padding === 'pkcs1') return { mechanism: pkcs11js.CKM_RSA_PKCS };
  if (alg.padding === 'pss') {
    const params = PSS_RAW[alg.hash];
    return {
      mechanism: pkcs11js.CKM_RSA_PKCS_PSS,
      // CK_RSA_PKCS_PSS_PARAMS.sLen: the token makes the salt this long.
      parameter: { type: pkcs11js.CK_PARAMS_RSA_PSS, ...params, saltLen: pssSaltLength ?? params.saltLen },
    };
  }
  return { mechanism: pkcs11js.CKM_ECDSA };
}

/** What that mechanism signs: the DigestInfo around `digest` for PKCS #1 v1.5, else the digest itself. */
export function signInput(alg: DigestAlgorithmInfo, digest: Buffer): Buffer {
  return alg.padding === 'pkcs1' ? Buffer.concat([DIGEST_INFO_PREFIX[alg.hash], digest]) : digest;
}

/** C_SignInit here (it is synchronous), C_Sign on libuv's thread pool so the event loop stays free. */
export async function signOnLibuv(
  pool: SessionPool,
  session: graphene.Session,
  mechanism: SignJob['mechanism'],
  handle: Buffer,
  input: Buffer,
): Promise<Buffer> {
  const lib = session.lib;
  lib.C_SignInit(session.handle, mechanism as pkcs11js.Mechanism, handle);
  try {
    return await promisify<Buffer>((cb) => lib.C_Sign(session.handle, input, Buffer.alloc(1024), cb));
  } catch (err) {
    pool.spoil(session);
    throw err;
  }
}

/** Where a signature is made when there are signing threads: on the event loop when cheap and idle, else a thread. */
export class SignPlacement {
  /** Moving average of the token's time per signature, by key spec (ms). */
  private readonly signCost = new Map<KeySpec, number>();
  private signedInlineThisTurn = false;
  /** Where signatures were made, for diagnostics and tests: on the event loop (inline) or on a signing thread. */
  readonly signedOn = { eventLoop: 0, threads: 0 };

  constructor(
    private readonly pool: SessionPool,
    private readonly threads: SignThreadPool | undefined,
    private readonly inlineBelowMs: number,
  ) {}

  /**
   * When nothing else is signing, handing a cheap signature to a thread costs more than making it: two thread
   * wake-ups (~0.2-0.4 ms on a VM whose idle cores sleep) against SoftHSM's 0.07 ms for P-256 or 0.6 ms for
   * RSA-2048. So a key spec the token signs in under `inlineBelowMs` is signed right here while the threads are
   * idle; under load (a thread busy, or a second request in the same turn) signatures go to the threads and use
   * every core. Undefined: use a thread.
   */
  signInline(spec: KeySpec, mechanism: SignJob['mechanism'], handle: Buffer, input: Buffer) {
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
      let signature: Buffer;
      try {
        signature = session.lib.C_Sign(session.handle, input, Buffer.alloc(1024));
      } catch (err) {
        this.pool.spoil(session);
        throw err;
      }
      this.noteCost(spec, performance.now() - start);
      this.signedOn.eventLoop++;
      return signature;
    } finally {
      this.pool.release(session);
    }
  }

  async signOnThread(spec: KeySpec, mechanism: SignJob['mechanism'], handle: Buffer, input: Buffer) {
    const { signature, tokenMs } = await (this.threads as SignThreadPool).sign({ mechanism, handle, input });
    this.noteCost(spec, tokenMs);
    this.signedOn.threads++;
    return signature;
  }

  /** A batch's `count` signatures made on the threads, `tokenMs` each on average. */
  noteThreadSignatures(spec: KeySpec, count: number, tokenMs: number): void {
    this.noteCost(spec, tokenMs);
    this.signedOn.threads += count;
  }

  private noteCost(spec: KeySpec, ms: number): void {
    const previous = this.signCost.get(spec);
    this.signCost.set(spec, previous === undefined ? ms : previous + SIGN_COST_WEIGHT * (ms - previous));
  }
}
