// The token exchange (RFC 8693) at the signing service: a CI job's ID token for a short-lived API key of one tenant
// (POST <service>/oauth/token, docs/api.md). The service's refusals are RFC 6749 §5.2 errors whose
// error_description says which check failed; they are shown as they are. A 503 (the issuer or the store out) or a
// 429 (too many exchanges from this address) is asked again after its Retry-After, within a bound. Neither the ID
// token nor the key appears in any message.
import { type Dispatcher, request } from 'undici';

export const TOKEN_EXCHANGE_GRANT = 'urn:ietf:params:oauth:grant-type:token-exchange';
export const JWT_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:jwt';

export interface ExchangedKey {
  apiKey: string;
  tenantId: string;
  role: string;
  /** Epoch ms. */
  expiresAt: number;
  /** The key's whole life as the service granted it, seconds. */
  lifetimeS: number;
}

export class ExchangeError extends Error {
  constructor(
    message: string,
    /** The same exchange may work later (service or issuer out, rate limit); a refusal of the token does not. */
    readonly retryable: boolean,
  ) {
    super(message);
    this.name = 'ExchangeError';
  }
}

export interface ExchangeOptions {
  /** The service's base URL (https://signbridge.example.com). */
  serviceUrl: string;
  tenantId: string;
  idToken: string;
  /** How long 503/429 answers are asked again, following Retry-After (default 60 s; 0: once). */
  retryWithinMs?: number;
  timeoutMs?: number;
  dispatcher?: Dispatcher;
  /** Called before each wait for the service (for a log line). */
  onRetry?: (why: string, waitMs: number) => void;
}

const DEFAULT_RETRY_WITHIN_MS = 60_000;
/** A Retry-After above this is not waited for (the bound is the caller's, not the service's). */
const MAX_SINGLE_WAIT_MS = 30_000;
const MAX_ANSWER_BYTES = 64 * 1024;

export async function exchangeIdToken(opts: ExchangeOptions): Promise<ExchangedKey> {
  const base = new URL(opts.serviceUrl.endsWith('/') ? opts.serviceUrl : `${opts.serviceUrl}/`);
  const url = new URL('oauth/token', base);
  const retryUntil = Date.now() + (opts.retryWithinMs ?? DEFAULT_RETRY_WITHIN_MS);
  for (;;) {
    const answer = await postOnce(url, opts);
    if (answer.status === 200) return keyFrom(answer.body, opts.tenantId);
    const failure = describeFailure(answer.status, answer.body);
    const retryable = answer.status === 503 || answer.status === 429;
    const waitMs = Math.min((answer.retryAfterS ?? 1) * 1000, MAX_SINGLE_WAIT_MS);
    if (!retryable || Date.now() + waitMs > retryUntil) throw new ExchangeError(failure, retryable);
    opts.onRetry?.(failure, waitMs);
    await new Promise((resolve) => setTimeout(resolve, waitMs));
  }
}

interface Answer {
  status: number;
  body: Record<string, unknown> | undefined;
  retryAfterS: number | undefined;
}

async function postOnce(url: URL, opts: ExchangeOptions): Promise<Answer> {
  const form = new URLSearchParams({
    grant_type: TOKEN_EXCHANGE_GRANT,
    subject_token: opts.idToken,
    subject_token_type: JWT_TOKEN_TYPE,
    tenant_id: opts.tenantId,
  });
  let status: number;
  let retryAfter: string | string[] | undefined;
  let text = '';
  try {
    const res = await request(url, {
      method: 'POST',
      headers: {
        'content-type': 'application/x-www-form-urlencoded',
        accept: 'application/json',
        'user-agent': 'signbridge-cli',
      },
      body: form.toString(),
      signal: AbortSignal.timeout(opts.timeoutMs ?? 30_000),
      ...(opts.dispatcher !== undefined && { dispatcher: opts.dispatcher }),
    });
    status = res.statusCode;
    retryAfter = res.headers['retry-after'];
    for await (const chunk of res.body as AsyncIterable<Buffer>) {
      text += chunk.toString('utf8');
      if (text.length > MAX_ANSWER_BYTES) {
        res.body.destroy();
        throw new ExchangeError(
          `the service at ${url.origin} answered with more than ${MAX_ANSWER_BYTES} bytes`,
          false,
        );
      }
    }
  } catch (err) {
    if (err instanceof ExchangeError) throw err;
    const e = err as Error & { code?: string; cause?: { code?: string } };
    throw new ExchangeError(
      `cannot reach the service at ${url.origin} for the token exchange: ${e.code ?? e.cause?.code ?? e.message}`,
      true,
    );
  }
  let body: Record<string, unknown> | undefined;
  try {
    const value: unknown = JSON.parse(text);
    body = value && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
  } catch {
    body = undefined;
  }
  const header = Array.isArray(retryAfter) ? retryAfter[0] : retryAfter;
  const seconds = header && /^\d+$/.test(header.trim()) ? Number(header) : undefined;
  return { status, body, retryAfterS: seconds };
}

function describeFailure(status: number, body: Record<string, unknown> | undefined): string {
  const code = typeof body?.error === 'string' ? body.error : undefined;
  const text =
    typeof body?.error_description === 'string'
      ? body.error_description
      : typeof body?.message === 'string'
        ? body.message
        : undefined;
  if (status === 404 && !code) return 'the service has no token exchange (POST /oauth/token answered 404): upgrade it';
  return `the service refused the token exchange (HTTP ${status}${code ? ` ${code}` : ''})${text ? `: ${text}` : ''}`;
}

function keyFrom(body: Record<string, unknown> | undefined, tenantId: string): ExchangedKey {
  const b = body ?? {};
  if (typeof b.access_token !== 'string' || !b.access_token || typeof b.expires_in !== 'number') {
    throw new ExchangeError('the token exchange answered 200 without access_token and expires_in', false);
  }
  const expiresAt =
    typeof b.expires_at === 'string' && !Number.isNaN(Date.parse(b.expires_at))
      ? Date.parse(b.expires_at)
      : Date.now() + b.expires_in * 1000;
  return {
    apiKey: b.access_token,
    tenantId: typeof b.tenant_id === 'string' ? b.tenant_id : tenantId,
    role: typeof b.role === 'string' ? b.role : 'signer',
    expiresAt,
    lifetimeS: b.expires_in,
  };
}
