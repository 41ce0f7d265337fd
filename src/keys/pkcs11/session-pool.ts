// The key store's open sessions on its token, handed out one operation at a time.
import * as graphene from 'graphene-pk11';

/**
 * A fixed set of open sessions handed out one operation at a time (a PKCS#11 session runs one operation). After
 * the token lost its sessions, `replace` swaps in new ones; an old one still in use is closed when it comes back.
 */
export class SessionPool {
  private idle: graphene.Session[];
  private current: Set<graphene.Session>;
  /** Sessions of before a C_Finalize that were in use then: dropped when they come back, never closed. */
  private forgotten = new Set<graphene.Session>();
  /** Sessions an operation left midway (see `spoil`): replaced by a fresh one when they come back. */
  private readonly spoiled = new WeakSet<graphene.Session>();
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

  /**
   * A C_Sign failed on this session after its C_SignInit: the operation should have ended with it (PKCS#11 2.40,
   * C_Sign), but on a token that does not end it every later C_SignInit in the session would fail with
   * CKR_OPERATION_ACTIVE. When it comes back it is closed and a fresh session on its slot takes its place.
   */
  spoil(session: graphene.Session): void {
    this.spoiled.add(session);
  }

  release(session: graphene.Session): void {
    if (!this.current.has(session)) {
      if (!this.forgotten.delete(session)) closeQuietly(session);
      return;
    }
    if (this.spoiled.has(session)) session = this.renewed(session);
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

  /** A fresh session in place of `old`; `old` itself while the token cannot open one (a re-open replaces all). */
  private renewed(old: graphene.Session): graphene.Session {
    let fresh: graphene.Session;
    try {
      fresh = openSession(old.slot);
    } catch {
      return old;
    }
    this.current.delete(old);
    this.current.add(fresh);
    closeQuietly(old);
    return fresh;
  }
}

/** A read-write session on `slot`: the one kind the key store opens (it creates and imports keys as well as signs). */
export function openSession(slot: graphene.Slot): graphene.Session {
  return slot.open(graphene.SessionFlag.SERIAL_SESSION | graphene.SessionFlag.RW_SESSION);
}

export function closeQuietly(session: graphene.Session): void {
  try {
    session.close();
  } catch {
    // already closed by the token; nothing to release
  }
}
