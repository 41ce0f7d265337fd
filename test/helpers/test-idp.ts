// A real OpenID provider for the tests: oidc-provider 9, in this process, on an ephemeral loopback port, with
// test accounts and its built-in development login and consent pages (any password is accepted). It stands in
// for the organisation's IdP (Keycloak, Okta, Entra ID): discovery, authorization code + PKCE, ID tokens signed
// with a key of its own (an RSA key made per run, published at its jwks_uri), userinfo with the scope claims. It logs
// warnings about its development settings.
//
// `rewriteIdToken` turns the /token endpoint into a proxy in front of the provider that rewrites the ID token of its
// answer: how a test forges a token (a foreign key under the provider's kid, an iat in the future) while discovery,
// JWKS, login and the code exchange stay the real provider's.
import { generateKeyPairSync, type JsonWebKey } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import Provider from 'oidc-provider';

export interface TestAccount {
  email?: string;
  email_verified?: boolean;
  name?: string;
  groups?: string[];
}

export const TEST_CLIENT = { id: 'signbridge-test', secret: 'test-client-secret-0123456789abcdef' };

export interface TestIdp {
  issuer: string;
  /** Configures the provider for the relying party's redirect URI (known once the service listens). */
  start(redirectUri: string): void;
  /** Requests to these paths (e.g. /token) get their connection dropped, as if the IdP were unreachable. */
  readonly broken: Set<string>;
  /** The provider's signing key (private JWK, RS256) and its kid, for tests that sign tokens as the IdP would. */
  readonly signingKey: JsonWebKey & { kid: string };
  /** When set, the ID token of every /token answer is replaced by what this returns (undefined: no rewriting). */
  rewriteIdToken?: (idToken: string) => Promise<string>;
  close(): Promise<void>;
}

/** Listens first (so the issuer URL is known before the service is built), serves once start() is called. */
export async function listenTestIdp(accounts: Record<string, TestAccount>): Promise<TestIdp> {
  let handler: ((req: IncomingMessage, res: ServerResponse) => void) | undefined;
  const broken = new Set<string>();
  const signingKey = {
    ...generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ format: 'jwk' }),
    kid: 'test-idp-key-1',
    alg: 'RS256',
    use: 'sig',
  };
  let idp: TestIdp;
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0] as string;
    if (broken.has(path)) req.socket.destroy();
    else if (!handler) res.writeHead(503).end();
    else if (path === '/token' && idp.rewriteIdToken) void proxyRewritingIdToken(req, res, idp.rewriteIdToken);
    else handler(req, res);
  });
  // The provider answers the proxied /token requests here, behind the rewriting proxy.
  const behindProxy: Server = createServer((req, res) => handler?.(req, res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  await new Promise<void>((resolve) => behindProxy.listen(0, '127.0.0.1', resolve));
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const providerUrl = `http://127.0.0.1:${(behindProxy.address() as AddressInfo).port}`;

  async function proxyRewritingIdToken(
    req: IncomingMessage,
    res: ServerResponse,
    rewrite: (idToken: string) => Promise<string>,
  ): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(req.headers)) {
      if (typeof value === 'string' && !['host', 'content-length', 'connection'].includes(name)) headers[name] = value;
    }
    const answer = await fetch(`${providerUrl}${req.url}`, {
      method: req.method ?? 'POST',
      headers,
      body: Buffer.concat(chunks),
    });
    const body = (await answer.json()) as { id_token?: string };
    if (body.id_token) body.id_token = await rewrite(body.id_token);
    res.writeHead(answer.status, { 'content-type': 'application/json', 'cache-control': 'no-store' });
    res.end(JSON.stringify(body));
  }

  idp = {
    issuer,
    broken,
    signingKey,
    start(redirectUri: string) {
      const provider = new Provider(issuer, {
        clients: [
          {
            client_id: TEST_CLIENT.id,
            client_secret: TEST_CLIENT.secret,
            redirect_uris: [redirectUri],
            grant_types: ['authorization_code'],
            response_types: ['code'],
            token_endpoint_auth_method: 'client_secret_post',
          },
        ],
        pkce: { required: () => true },
        claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'], groups: ['groups'] },
        scopes: ['openid', 'email', 'profile', 'groups'],
        cookies: { keys: ['test-idp-cookie-key'] },
        jwks: { keys: [signingKey] },
        features: { devInteractions: { enabled: true } },
        async findAccount(_ctx: unknown, id: string) {
          const account = accounts[id];
          if (!account) return undefined;
          return { accountId: id, claims: async () => ({ sub: id, ...account }) };
        },
      });
      handler = provider.callback();
    },
    async close() {
      for (const one of [server, behindProxy]) {
        one.closeAllConnections();
        await new Promise<void>((resolve) => one.close(() => resolve()));
      }
    },
  };
  return idp;
}
