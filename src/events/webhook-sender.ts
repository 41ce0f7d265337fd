// Sends one webhook: one POST to a subscriber's URL, and what became of it. The outbox and the dispatcher
// (retries, back-off, disabling a subscription) decide what to do with the outcome; this file only sends.
//
// The URL is chosen by whoever creates the subscription, so every send goes through the outbound rules of
// src/net/outbound-request.ts (special-use addresses refused, rebinding-safe, no redirects, deadline), with one
// webhook rule on top: https only, unless the operator's webhooks.allow names the host (or a CIDR holding its
// addresses); then http is accepted as well, and so are special-use addresses (an internal receiver).
// Subscription time and send time apply the same checks: a name that later resolves to an internal address is
// refused when sent; with a subscription's kept-alive connections (receiver-connections.ts), when each connection
// is made.
//
// Nothing here logs, and no result carries the request's headers (they hold the signature) or the URL's userinfo,
// path or query (Slack and Teams put their secret in the path): messages name scheme://host:port only.
import type { CheckedConnections } from '../net/checked-connections.js';
import {
  DestinationRefused,
  DestinationUnreachable,
  type OutboundAnswer,
  OutboundError,
  OutboundPolicy,
  originOf,
  type Resolver,
  TlsFailed,
} from '../net/outbound-request.js';

export type DeliveryResult =
  /** 2xx. */
  | { outcome: 'delivered'; status: number }
  /** Time-out, connection or DNS failure, TLS failure, 429, 5xx: try again later (not before retryAfterMs, when given). */
  | { outcome: 'retry'; status?: number; retryAfterMs?: number; error: string }
  /** 410: the receiver says the endpoint is gone for good; the subscription gets disabled. */
  | { outcome: 'gone'; status: 410; error: string }
  /** Other 4xx, any 3xx, 1xx, and refused destinations: the same request would fail the same way. */
  | { outcome: 'failed'; status?: number; error: string };

export interface WebhookSendSettings {
  /** webhooks.allow: hosts and CIDRs that may be http and may resolve to special-use addresses. */
  allow: readonly string[];
  /** webhooks.caFile's contents, added to Node's built-in roots. */
  extraCaPem?: string;
  /** Whole request (default 10 s). */
  timeoutMs?: number;
  /** How host names are resolved (default dns.lookup, all addresses); tests stand in for DNS with it. */
  resolve?: Resolver;
}

export interface WebhookRequest {
  /** The Standard Webhooks headers (webhook-id, webhook-timestamp, webhook-signature) and any others. */
  headers: Record<string, string>;
  /** The JSON body, exactly as signed. */
  body: string | Buffer;
}

export const DEFAULT_WEBHOOK_TIMEOUT_MS = 10_000;
/** Longest Retry-After honoured: a receiver cannot park deliveries for days. */
export const MAX_RETRY_AFTER_MS = 3_600_000;
/** How much of a non-2xx answer is kept for the error text; the rest is never read. */
const KEEP_BYTES = 4096;
const MAX_URL_LENGTH = 2048;
const USER_AGENT = 'signbridge-webhooks';
const ALLOW_SETTING = 'webhooks.allow (SIGNBRIDGE_WEBHOOK_ALLOW)';
/** Headers this sender sets itself; a caller's spelling of them is dropped. */
const OWN_HEADERS = new Set([
  'host',
  'content-type',
  'content-length',
  'transfer-encoding',
  'connection',
  'user-agent',
]);

// One policy per settings object: it holds the TLS context, which is costly to build per request.
const policies = new WeakMap<WebhookSendSettings, OutboundPolicy>();
function policyFor(settings: WebhookSendSettings): OutboundPolicy {
  let policy = policies.get(settings);
  if (!policy) {
    policy = new OutboundPolicy({
      allow: settings.allow,
      ...(settings.extraCaPem !== undefined && { extraCaPem: settings.extraCaPem }),
      ...(settings.resolve && { resolve: settings.resolve }),
    });
    policies.set(settings, policy);
  }
  return policy;
}

