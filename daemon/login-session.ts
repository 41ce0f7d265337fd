// The daemon's view of `signbridge login` (login-files.ts): the key, the tenant and the service it names, re-read
// when the files change (a new login needs no restart), an expired key refused before it reaches the service
// (with a message that says to run `signbridge login`), and log warnings while the expiry comes near.
import { statSync } from 'node:fs';
import type { Logger } from 'pino';
import { type ApiKeySource, apiKeyFromFile, CredentialError } from './credentials.js';
import type { TenantConfig } from './key-catalog.js';
import { keyFingerprint, type LoginFiles, type LoginMetadata, readLoginMetadata } from './login-files.js';

/** Seconds before expiry at which the daemon warns (once each, per key). */
export const EXPIRY_WARNINGS_S = [3600, 600];
const CHECK_EVERY_MS = 60_000;

export interface LoginSessionOptions {
  now?: () => number;
  checkEveryMs?: number;
}

export class LoginSession {
  readonly files: LoginFiles;
  private readonly now: () => number;
  private readonly checkEveryMs: number;
  private readonly fileKey: ApiKeySource;
  private meta: { stamp: string; value: LoginMetadata | undefined } | undefined;
  private log: Logger | undefined;
  private timer: NodeJS.Timeout | undefined;
  private readonly warned = new Set<string>();
  private lastTenant: string | undefined;

  constructor(files: LoginFiles, opts: LoginSessionOptions = {}) {
    this.files = files;
    this.now = opts.now ?? Date.now;
    this.checkEveryMs = opts.checkEveryMs ?? CHECK_EVERY_MS;
    // Fails at start on a bad mode or owner, as a configured file does. Looked at on every call, as the metadata
    // beside it is (a login replaces both, and the two must match): not yet the once-a-second look of a key file.
    this.fileKey = apiKeyFromFile(files.keyFile, undefined, { recheckMs: 0 });
  }

  /** The key as an ApiKeySource: a missing or expired key is a CredentialError that names the fix. */
  apiKeySource(): ApiKeySource {
    return {
      description: `file ${this.files.keyFile} (signbridge login)`,
      renewHint: 'run `signbridge login` to sign in again',
      get: () => this.currentKey(),
    };
  }

  /** The metadata that belongs to the key beside it, or undefined (none, unreadable, or from another login). */
  metadata(): LoginMetadata | undefined {
    let stamp: string;
    try {
      const st = statSync(this.files.metadataFile);
      stamp = `${st.ino}:${st.mtimeMs}:${st.ctimeMs}:${st.size}`;
    } catch {
      stamp = 'none';
    }
    if (this.meta?.stamp !== stamp) {
      let value: LoginMetadata | undefined;
      try {
        value = readLoginMetadata(this.files);
      } catch (err) {
        this.log?.warn({ err: (err as Error).message }, 'login metadata ignored');
      }
      this.meta = { stamp, value };
      this.onChange();
    }
    const value = this.meta.value;
    const key = this.peekKey();
    return value && key && value.key_fingerprint === keyFingerprint(key) ? value : undefined;
  }

  /** The tenant the login is for, as the daemon's only token; `fallback` while there is none (signed out). */
  tenants(fallback: TenantConfig[]): TenantConfig[] {
    const m = this.metadata();
    return m ? [{ tenantId: m.tenant_id, label: m.tenant_id, certificates: {} }] : fallback;
  }

  /** Warns in `log` as the expiry comes near: at start, after each new login, and every minute. */
  watch(log: Logger): void {
    this.log = log;
    this.check();
    this.timer = setInterval(() => this.check(), this.checkEveryMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Runs the expiry warnings now (the timer does it every minute). */
  check(): void {
    const m = this.metadata();
    if (!m?.expires_at || !this.log) return;
    const left = Math.floor((Date.parse(m.expires_at) - this.now()) / 1000);
    const who = { tenant: m.tenant_id, email: m.email, expiresAt: m.expires_at };
    if (left <= 0) {
      if (this.once(`${m.key_fingerprint}:expired`)) {
        this.log.error(who, 'the API key from `signbridge login` has expired: run `signbridge login` to sign in again');
      }
      return;
    }
    const crossed = EXPIRY_WARNINGS_S.filter((s) => left <= s);
    const nearest = crossed.length > 0 ? Math.min(...crossed) : undefined;
    if (nearest !== undefined && this.once(`${m.key_fingerprint}:${nearest}`)) {
      // Every wider threshold counts as warned too: one line for a login that starts already inside them.
      for (const s of crossed) this.warned.add(`${m.key_fingerprint}:${s}`);
      this.log.warn(
        { ...who, minutesLeft: Math.ceil(left / 60) },
        `the API key from \`signbridge login\` expires in ${Math.ceil(left / 60)} min: run \`signbridge login\` to renew it`,
      );
    }
  }

  private once(id: string): boolean {
    if (this.warned.has(id)) return false;
    this.warned.add(id);
    return true;
  }

  private onChange(): void {
    const value = this.meta?.value;
    if (value && this.lastTenant !== undefined && value.tenant_id !== this.lastTenant) {
      this.log?.info({ from: this.lastTenant, to: value.tenant_id }, 'new login: now serving another tenant');
    }
    if (value) this.lastTenant = value.tenant_id;
    // A new login gets its warnings at once, not at the next minute.
    if (this.log) queueMicrotask(() => this.check());
  }

  private peekKey(): string | undefined {
    try {
      return this.fileKey.get();
    } catch {
      return undefined; // signed out or unreadable: currentKey() says why
    }
  }

  private currentKey(): string {
    let key: string;
    try {
      key = this.fileKey.get();
    } catch (err) {
      const missing = /ENOENT/.test((err as Error).message);
      throw new CredentialError(
        missing
          ? `not signed in (no key at ${this.files.keyFile}): run \`signbridge login\``
          : `${(err as Error).message} (the key from \`signbridge login\`)`,
      );
    }
    const m = this.metadata();
    if (m?.expires_at && Date.parse(m.expires_at) <= this.now()) {
      throw new CredentialError(
        `the API key from \`signbridge login\` (tenant ${m.tenant_id}${m.email ? `, ${m.email}` : ''}) expired at ` +
          `${m.expires_at}: run \`signbridge login --service-url ${m.service_url}\` to sign in again`,
      );
    }
    return key;
  }
}
