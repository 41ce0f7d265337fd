// The client side of the service's device flow (RFC 8628 with the contract's endpoints): start, then poll until
// the person confirms in a browser. What other CLIs got wrong and this does not (docs/daemon.md, "Signing in"):
// it polls for the whole `expires_in` (not a fixed few minutes), never faster than `interval`, adds 5 s for good
// on `slow_down`, and treats a 429, a 5xx, an HTML error page or a dropped connection as a reason to wait
// longer, not to give up.
import { setTimeout as delay } from 'node:timers/promises';
import { callService, describeAnswer, type ServiceAnswer } from './service-http.js';

export interface DeviceStart {
  deviceCode: string;
  userCode: string;
  verificationUri: string;
  verificationUriComplete: string | undefined;
  expiresInS: number;
  intervalS: number;
}

export interface DeviceGrant {
  apiKey: string;
  tenantId: string;
  roles: string[];
  email: string | null;
  /** ISO 8601, or null for a key without expiry. */
  expiresAt: string | null;
}

export interface DeviceFlowEvents {
  /** The code is ready: show it (and open a browser). */
  onCode(start: DeviceStart): void;
  /** Still waiting for the person; `secondsLeft` until the code expires. */
  onWaiting(secondsLeft: number): void;
  /** A failed exchange; the next try is in `waitS`. */
  onRetry(why: string, waitS: number): void;
  /** The service asked to poll less often; `intervalS` is the new interval. */
  onSlowDown(intervalS: number): void;
}

/** A sign-in that cannot go on; `retryable` says whether running `signbridge login` again later may work. */
export class LoginError extends Error {
  constructor(
    message: string,
    readonly retryable: boolean,
  ) {
    super(message);
    this.name = 'LoginError';
  }
}

export interface DeviceFlowOptions {
  base: URL;
  tenant?: string;
  /** Shown on the confirmation page: which host asks. */
  clientName: string;
  events: DeviceFlowEvents;
  signal: AbortSignal;
  now?: () => number;
}

const SLOW_DOWN_STEP_S = 5;
const MAX_BACKOFF_S = 60;
const START_ATTEMPTS = 4;

export async function runDeviceFlow(opts: DeviceFlowOptions): Promise<DeviceGrant> {
  const start = await startDeviceFlow(opts);
  opts.events.onCode(start);
  return pollDeviceFlow(opts, start);
}

async function startDeviceFlow(opts: DeviceFlowOptions): Promise<DeviceStart> {
  const url = new URL('oauth/device/start', opts.base);
  const body = { client_name: opts.clientName, ...(opts.tenant !== undefined && { tenant_id: opts.tenant }) };
  let answer: ServiceAnswer | undefined;
  for (let attempt = 1; attempt <= START_ATTEMPTS; attempt++) {
    answer = await callService(url, { method: 'POST', json: body, signal: opts.signal });
    if (answer.kind === 'json' && answer.status === 200) return parseStart(answer.body);
    notConfigured(answer, opts.base);
    if (!isTransient(answer)) {
      if (answer.kind === 'json' && answer.status === 404) {
        throw new LoginError(
          `${opts.base.origin} has no device sign-in (POST /oauth/device/start answered 404): ` +
            'check --service-url, and that the service is new enough',
          false,
        );
      }
      throw new LoginError(`the service refused to start a sign-in: ${describeAnswer(answer)}`, false);
    }
    if (attempt < START_ATTEMPTS) {
      const waitS = Math.max(answer.kind !== 'unreachable' ? (answer.retryAfterS ?? 0) : 0, 2 ** (attempt - 1));
      opts.events.onRetry(describeAnswer(answer), waitS);
      await delay(waitS * 1000, undefined, { signal: opts.signal });
    }
  }
  throw new LoginError(
    `cannot start a sign-in at ${opts.base.origin} (${describeAnswer(answer as ServiceAnswer)}); try again later`,
    true,
  );
}

