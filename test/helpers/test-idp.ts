// A real OpenID provider for the tests: oidc-provider 9, in this process, on an ephemeral loopback port, with
// test accounts and its built-in development login and consent pages (any password is accepted). It stands in
// for the organisation's IdP (Keycloak, Okta, Entra ID): discovery, authorization code + PKCE, ID tokens signed
// with its development keys, userinfo with the scope claims. It logs warnings about its development settings.
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
  close(): Promise<void>;
}

/** Listens first (so the issuer URL is known before the service is built), serves once start() is called. */
export async function listenTestIdp(accounts: Record<string, TestAccount>): Promise<TestIdp> {
  let handler: ((req: IncomingMessage, res: ServerResponse) => void) | undefined;
  const broken = new Set<string>();
  const server: Server = createServer((req, res) => {
    if (broken.has((req.url ?? '').split('?')[0] as string)) req.socket.destroy();
    else if (handler) handler(req, res);
    else res.writeHead(503).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    issuer,
    broken,
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
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
