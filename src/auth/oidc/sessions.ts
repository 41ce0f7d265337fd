// Browser sessions after an IdP sign-in, for the device-flow confirmation and the web console. The cookie holds a
// 256-bit random id; the store keeps only its SHA-256, the person, a CSRF token, and the times for the idle and
// absolute expiry. A new session is made at every sign-in (the old one, if the browser sent one, is deleted).
import { timingSafeEqual } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { BrowserSessionRecord, PeopleStore, PersonRecord } from '../../store/people/people-store.js';
import { randomToken, sha256Hex } from './relying-party.js';

export interface SessionSettings {
  /** A session unused this long ends (default 30 min). */
  idleMs: number;
  /** A session ends this long after sign-in whatever happens (default 12 h). */
  absoluteMs: number;
}

export const DEFAULT_SESSION_SETTINGS: SessionSettings = { idleMs: 30 * 60_000, absoluteMs: 12 * 3_600_000 };

export interface CookieOptions {
  secure: boolean;
  maxAgeS?: number;
}

/**
 * Cookie names: `__Host-` when the service is served over https (the browser then insists on Secure, Path=/ and
 * no Domain, so no sibling host can set or shadow it); plain names over http (development, tests).
 */
export function cookieName(base: string, secure: boolean): string {
  return secure ? `__Host-${base}` : base;
}

/** Set-Cookie value: HttpOnly, SameSite=Lax (the IdP's redirect back is a top-level GET), Path=/. */
export function serializeCookie(name: string, value: string, opts: CookieOptions): string {
  const parts = [`${name}=${value}`, 'Path=/', 'HttpOnly', 'SameSite=Lax'];
  if (opts.secure) parts.push('Secure');
  if (opts.maxAgeS !== undefined) parts.push(`Max-Age=${opts.maxAgeS}`);
  return parts.join('; ');
}

export function readCookie(request: FastifyRequest, name: string): string | undefined {
  const header = request.headers.cookie;
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/** Adds a Set-Cookie header without dropping the ones already set on the reply. */
export function appendCookie(reply: FastifyReply, cookie: string): void {
  const existing = reply.getHeader('set-cookie');
  const list = existing === undefined ? [] : Array.isArray(existing) ? existing : [String(existing)];
  reply.header('set-cookie', [...list, cookie]);
}

export function constantTimeEqual(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

export interface ActiveSession {
  session: BrowserSessionRecord;
  person: PersonRecord;
}

export class BrowserSessions {
  readonly cookie: string;

  constructor(
    private readonly people: PeopleStore,
    private readonly secure: boolean,
    private readonly now: () => Date,
    private readonly settings: SessionSettings = DEFAULT_SESSION_SETTINGS,
  ) {
    this.cookie = cookieName('signbridge-session', secure);
  }

  /** Opens a session for `personId` (rotating any session the browser had) and sets its cookie. */
  async open(request: FastifyRequest, reply: FastifyReply, personId: string): Promise<BrowserSessionRecord> {
    const previous = readCookie(request, this.cookie);
    if (previous) await this.people.deleteSession(sha256Hex(previous));
    const id = randomToken();
    const at = this.now();
    const record: BrowserSessionRecord = {
      idHash: sha256Hex(id),
      personId,
      csrfToken: randomToken(),
      createdAt: at.toISOString(),
      lastSeenAt: at.toISOString(),
      expiresAt: new Date(at.getTime() + this.settings.absoluteMs).toISOString(),
    };
    await this.people.createSession(record);
    appendCookie(
      reply,
      serializeCookie(this.cookie, id, { secure: this.secure, maxAgeS: Math.floor(this.settings.absoluteMs / 1000) }),
    );
    return record;
  }

  /**
   * The request's person, or null: no cookie, an unknown session, one past its idle or absolute expiry (then
   * deleted), or a disabled person. Each use moves the idle expiry on.
   */
  async lookup(request: FastifyRequest): Promise<ActiveSession | null> {
    const id = readCookie(request, this.cookie);
    if (!id) return null;
    const idHash = sha256Hex(id);
    const session = await this.people.getSession(idHash);
    if (!session) return null;
    const now = this.now().getTime();
    if (Date.parse(session.expiresAt) <= now || Date.parse(session.lastSeenAt) + this.settings.idleMs <= now) {
      await this.people.deleteSession(idHash);
      return null;
    }
    const person = await this.people.getPerson(session.personId);
    if (!person || person.disabledAt) return null;
    await this.people.touchSession(idHash, new Date(now).toISOString());
    return { session, person };
  }

  /** Ends the browser's session (sign-out) and clears its cookie. */
  async close(request: FastifyRequest, reply: FastifyReply): Promise<void> {
    const id = readCookie(request, this.cookie);
    if (id) await this.people.deleteSession(sha256Hex(id));
    appendCookie(reply, serializeCookie(this.cookie, '', { secure: this.secure, maxAgeS: 0 }));
  }
}

/** The hidden form field every state-changing form carries (synchronizer token bound to the session). */
export const CSRF_FIELD = 'csrf_token';

/** True when `presented` is the session's CSRF token (constant-time). */
export function csrfValid(session: BrowserSessionRecord, presented: unknown): boolean {
  return typeof presented === 'string' && presented.length > 0 && constantTimeEqual(session.csrfToken, presented);
}