async function pollDeviceFlow(opts: DeviceFlowOptions, start: DeviceStart): Promise<DeviceGrant> {
  const now = opts.now ?? Date.now;
  const url = new URL('oauth/device/poll', opts.base);
  url.searchParams.set('device_code', start.deviceCode);
  const deadline = now() + start.expiresInS * 1000;
  let intervalS = start.intervalS;
  let waitS = intervalS;
  let failures = 0;
  let lastFailure = '';
  for (;;) {
    const leftMs = deadline - now();
    if (leftMs <= 0) break;
    await delay(Math.min(waitS * 1000, leftMs), undefined, { signal: opts.signal });
    const answer = await callService(url, { method: 'POST', signal: opts.signal });
    if (answer.kind === 'json' && answer.status === 200) return parseGrant(answer.body, now());
    notConfigured(answer, opts.base);
    const error = answer.kind === 'json' ? answer.body.error : undefined;
    if (answer.kind === 'json' && answer.status === 400 && typeof error === 'string') {
      if (error === 'authorization_pending') {
        failures = 0;
        waitS = intervalS;
        opts.events.onWaiting(Math.max(0, Math.round((deadline - now()) / 1000)));
        continue;
      }
      if (error === 'slow_down') {
        failures = 0;
        intervalS += SLOW_DOWN_STEP_S; // for good (RFC 8628 §3.5)
        waitS = intervalS;
        opts.events.onSlowDown(intervalS);
        continue;
      }
      if (error === 'access_denied') {
        throw new LoginError(
          `the sign-in was denied (${describeAnswer(answer)}). If that was not you, nothing was granted; ` +
            'if it was, ask a tenant admin for a membership, then run `signbridge login` again',
          false,
        );
      }
      if (error === 'expired_token') {
        throw new LoginError(expiredMessage(), false);
      }
    }
    if (!isTransient(answer)) {
      throw new LoginError(`the service refused the sign-in: ${describeAnswer(answer)}`, false);
    }
    failures += 1;
    lastFailure = describeAnswer(answer);
    const retryAfterS = answer.kind === 'unreachable' ? 0 : (answer.retryAfterS ?? 0);
    waitS = Math.max(retryAfterS, Math.min(intervalS * 2 ** failures, MAX_BACKOFF_S));
    opts.events.onRetry(lastFailure, waitS);
  }
  throw new LoginError(
    failures > 0 ? `${expiredMessage()} (the service last answered: ${lastFailure})` : expiredMessage(),
    failures > 0,
  );
}

const expiredMessage = () =>
  'the code expired before the sign-in was confirmed in the browser; run `signbridge login` again';

/** Worth waiting and asking again: the service or something in front of it is busy, failing or away. */
function isTransient(answer: ServiceAnswer): boolean {
  if (answer.kind !== 'json') return true;
  return answer.status === 429 || answer.status === 408 || answer.status >= 500;
}

function notConfigured(answer: ServiceAnswer, base: URL): void {
  if (answer.kind === 'json' && answer.body.error === 'oauth_not_configured') {
    throw new LoginError(
      `the service at ${base.origin} has no identity provider configured (${describeAnswer(answer)}). ` +
        'Its operator must set SIGNBRIDGE_OIDC_ISSUER, SIGNBRIDGE_OIDC_CLIENT_ID, SIGNBRIDGE_OIDC_CLIENT_SECRET and ' +
        'SIGNBRIDGE_PUBLIC_URL (docs/oauth.md); until then, ask an admin for an API key (`signbridge admin api-key create`)',
      false,
    );
  }
}

function parseStart(b: Record<string, unknown>): DeviceStart {
  const str = (v: unknown) => (typeof v === 'string' && v.length > 0 ? v : undefined);
  const deviceCode = str(b.device_code);
  const userCode = str(b.user_code);
  const verificationUri = str(b.verification_uri);
  if (!deviceCode || !userCode || !verificationUri || typeof b.expires_in !== 'number' || !(b.expires_in > 0)) {
    throw new LoginError(
      'the service answered /oauth/device/start without device_code, user_code, verification_uri or expires_in',
      false,
    );
  }
  // RFC 8628 §3.2: 5 s when absent. A tiny value from a broken service must not turn into a tight loop.
  const intervalS = typeof b.interval === 'number' && b.interval > 0 ? Math.max(b.interval, 0.1) : 5;
  return {
    deviceCode,
    userCode,
    verificationUri,
    verificationUriComplete: str(b.verification_uri_complete),
    expiresInS: b.expires_in,
    intervalS,
  };
}

function parseGrant(b: Record<string, unknown>, nowMs: number): DeviceGrant {
  if (typeof b.api_key !== 'string' || !b.api_key || typeof b.tenant_id !== 'string' || !b.tenant_id) {
    throw new LoginError('the service approved the sign-in but answered without api_key or tenant_id', false);
  }
  let expiresAt: string | null = null;
  if (typeof b.expires_at === 'string' && !Number.isNaN(Date.parse(b.expires_at))) {
    expiresAt = new Date(Date.parse(b.expires_at)).toISOString();
  } else if (typeof b.expires_in === 'number' && b.expires_in > 0) {
    expiresAt = new Date(nowMs + b.expires_in * 1000).toISOString();
  }
  return {
    apiKey: b.api_key,
    tenantId: b.tenant_id,
    roles: Array.isArray(b.roles) ? b.roles.filter((r): r is string => typeof r === 'string') : [],
    email: typeof b.email === 'string' ? b.email : null,
    expiresAt,
  };
}
