// Stands in for the signing service's device-flow endpoints, exactly as agreed for issue 14:
//   POST /oauth/device/start  {tenant_id?, client_name?} -> 200 {device_code, user_code, verification_uri,
//                             verification_uri_complete, expires_in, interval}
//   POST /oauth/device/poll?device_code=... -> 400 {error: authorization_pending|slow_down|access_denied|
//                             expired_token, reason} or, once, 200 {api_key, token_type, tenant_id, roles,
//                             expires_in, expires_at, email}
//   POST /oauth/revoke, GET /oauth/whoami with the Bearer key; 503 oauth_not_configured on demand.
// It exists to produce, on demand, what the real service rarely does: slow_down, 429, an HTML 502 from a proxy, a
// dropped connection, expiry and denial. The real endpoints are exercised end to end by the browser test that comes
// with the web console. Requests to anything else (/v1/...) go to `upstream`, a real service, so a daemon that
// follows the login (service URL = this server) signs with the real service behind it.
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** What the next poll answers; after the script runs out, the grant (or `pending` when `grant` is undefined). */
export type PollStep = 'pending' | 'slow_down' | 'denied' | 'expired' | '429' | 'html502' | 'drop' | 'grant';

export interface Grant {
  apiKey: string;
  tenantId: string;
  roles: string[];
  email: string | null;
  /** Seconds from the grant; null: a key without expiry. */
  expiresInS: number | null;
}

export interface StandInOptions {
  /** `interval` handed out by device/start, seconds. */
  intervalS?: number;
  expiresInS?: number;
  /** Answer device/start and device/poll with 503 oauth_not_configured. */
  notConfigured?: boolean;
  /** Answer the first N device/start requests with an HTML 503 (a proxy in front of a restarting service). */
  startFailures?: number;
  /** Forward every other path to this base URL (a real service). */
  upstream?: string;
}

export interface StandIn {
  url: string;
  script: PollStep[];
  grant: Grant | undefined;
  readonly starts: Array<Record<string, unknown>>;
  /** When each poll arrived (ms since the epoch) and what it was answered. */
  readonly polls: Array<{ at: number; answered: PollStep }>;
  readonly revoked: string[];
  /** Keys the stand-in's whoami and revoke accept; a grant adds its key. */
  readonly keys: Map<string, Grant & { expiresAt: string | null }>;
  close(): Promise<void>;
}

