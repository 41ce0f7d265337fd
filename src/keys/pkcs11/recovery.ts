// Recovery from token faults: the gate every operation passes, the leases that let a re-open wait for the
// operations under way at the token, and the re-open itself (new sessions and login, then C_Finalize +
// C_Initialize; while the token stays away, 503 at once and attempts on REOPEN_BACKOFF).
import type * as graphene from 'graphene-pk11';
import { ApiError } from '../../errors.js';
import { KeyStoreOutage } from '../key-store.js';
import { keyStoreUnavailable, tokenFault } from './pkcs11-faults.js';

/**
 * Back-off between attempts to re-open a token that is away: the first after 1 s, then twice as long each time up
 * to 10 s, so a token that comes back is in use again at most ~10 s later. Requests meanwhile get 503 at once.
 */
export const REOPEN_BACKOFF = { firstMs: 1000, maxMs: 10_000 } as const;
/** How long a re-open waits for the operations still under way at the token to end before it gives up this try. */
const DRAIN_TIMEOUT_MS = 30_000;

/** What a re-open does at the token; the key store holds the module, the sessions and the handles it acts on. */
export interface ReopenableToken {
  /** New logged-in sessions on the token found by label, checked to be usable. */
  openUsableSessions(): graphene.Session[];
  /** Hands `sessions` out from now on and drops every cached object handle; every signing thread opens a new one. */
  adoptSessions(sessions: graphene.Session[], afterReinitialise: boolean): Promise<void>;
  /** C_Finalize + C_Initialize of the module. */
  reinitialiseModule(): void;
}

/** The recovery state of one PKCS#11 key store's token. */
export class TokenRecovery {
  private currentGeneration = 0;
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
  private shutDown = false;
  /** Token faults seen and re-opens that worked, for /metrics and tests. */
  readonly faults = { seen: 0, recovered: 0 };

  /**
   * `onEvent` is told when the token faults, stays away and comes back. `description` names the key store in the
   * outages.
   */
  constructor(
    private readonly description: string,
    private readonly token: ReopenableToken,
    private readonly onEvent: (message: string) => void,
  ) {}

  /** Raised each time the sessions are re-opened: handles found before belong to the old login. */
  get generation(): number {
    return this.currentGeneration;
  }

  get closed(): boolean {
    return this.shutDown;
  }

  /** True while a re-open is under way or the token is away: operations wait at the gate (`reopen`). */
  get gateShut(): boolean {
    return this.away !== undefined || this.reopening !== undefined;
  }

  /**
   * Runs `op`. When the token answers with a fault that may have cost it the sessions, the login or the object
   * handles (pkcs11-faults.ts), the sessions are opened again, the key store logs in again, cached handles are
   * dropped, and `op` runs once more (if `retry`; creating a key is not repeated, it might exist). While the token
   * stays away every caller gets key_store_unavailable (503) and attempts follow REOPEN_BACKOFF, so signing resumes
   * by itself when the token is back. Success costs no PKCS#11 call.
   */
  async withRecovery<T>(retry: boolean, op: () => Promise<T>): Promise<T> {
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
  async guarded<T>(op: () => Promise<T>): Promise<T> {
    while (this.away || this.reopening) await this.reopen(this.generation);
    return this.leased(op());
  }

  /**
   * Holds a lease while `running` is under way. Callers start the operation and call this in the same synchronous
   * stretch as their last gate check, so a re-open that starts later waits for the lease.
   */
  async leased<T>(running: Promise<T>): Promise<T> {
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
  async afterFault<T>(err: unknown, generation: number, retry: (() => Promise<T>) | undefined): Promise<T> {
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
  reopen(seenGeneration: number, fault?: string): Promise<void> {
    if (this.closed) return Promise.reject(new ApiError('key_store_unavailable', 'the key store is closed'));
    if (this.generation !== seenGeneration && !this.away) return Promise.resolve();
    if (this.reopening) return this.reopening;
    if (this.away && Date.now() < this.away.nextAttemptAt) {
      return Promise.reject(keyStoreUnavailable(this.away.fault, this.away.outage));
    }
    return this.startReopen(fault ?? this.away?.fault ?? 'CKR_DEVICE_ERROR');
  }

  /**
   * Makes the module read the token's objects again (C_Finalize + C_Initialize, new sessions, login), unless a
   * re-open happened since `seenGeneration`. SoftHSM keeps each process's list of the token's objects and reads the
   * folder again only when the token changed after this process's own last change: a key that another process (a
   * request worker, an admin command) made just before this one made its own stays unseen here until then.
   */
  rescan(seenGeneration: number): Promise<void> {
    if (this.closed) return Promise.reject(new ApiError('key_store_unavailable', 'the key store is closed'));
    if (this.generation !== seenGeneration) return Promise.resolve();
    if (this.reopening) return this.reopening;
    if (this.away) return this.reopen(seenGeneration);
    this.reopening = this.readAgain().finally(() => {
      this.reopening = undefined;
    });
    return this.reopening;
  }

  private async readAgain(): Promise<void> {
    const fault = 'CKR_DEVICE_ERROR';
    if (!(await this.drained())) {
      return this.stillAway(new Error(`operations at the token did not end within ${DRAIN_TIMEOUT_MS} ms`), fault);
    }
    if (this.closed) throw new ApiError('key_store_unavailable', 'the key store is closed');
    try {
      this.token.reinitialiseModule();
      await this.openSessions(true);
    } catch (err) {
      return this.stillAway(err, fault);
    }
    this.onEvent("the token's objects were read again: a key another process made was not seen here yet");
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
        this.token.reinitialiseModule();
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
    const sessions = this.token.openUsableSessions();
    this.currentGeneration++;
    await this.token.adoptSessions(sessions, afterReinitialise);
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

  /** No re-open from now on; the next one due is not made. */
  close(): void {
    this.shutDown = true;
    if (this.away) clearTimeout(this.away.timer);
  }
}

function noop(): void {}

function describe(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
