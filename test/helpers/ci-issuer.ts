// A local OIDC issuer for the CI workload-identity tests. It stands in for GitHub Actions' token service
// (https://token.actions.githubusercontent.com) and a GitLab instance's issuer: HTTPS with a certificate from a CA
// made per run (openssl, as an admin of a self-managed GitLab would), OpenID discovery at
// /.well-known/openid-configuration, a JWKS at /.well-known/jwks, RS256 ID tokens signed with jose, key rotation,
// and GitHub's token request protocol (a bearer-authenticated GET of ACTIONS_ID_TOKEN_REQUEST_URL&audience=<aud>
// that answers {"value": <jwt>}). `stop()` makes it unreachable for real (the port refuses connections) and
// `start()` brings it back on the same port with the same keys, so a test shows what a service does while GitHub's
// issuer is down. It can mint any claims, including the forged tokens of the refusal tests (alg none, HS256 MACed
// with the public key, a key that is not published under a published kid).
import { execFileSync } from 'node:child_process';
import { generateKeyPairSync, type KeyObject, randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { exportJWK, SignJWT, UnsecuredJWT } from 'jose';
import { selfSignedP256 } from './crypto.js';

export interface CiIssuer {
  /** https://127.0.0.1:<port>: the `iss` of its tokens; discovery at /.well-known/openid-configuration. */
  url: string;
  /** PEM of the CA that issued its TLS certificate (for workload.caFile / SIGNBRIDGE_WORKLOAD_CA_FILE). */
  caFile: string;
  /** A signed JWT with these claims (iss, iat, nbf, exp, jti filled in unless given; `undefined` removes one). */
  mint(
    claims: Record<string, unknown>,
    opts?: { expiresInS?: number; issuedAt?: number; alg?: string; kid?: string; key?: 'current' | 'unpublished' },
  ): Promise<string>;
  /** A new signing key (new kid), published in the JWKS from now on (the earlier keys stay published). */
  rotate(): Promise<void>;
  /** GitHub Actions' token request protocol: GET <requestUrl>&audience=<aud> with Bearer <requestToken> → {"value": jwt}. */
  github: { requestUrl: string; requestToken: string; claims: Record<string, unknown> };
  /** The issuer goes down (connections refused) ... */
  stop(): Promise<void>;
  /** ... and comes back on the same port with the same keys. */
  start(): Promise<void>;
  close(): Promise<void>;
  /** JWKS fetches served (to show caching). */
  fetches: number;
}

interface SigningKey {
  kid: string;
  privateKey: KeyObject;
  publicKey: KeyObject;
}

function newSigningKey(): SigningKey {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { kid: `ci-issuer-${randomBytes(6).toString('hex')}`, privateKey, publicKey };
}

/** A CA and a server certificate for 127.0.0.1 / localhost, made with the openssl command line. */
function makeTlsMaterial(dir: string): { caFile: string; key: string; cert: string } {
  const file = (name: string) => join(dir, name);
  const openssl = (args: string[]) => execFileSync('openssl', args, { stdio: 'pipe' });
  selfSignedP256(file('ca.key'), file('ca.crt'), '/CN=signbridge test CI issuer CA', {
    extensions: ['basicConstraints=critical,CA:TRUE', 'keyUsage=critical,keyCertSign,cRLSign'],
  });
  openssl([
    'req',
    '-new',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:P-256',
    '-nodes',
    '-keyout',
    file('server.key'),
    '-out',
    file('server.csr'),
    '-subj',
    '/CN=127.0.0.1',
  ]);
  writeFileSync(
    file('server.ext'),
    'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n' +
      'subjectAltName=IP:127.0.0.1,DNS:localhost\n',
  );
  openssl([
    'x509',
    '-req',
    '-in',
    file('server.csr'),
    '-CA',
    file('ca.crt'),
    '-CAkey',
    file('ca.key'),
    '-CAcreateserial',
    '-out',
    file('server.crt'),
    '-days',
    '2',
    '-extfile',
    file('server.ext'),
  ]);
  return {
    caFile: file('ca.crt'),
    key: readFileSync(file('server.key'), 'utf8'),
    cert: readFileSync(file('server.crt'), 'utf8'),
  };
}

/** GitHub-like claims of a push to main of acme/app (tests change `github.claims` to mint other jobs). */
function defaultGithubClaims(): Record<string, unknown> {
  return {
    sub: 'repo:acme/app:ref:refs/heads/main',
    repository: 'acme/app',
    repository_id: '100200300',
    repository_owner: 'acme',
    repository_owner_id: '4000',
    ref: 'refs/heads/main',
    ref_type: 'branch',
    ref_protected: 'true',
    sha: '0123456789abcdef0123456789abcdef01234567',
    workflow: 'release',
    workflow_ref: 'acme/app/.github/workflows/release.yml@refs/heads/main',
    job_workflow_ref: 'acme/app/.github/workflows/release.yml@refs/heads/main',
    event_name: 'push',
    actor: 'octocat',
    run_id: '9000000001',
    run_number: '12',
    run_attempt: '1',
    runner_environment: 'github-hosted',
  };
}

export async function startCiIssuer(opts: { port?: number } = {}): Promise<CiIssuer> {
  const dir = mkdtempSync(join(tmpdir(), 'sb-ci-issuer-'));
  const tls = makeTlsMaterial(dir);
  const keys: SigningKey[] = [newSigningKey()];
  const unpublished = newSigningKey();
  const current = () => keys[keys.length - 1] as SigningKey;
  const requestToken = randomBytes(24).toString('base64url');
  const sockets = new Set<Socket>();
  let url = '';

  async function mint(
    claims: Record<string, unknown>,
    mintOpts: {
      expiresInS?: number;
      issuedAt?: number;
      alg?: string;
      kid?: string;
      key?: 'current' | 'unpublished';
    } = {},
  ): Promise<string> {
    const iat = mintOpts.issuedAt ?? Math.floor(Date.now() / 1000);
    const payload: Record<string, unknown> = {
      iss: url,
      iat,
      nbf: iat,
      exp: iat + (mintOpts.expiresInS ?? 300),
      jti: randomUUID(),
      ...claims,
    };
    for (const [name, value] of Object.entries(payload)) if (value === undefined) delete payload[name];
    const signer = mintOpts.key === 'unpublished' ? unpublished : current();
    // A forged token under the unpublished key still names a published kid unless the test says otherwise.
    const kid = mintOpts.kid ?? current().kid;
    const alg = mintOpts.alg ?? 'RS256';
    if (alg === 'none') return new UnsecuredJWT(payload).encode();
    const jwt = new SignJWT(payload).setProtectedHeader({ alg, kid, typ: 'JWT' });
    // HS*: the classic key-confusion forgery, MACed with the issuer's public key as the secret.
    if (alg.startsWith('HS')) return jwt.sign(Buffer.from(current().publicKey.export({ type: 'spki', format: 'pem' })));
    return jwt.sign(signer.privateKey);
  }

  const issuer: CiIssuer = {
    url: '',
    caFile: tls.caFile,
    fetches: 0,
    github: { requestUrl: '', requestToken, claims: defaultGithubClaims() },
    mint,
    async rotate() {
      keys.push(newSigningKey());
    },
    async stop() {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const socket of sockets) socket.destroy();
      });
    },
    async start() {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(port, '127.0.0.1', () => {
          server.off('error', reject);
          resolve();
        });
      });
    },
    async close() {
      if (server.listening) await issuer.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };

  const server: Server = createServer({ key: tls.key, cert: tls.cert }, (req, res) => {
    const requestUrl = new URL(req.url ?? '/', url);
    const json = (status: number, body: unknown) =>
      res
        .writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store' })
        .end(JSON.stringify(body));
    if (req.method !== 'GET') return json(405, { error: 'method not allowed' });
    if (requestUrl.pathname === '/.well-known/openid-configuration') {
      return json(200, {
        issuer: url,
        jwks_uri: `${url}/.well-known/jwks`,
        subject_types_supported: ['public', 'pairwise'],
        response_types_supported: ['id_token'],
        id_token_signing_alg_values_supported: ['RS256'],
        claims_supported: ['sub', 'aud', 'exp', 'iat', 'iss', 'jti', 'nbf', ...Object.keys(defaultGithubClaims())],
        scopes_supported: ['openid'],
      });
    }
    if (requestUrl.pathname === '/.well-known/jwks') {
      issuer.fetches += 1;
      void Promise.all(
        keys.map(async (key) => ({ ...(await exportJWK(key.publicKey)), kid: key.kid, alg: 'RS256', use: 'sig' })),
      ).then((published) => json(200, { keys: published }));
      return;
    }
    if (requestUrl.pathname === '/github/token') {
      if (req.headers.authorization !== `Bearer ${requestToken}`) return json(401, { message: 'Bad credentials' });
      const owner = String(issuer.github.claims.repository_owner ?? 'acme');
      const aud = requestUrl.searchParams.get('audience') ?? `https://github.com/${owner}`;
      void mint({ ...issuer.github.claims, aud }).then((value) => json(200, { value }));
      return;
    }
    return json(404, { error: 'not found' });
  });
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });

  let port = opts.port ?? 0;
  await issuer.start();
  port = (server.address() as AddressInfo).port;
  url = `https://127.0.0.1:${port}`;
  issuer.url = url;
  issuer.github.requestUrl = `${url}/github/token?api-version=2.0`;
  return issuer;
}
