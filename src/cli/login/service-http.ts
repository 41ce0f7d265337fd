// One HTTP exchange with the signing service's /oauth endpoints, sorted into what the caller acts on: an answer
// with a JSON object, an answer without one (an HTML error page from a proxy), or no answer (refused, reset, DNS,
// timeout). Nothing here retries; the device flow decides what to wait for.

export type ServiceAnswer =
  | { kind: 'json'; status: number; body: Record<string, unknown>; retryAfterS: number | undefined }
  | { kind: 'not-json'; status: number; retryAfterS: number | undefined }
  | { kind: 'unreachable'; detail: string };

export interface ServiceRequest {
  method: 'GET' | 'POST';
  /** Bearer API key (revoke, whoami). */
  apiKey?: string;
  json?: Record<string, unknown>;
  timeoutMs?: number;
  /** Ctrl-C: aborts the exchange at once. */
  signal?: AbortSignal;
}

export const USER_AGENT = 'signbridge-cli/0.1.0';

export async function callService(url: URL, req: ServiceRequest): Promise<ServiceAnswer> {
  const headers: Record<string, string> = { accept: 'application/json', 'user-agent': USER_AGENT };
  if (req.apiKey) headers.authorization = `Bearer ${req.apiKey}`;
  if (req.json) headers['content-type'] = 'application/json';
  const timeout = AbortSignal.timeout(req.timeoutMs ?? 30_000);
  const signal = req.signal ? AbortSignal.any([req.signal, timeout]) : timeout;
  let res: Response;
  let text: string;
  try {
    res = await fetch(url, {
      method: req.method,
      headers,
      ...(req.json && { body: JSON.stringify(req.json) }),
      signal,
      redirect: 'error', // a redirect would carry the Bearer key elsewhere
    });
    text = await res.text();
  } catch (err) {
    if (req.signal?.aborted) throw err;
    if (timeout.aborted) return { kind: 'unreachable', detail: `no answer within ${req.timeoutMs ?? 30_000} ms` };
    const cause = (err as Error & { cause?: { code?: string; message?: string } }).cause;
    return { kind: 'unreachable', detail: cause?.code ?? cause?.message ?? (err as Error).message };
  }
  const retryAfterS = parseRetryAfter(res.headers.get('retry-after'));
  try {
    const value: unknown = JSON.parse(text);
    if (value && typeof value === 'object' && !Array.isArray(value)) {
      return { kind: 'json', status: res.status, body: value as Record<string, unknown>, retryAfterS };
    }
  } catch {
    // not JSON: below
  }
  return { kind: 'not-json', status: res.status, retryAfterS };
}

/** Retry-After in seconds (the HTTP-date form as well), capped at 5 minutes. */
function parseRetryAfter(value: string | null): number | undefined {
  if (!value) return undefined;
  const seconds = /^\d+$/.test(value.trim()) ? Number(value) : (Date.parse(value) - Date.now()) / 1000;
  return Number.isFinite(seconds) && seconds >= 0 ? Math.min(seconds, 300) : undefined;
}

/** "error: reason" from an ErrorResponse, else the HTTP status. */
export function describeAnswer(answer: ServiceAnswer): string {
  if (answer.kind === 'unreachable') return `unreachable: ${answer.detail}`;
  if (answer.kind === 'not-json') return `HTTP ${answer.status} without a JSON body`;
  const { error, reason } = answer.body;
  return typeof error === 'string'
    ? `${error}: ${typeof reason === 'string' ? reason : 'no reason given'}`
    : `HTTP ${answer.status}`;
}

/** The service's base URL as the user gave it, checked: http(s), and plain http only to this machine. */
export function serviceBaseUrl(value: string, allowPlainHttp = false): URL {
  let url: URL;
  try {
    url = new URL(value.endsWith('/') ? value : `${value}/`);
  } catch {
    throw new Error(`--service-url: "${value}" is not a URL`);
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') {
    throw new Error(`--service-url must be https:// (or http:// to this machine), got ${url.protocol}`);
  }
  const host = url.hostname.replace(/^\[|\]$/g, '');
  const loopback = host === 'localhost' || host === '::1' || /^127\./.test(host);
  if (url.protocol === 'http:' && !loopback && !allowPlainHttp) {
    throw new Error(
      `--service-url ${url.origin} is plain http to another host: the API key would travel unencrypted; ` +
        'use https:// (or --insecure-http if you must)',
    );
  }
  return url;
}
