// The daemon's API key in a CI job (`signbridge daemon --ci`): exchanged for the job's ID token at start, kept in
// memory only, and exchanged again before it expires (at 2/3 of its life), so a job that signs for longer than one
// key lives signs to its end. A failed renewal is tried again with back-off while the current key still works; a
// key the service refuses (401: expired, revoked) is renewed at once and the refused request sent again once
// (daemon/upstream/remote-upstream.ts). Each exchange is logged with its expiry, never with a token or a key.
import type { Logger } from 'pino';
import type { ApiKeySource } from '../../../daemon/credentials.js';
import { type ExchangedKey, exchangeIdToken } from './exchange.js';
import type { IdTokenSource } from './id-token.js';

export interface WorkloadKeyOptions {
  serviceUrl: string;
  tenantId: string;
  idTokens: IdTokenSource;
  log: Pick<Logger, 'info' | 'warn' | 'error'>;
  /** Where in the key's life the next exchange happens (default 2/3). */
  renewAt?: number;
  /** Back-off between failed renewals: first and largest wait (default 1 s and 60 s). */
  firstRetryMs?: number;
  maxRetryMs?: number;
  /** How long the first exchange keeps asking a service that answers 503/429 (exchange.ts's default otherwise). */
  startRetryWithinMs?: number;
}

const DEFAULT_RENEW_AT = 2 / 3;
/** A renewal never comes sooner than this after the last one, whatever the key's life (a 60 s key, a slow clock). */
const MIN_RENEW_AFTER_MS = 5_000;

export class WorkloadKeySource implements ApiKeySource {
  readonly description: string;
  readonly renewHint = 'the daemon exchanges the CI job token again; check the trust rule if this persists';
  private key: ExchangedKey;
  private timer: NodeJS.Timeout | undefined;
  private renewing: Promise<boolean> | undefined;
  private stopped = false;
  private retryMs: number;

  private constructor(
    private readonly opts: WorkloadKeyOptions,
    first: ExchangedKey,
  ) {
    this.description = `CI token exchange (${opts.idTokens.description})`;
    this.key = first;
    this.retryMs = opts.firstRetryMs ?? 1000;
  }

  /** Exchanges once (throws IdTokenError / ExchangeError when that fails) and schedules the renewals. */
  static async start(opts: WorkloadKeyOptions): Promise<WorkloadKeySource> {
    const first = await exchange(opts, opts.startRetryWithinMs);
    const source = new WorkloadKeySource(opts, first);
    source.logExchanged('exchanged the CI job token for a key');
    source.schedule(source.renewDelayMs());
    return source;
  }

  get(): string {
    return this.key.apiKey;
  }

  /** When the current key expires (epoch ms). */
  get expiresAt(): number {
    return this.key.expiresAt;
  }

  /** After a 401: a new key now (one renewal at a time); true when the key changed. */
  renewAfterRefusal(): Promise<boolean> {
    if (this.stopped) return Promise.resolve(false);
    const before = this.key.apiKey;
    return this.renewNow('the service refused the key').then(() => this.key.apiKey !== before);
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  private renewDelayMs(): number {
    const lifeMs = this.key.lifetimeS * 1000;
    const at = this.key.expiresAt - lifeMs + lifeMs * (this.opts.renewAt ?? DEFAULT_RENEW_AT);
    return Math.max(MIN_RENEW_AFTER_MS, at - Date.now());
  }

  private schedule(delayMs: number): void {
    if (this.stopped) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.renewNow('scheduled'), delayMs);
    this.timer.unref();
  }

  private renewNow(why: string): Promise<boolean> {
    this.renewing ??= this.renewOnce(why).finally(() => {
      this.renewing = undefined;
    });
    return this.renewing;
  }

  private async renewOnce(why: string): Promise<boolean> {
    try {
      // One attempt here: the back-off below is the retry (and a 401's request must not wait for minutes).
      this.key = await exchange(this.opts, 0);
      this.retryMs = this.opts.firstRetryMs ?? 1000;
      this.logExchanged(`renewed the key from the CI token exchange (${why})`);
      this.schedule(this.renewDelayMs());
      return true;
    } catch (err) {
      const left = Math.round((this.key.expiresAt - Date.now()) / 1000);
      const fields = {
        tenant: this.opts.tenantId,
        reason: (err as Error).message,
        retryInMs: this.retryMs,
        currentKeyExpiresAt: new Date(this.key.expiresAt).toISOString(),
      };
      if (left > 0) this.opts.log.warn(fields, `renewing the CI key failed; the current key works ${left} s more`);
      else this.opts.log.error(fields, 'renewing the CI key failed and the current key has expired');
      this.schedule(this.retryMs);
      this.retryMs = Math.min(this.retryMs * 2, this.opts.maxRetryMs ?? 60_000);
      return false;
    }
  }

  private logExchanged(message: string): void {
    this.opts.log.info(
      {
        tenant: this.key.tenantId,
        role: this.key.role,
        expiresAt: new Date(this.key.expiresAt).toISOString(),
        tokenSource: this.opts.idTokens.description,
      },
      message,
    );
  }
}

async function exchange(opts: WorkloadKeyOptions, retryWithinMs: number | undefined): Promise<ExchangedKey> {
  const idToken = await opts.idTokens.get();
  return exchangeIdToken({
    serviceUrl: opts.serviceUrl,
    tenantId: opts.tenantId,
    idToken,
    ...(retryWithinMs !== undefined && { retryWithinMs }),
    onRetry: (why, waitMs) => opts.log.warn({ reason: why, waitMs }, 'the token exchange is asked again'),
  });
}