/**
 * The check made when a subscription is created: a parseable http(s) URL without userinfo or fragment, https
 * unless webhooks.allow names the destination, and a host that resolves to addresses the service may send to.
 */
export async function checkSubscriptionUrl(
  url: string,
  settings: WebhookSendSettings,
): Promise<{ ok: true; url: URL } | { ok: false; error: string }> {
  const parsed = parseWebhookUrl(url);
  if (typeof parsed === 'string') return { ok: false, error: parsed };
  try {
    await policyFor(settings).checkUrl(parsed, { allowHttp: true });
    return { ok: true, url: parsed };
  } catch (err) {
    return { ok: false, error: describe(err, parsed, settings) };
  }
}

/**
 * Kept-alive connections for one subscription's receiver, checked as sendWebhook checks a URL, each time one is
 * made; the caller closes them.
 */
export function webhookConnections(
  settings: WebhookSendSettings,
  bounds: { maxSockets: number; idleMs: number },
): CheckedConnections {
  return policyFor(settings).connectionsFor({
    ...bounds,
    resolveTimeoutMs: settings.timeoutMs ?? DEFAULT_WEBHOOK_TIMEOUT_MS,
  });
}

/**
 * POSTs `request.body` to `url` once (the same checks as checkSubscriptionUrl first, or when `connections` makes a
 * connection) and says what happened.
 */
export async function sendWebhook(
  url: string,
  request: WebhookRequest,
  settings: WebhookSendSettings,
  connections?: CheckedConnections,
): Promise<DeliveryResult> {
  const parsed = parseWebhookUrl(url);
  if (typeof parsed === 'string') return { outcome: 'failed', error: parsed };
  const timeoutMs = settings.timeoutMs ?? DEFAULT_WEBHOOK_TIMEOUT_MS;
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(request.headers)) {
    if (!OWN_HEADERS.has(name.toLowerCase())) headers[name] = value;
  }
  headers['content-type'] = 'application/json';
  headers['user-agent'] = USER_AGENT;
  let answer: OutboundAnswer;
  try {
    answer = await policyFor(settings).request(parsed, {
      method: 'POST',
      headers,
      body: request.body,
      allowHttp: true,
      timeoutMs,
      maxBytes: KEEP_BYTES,
      truncate: true,
      // A 2xx says all there is to say: its body is not waited for.
      readBody: (status) => status < 200 || status > 299,
      ...(connections && { connections }),
    });
  } catch (err) {
    const error = describe(err, parsed, settings);
    return err instanceof OutboundError && err.retryable ? { outcome: 'retry', error } : { outcome: 'failed', error };
  }
  return outcomeOf(answer, parsed);
}

/** The outcome of an answer, by its status (Standard Webhooks: 2xx delivered, 3xx failure, 410 disable). */
function outcomeOf(answer: OutboundAnswer, url: URL): DeliveryResult {
  const { status } = answer;
  const origin = originOf(url);
  if (status >= 200 && status <= 299) return { outcome: 'delivered', status };
  const said = answerText(answer);
  const error = `${origin} answered HTTP ${status}${said ? `: ${said}` : ''}`;
  if (status === 410) return { outcome: 'gone', status, error };
  if (status === 429 || status >= 500) {
    const retryAfterMs = retryAfter(answer.headers['retry-after']);
    return { outcome: 'retry', status, ...(retryAfterMs !== undefined && { retryAfterMs }), error };
  }
  if (status >= 300 && status <= 399) {
    // Never followed: the Location could be anywhere, including where the checks would refuse.
    const location = answer.headers.location ? ` to ${safeLocation(answer.headers.location, url)}` : '';
    return { outcome: 'failed', status, error: `${error} (a redirect${location}; redirects are not followed)` };
  }
  return { outcome: 'failed', status, error };
}