export async function startDeviceFlowStandIn(options: StandInOptions = {}): Promise<StandIn> {
  let deviceCode: string | undefined;
  let granted = false;
  let startFailures = options.startFailures ?? 0;
  const standIn: Omit<StandIn, 'url' | 'close'> = {
    script: [],
    grant: undefined,
    starts: [],
    polls: [],
    revoked: [],
    keys: new Map(),
  };

  const send = (res: ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  const oauthError = (res: ServerResponse, status: number, error: string) =>
    send(res, status, { error, reason: `stand-in: ${error}` });
  const bearer = (req: IncomingMessage) => /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1];

  const handle = async (req: IncomingMessage, res: ServerResponse, body: Buffer) => {
    const url = new URL(req.url ?? '/', 'http://stand-in');
    const base = `http://${req.headers.host}`;
    if (req.method === 'POST' && url.pathname === '/oauth/device/start') {
      if (options.notConfigured) return oauthError(res, 503, 'oauth_not_configured');
      if (startFailures > 0) {
        startFailures -= 1;
        res.writeHead(503, { 'content-type': 'text/html' });
        return res.end('<html><body>503 Service Unavailable</body></html>');
      }
      standIn.starts.push(body.length ? (JSON.parse(body.toString()) as Record<string, unknown>) : {});
      deviceCode = randomBytes(32).toString('base64url');
      granted = false;
      return send(res, 200, {
        device_code: deviceCode,
        user_code: 'BCDF-GHJK',
        verification_uri: `${base}/device`,
        verification_uri_complete: `${base}/device?user_code=BCDF-GHJK`,
        expires_in: options.expiresInS ?? 600,
        interval: options.intervalS ?? 5,
      });
    }
    if (req.method === 'POST' && url.pathname === '/oauth/device/poll') {
      if (options.notConfigured) return oauthError(res, 503, 'oauth_not_configured');
      if (!deviceCode || url.searchParams.get('device_code') !== deviceCode || granted) {
        return oauthError(res, 400, 'expired_token');
      }
      const step: PollStep = standIn.script.shift() ?? (standIn.grant ? 'grant' : 'pending');
      standIn.polls.push({ at: Date.now(), answered: step });
      switch (step) {
        case 'pending':
          return oauthError(res, 400, 'authorization_pending');
        case 'slow_down':
          return oauthError(res, 400, 'slow_down');
        case 'denied':
          return oauthError(res, 400, 'access_denied');
        case 'expired':
          return oauthError(res, 400, 'expired_token');
        case '429':
          res.writeHead(429, { 'content-type': 'application/json', 'retry-after': '0' });
          return res.end(JSON.stringify({ error: 'rate_limited', reason: 'stand-in: too many requests' }));
        case 'html502':
          res.writeHead(502, { 'content-type': 'text/html' });
          return res.end('<html><body><h1>502 Bad Gateway</h1></body></html>');
        case 'drop':
          return req.socket.destroy();
        case 'grant': {
          const g = standIn.grant;
          if (!g) return oauthError(res, 400, 'authorization_pending');
          granted = true;
          const expiresAt = g.expiresInS === null ? null : new Date(Date.now() + g.expiresInS * 1000).toISOString();
          standIn.keys.set(g.apiKey, { ...g, expiresAt });
          return send(res, 200, {
            api_key: g.apiKey,
            token_type: 'Bearer',
            tenant_id: g.tenantId,
            roles: g.roles,
            expires_in: g.expiresInS ?? 0,
            expires_at: expiresAt,
            email: g.email,
          });
        }
      }
    }
    if (url.pathname === '/oauth/revoke' && req.method === 'POST') {
      const key = bearer(req);
      if (!key || !standIn.keys.has(key)) return oauthError(res, 401, 'unauthorized');
      standIn.keys.delete(key);
      standIn.revoked.push(key);
      return send(res, 200, { revoked: true });
    }
    if (url.pathname === '/oauth/whoami' && req.method === 'GET') {
      const k = standIn.keys.get(bearer(req) ?? '');
      if (!k) return oauthError(res, 401, 'unauthorized');
      return send(res, 200, {
        tenant_id: k.tenantId,
        roles: k.roles,
        expires_at: k.expiresAt,
        email: k.email,
        subject: 'stand-in-subject',
        kind: 'person',
      });
    }
    if (options.upstream) return forward(options.upstream, req, res, body);
    return oauthError(res, 404, 'not_found');
  };

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      handle(req, res, Buffer.concat(chunks)).catch((err: Error) => {
        if (!res.headersSent) send(res, 500, { error: 'internal', reason: err.message });
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return Object.assign(standIn, {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  });
}

async function forward(upstream: string, req: IncomingMessage, res: ServerResponse, body: Buffer): Promise<void> {
  const headers: Record<string, string> = {};
  for (const name of ['authorization', 'content-type', 'accept']) {
    const v = req.headers[name];
    if (typeof v === 'string') headers[name] = v;
  }
  const answer = await fetch(new URL(req.url ?? '/', upstream), {
    method: req.method ?? 'GET',
    headers,
    ...(body.length > 0 && { body }),
  });
  const out: Record<string, string> = { 'content-type': answer.headers.get('content-type') ?? 'application/json' };
  const requestId = answer.headers.get('x-request-id');
  if (requestId) out['x-request-id'] = requestId;
  res.writeHead(answer.status, out);
  res.end(Buffer.from(await answer.arrayBuffer()));
}
