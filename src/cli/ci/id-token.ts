// Where a CI job's OIDC ID token comes from (docs/ci.md, "The client side"): GitHub Actions hands one out on request
// (a bearer-authenticated GET of ACTIONS_ID_TOKEN_REQUEST_URL that names the audience), GitLab CI puts the one an
// `id_tokens:` entry asks for in a variable, and Kubernetes projects one into a file it renews. Each source is asked
// again at every exchange: GitHub's tokens are minted per request, a projected token file is rewritten by the
// kubelet. The token is a credential: it is never logged and never part of an error message.
import { readFileSync } from 'node:fs';
import { type Dispatcher, request } from 'undici';

export interface IdTokenSource {
  /** Where the token comes from, for logs and messages (never the token). */
  readonly description: string;
  get(): Promise<string>;
}

export class IdTokenError extends Error {}

export interface IdTokenOptions {
  /** The audience to ask GitHub for (the trust rule's audience; default the service URL). */
  audience: string;
  /** --id-token-env: the variable a GitLab `id_tokens:` entry fills (default SIGNBRIDGE_ID_TOKEN). */
  idTokenEnv?: string;
  /** --id-token-file: a token file (a Kubernetes projected service-account token), re-read at each exchange. */
  idTokenFile?: string;
  env?: NodeJS.ProcessEnv;
  /** Tests: the HTTP client for GitHub's token request (its CA). */
  dispatcher?: Dispatcher;
  timeoutMs?: number;
}

export const DEFAULT_ID_TOKEN_ENV = 'SIGNBRIDGE_ID_TOKEN';
/** Largest token answer read from GitHub's token service (its tokens are ~1-2 KB). */
const MAX_TOKEN_ANSWER_BYTES = 64 * 1024;

/**
 * The job's token source: an explicit --id-token-file first, then the variable --id-token-env names (GitLab), then
 * GitHub Actions' two variables. Throws IdTokenError naming every place looked at when there is none.
 *
 * One rule for empty values (docs/ci.md, "Where the token comes from"): a source the job names (--id-token-file,
 * --id-token-env) must hold a token, or the command stops saying so; it never falls back to another source, which
 * would hide the mistake. The default variable SIGNBRIDGE_ID_TOKEN is not named: empty counts as unset (like an
 * empty SIGNBRIDGE_API_KEY), so a workflow that passes it on empty still gets GitHub's token.
 */
export function findIdTokenSource(opts: IdTokenOptions): IdTokenSource {
  const env = opts.env ?? process.env;
  if (opts.idTokenFile) return tokenFile(opts.idTokenFile);
  const variable = opts.idTokenEnv || DEFAULT_ID_TOKEN_ENV;
  const fromVariable = env[variable]?.trim();
  if (fromVariable) {
    return { description: `variable ${variable}`, get: async () => fromVariable };
  }
  if (opts.idTokenEnv) {
    throw new IdTokenError(
      `--id-token-env ${opts.idTokenEnv}: the variable is ${env[opts.idTokenEnv] === undefined ? 'not set' : 'set but empty'} ` +
        '(GitLab CI: an `id_tokens:` entry of that name fills it; without --id-token-env, signbridge reads ' +
        `${DEFAULT_ID_TOKEN_ENV} or GitHub Actions' token request)`,
    );
  }
  const requestUrl = env.ACTIONS_ID_TOKEN_REQUEST_URL;
  const requestToken = env.ACTIONS_ID_TOKEN_REQUEST_TOKEN;
  if (requestUrl && requestToken) {
    return githubActions(requestUrl, requestToken, opts.audience, opts.dispatcher, opts.timeoutMs ?? 30_000);
  }
  const emptyDefault = env[variable] !== undefined ? ', set but empty' : '';
  throw new IdTokenError(
    `no CI ID token found: looked for the variable ${variable}${emptyDefault} (GitLab CI: an \`id_tokens:\` entry of that name; ` +
      'name another one with --id-token-env NAME), for ACTIONS_ID_TOKEN_REQUEST_URL and ' +
      'ACTIONS_ID_TOKEN_REQUEST_TOKEN (GitHub Actions: the job needs `permissions: id-token: write`; a pull ' +
      'request from a fork never gets them), and no --id-token-file was given (Kubernetes: a projected ' +
      'service-account token)',
  );
}

function tokenFile(path: string): IdTokenSource {
  const read = (): string => {
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch (err) {
      throw new IdTokenError(`ID token file ${path}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
    }
    const token = text.trim();
    if (!token) throw new IdTokenError(`ID token file ${path} is empty`);
    return token;
  };
  read(); // a missing file is said at start, not at the first exchange
  return { description: `file ${path}`, get: async () => read() };
}

function githubActions(
  requestUrl: string,
  requestToken: string,
  audience: string,
  dispatcher: Dispatcher | undefined,
  timeoutMs: number,
): IdTokenSource {
  let url: URL;
  try {
    url = new URL(requestUrl);
  } catch {
    throw new IdTokenError('ACTIONS_ID_TOKEN_REQUEST_URL is not a URL');
  }
  // GitHub's URL already carries a query (api-version=2.0); the audience is one more parameter.
  url.searchParams.set('audience', audience);
  const where = `GitHub Actions' token service (${url.origin})`;
  return {
    description: 'GitHub Actions (ACTIONS_ID_TOKEN_REQUEST_URL)',
    async get() {
      let status: number;
      let text = '';
      try {
        const res = await request(url, {
          method: 'GET',
          headers: {
            authorization: `Bearer ${requestToken}`,
            accept: 'application/json; api-version=2.0',
            'user-agent': 'signbridge-cli',
          },
          signal: AbortSignal.timeout(timeoutMs),
          ...(dispatcher !== undefined && { dispatcher }),
        });
        status = res.statusCode;
        for await (const chunk of res.body as AsyncIterable<Buffer>) {
          text += chunk.toString('utf8');
          if (text.length > MAX_TOKEN_ANSWER_BYTES) {
            res.body.destroy();
            throw new IdTokenError(`${where} answered with more than ${MAX_TOKEN_ANSWER_BYTES} bytes`);
          }
        }
      } catch (err) {
        if (err instanceof IdTokenError) throw err;
        const e = err as Error & { code?: string; cause?: { code?: string } };
        throw new IdTokenError(`cannot reach ${where}: ${e.code ?? e.cause?.code ?? e.message}`);
      }
      if (status !== 200) {
        throw new IdTokenError(
          `${where} answered HTTP ${status}${status === 401 || status === 403 ? ' (the request token was refused)' : ''}`,
        );
      }
      let value: unknown;
      try {
        value = (JSON.parse(text) as { value?: unknown }).value;
      } catch {
        value = undefined;
      }
      if (typeof value !== 'string' || !value) throw new IdTokenError(`${where} answered without a token ("value")`);
      return value;
    },
  };
}