/** Retry-After as delay-seconds or as an HTTP date, in ms from now, at most MAX_RETRY_AFTER_MS; else undefined. */
export function retryAfter(value: string | undefined, nowMs = Date.now()): number | undefined {
  if (value === undefined) return undefined;
  const text = value.trim();
  let ms: number;
  if (/^\d+$/.test(text)) ms = Number(text) * 1000;
  else {
    // An HTTP date has a weekday and "GMT"; Date.parse alone would also take "7.5" or "2026".
    if (!/^[A-Za-z]{3},? .*\d{2}:\d{2}:\d{2} GMT$/.test(text)) return undefined;
    const at = Date.parse(text);
    if (Number.isNaN(at)) return undefined;
    ms = Math.max(0, at - nowMs);
  }
  return Math.min(ms, MAX_RETRY_AFTER_MS);
}

/** The URL, or why it cannot be a webhook URL (never echoing it: it may hold a secret). */
function parseWebhookUrl(input: string): URL | string {
  if (input.length > MAX_URL_LENGTH) return `the URL is longer than ${MAX_URL_LENGTH} characters`;
  let url: URL;
  try {
    url = new URL(input);
  } catch {
    return 'the URL is not a valid absolute URL';
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') {
    return `the URL's scheme is ${url.protocol.slice(0, 20)}; webhooks are sent over https`;
  }
  // Node would send userinfo as Basic authentication; credentials belong in the receiver's signature check.
  if (url.username !== '' || url.password !== '') return 'the URL holds a user name or password, which is not allowed';
  if (input.includes('#')) return 'the URL has a fragment (#...), which is not sent and not allowed';
  return url;
}

/** A refusal or failure in words that say what to change, naming the setting that would allow it. */
function describe(err: unknown, url: URL, settings: WebhookSendSettings): string {
  const origin = originOf(url);
  if (err instanceof DestinationRefused) {
    if (err.reason === 'special-use') {
      const where =
        err.host?.replace(/^\[|\]$/g, '') === err.address
          ? `the address ${err.host} is`
          : `the host ${err.host} resolves to ${err.address},`;
      return (
        `${origin} is refused: ${where} a loopback, private or other special-use address (${err.range}); ` +
        `webhooks are sent to such addresses only when ${ALLOW_SETTING} lists the host or its range`
      );
    }
    if (err.reason === 'scheme') {
      return `${origin} is refused: webhooks are sent over https; http only to a host or range ${ALLOW_SETTING} lists`;
    }
    return `the URL is refused: ${err.message}`;
  }
  if (err instanceof DestinationUnreachable) {
    if (err.reason === 'timeout')
      return `${origin} did not answer within ${(settings.timeoutMs ?? DEFAULT_WEBHOOK_TIMEOUT_MS) / 1000} s`;
    if (err.reason === 'dns' || err.reason === 'no-address') return err.message;
    if (err.phase === 'answer') return `${origin}: the connection failed during the answer (${err.why})`;
    return `${origin} cannot be reached (${err.why})`;
  }
  if (err instanceof TlsFailed) {
    return `${origin}: TLS failed (${err.why}); a receiver with a private CA needs webhooks.caFile`;
  }
  if (err instanceof OutboundError) return `${origin}: ${err.message}`;
  return `${origin}: ${(err as Error).message}`;
}

/** What the receiver said, as one line of printable text (it ends up in a console and in logs). */
function answerText(answer: OutboundAnswer): string {
  const text = answer.body
    .toString('utf8')
    .replace(/\p{Cc}+/gu, ' ')
    .replace(/\s+/g, ' ')
    .trim();
  return text && answer.truncated ? `${text} …` : text;
}

/** A redirect target named without userinfo, path or query. */
function safeLocation(location: string, base: URL): string {
  try {
    return originOf(new URL(location, base));
  } catch {
    return 'an invalid URL';
  }
}
