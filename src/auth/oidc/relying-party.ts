// The service as an OpenID Connect relying party (openid-client 6): discovery, authorization code with PKCE (S256),
// state and nonce kept server-side, claims from the ID token (its signature verified against the IdP's JWKS) and
// userinfo. What happens with the person afterwards (memberships, sessions, device codes) is the routes' business.
import { createHash, randomBytes } from 'node:crypto';
import * as client from 'openid-client';
import { ApiError } from '../../errors.js';
import type { PeopleStore, SignInClaims } from '../../store/people/people-store.js';
import { signInClaims } from './claims.js';
import type { OidcSettings } from './settings.js';

/** How long a started sign-in may take before its state is forgotten. */
export const SIGN_IN_TTL_MS = 10 * 60_000;
/** Seconds openid-client waits for the IdP per request. */
const IDP_TIMEOUT_S = 10;

export function sha256Hex(value: string): string {
  return createHash('sha256').update(value).digest('hex');
}

/** What the routes learn from a finished sign-in. */
export interface FinishedSignIn {
  claims: SignInClaims;
  groups: string[];
  returnTo: string;
}

export class RelyingParty {
  private config?: Promise<client.Configuration>;

  constructor(
    private readonly settings: OidcSettings,
    private readonly people: PeopleStore,
    private readonly redirectUri: () => string,
    private readonly now: () => Date,
  ) {}

  /**
   * Starts a sign-in: returns the IdP's authorization URL and the state (the caller binds it to the browser with
   * a cookie). Nothing is stored when the IdP cannot be reached.
   */
  async start(returnTo: string): Promise<{ url: string; state: string }> {
    const config = await this.discover();
    const state = client.randomState();
    const nonce = client.randomNonce();
    const codeVerifier = client.randomPKCECodeVerifier();
    const url = client.buildAuthorizationUrl(config, {
      redirect_uri: this.redirectUri(),
      scope: this.settings.scopes.join(' '),
      code_challenge: await client.calculatePKCECodeChallenge(codeVerifier),
      code_challenge_method: 'S256',
      state,
      nonce,
    });
    await this.people.createAttempt({
      stateHash: sha256Hex(state),
      nonce,
      codeVerifier,
      returnTo,
      expiresAt: new Date(this.now().getTime() + SIGN_IN_TTL_MS).toISOString(),
    });
    return { url: url.href, state };
  }

  /**
   * Finishes a sign-in at the callback. `callbackUrl` is the URL the browser came back to (with code and state).
   * The attempt is used up whatever happens: a state works for one callback only.
   */
  async finish(callbackUrl: URL): Promise<FinishedSignIn> {
    const state = callbackUrl.searchParams.get('state');
    if (!state) throw new ApiError('invalid_sign_in', 'the callback carries no state; start the sign-in again');
    const attempt = await this.people.takeAttempt(sha256Hex(state), this.now().toISOString());
    if (!attempt) {
      throw new ApiError('invalid_sign_in', 'unknown or expired sign-in attempt (state); start the sign-in again');
    }
    const idpError = callbackUrl.searchParams.get('error');
    if (idpError) {
      const description = callbackUrl.searchParams.get('error_description');
      throw new ApiError(
        'access_denied',
        `the identity provider refused the sign-in: ${idpError}${description ? ` (${description})` : ''}`,
      );
    }
    const config = await this.discover();
    try {
      const tokens = await client.authorizationCodeGrant(config, callbackUrl, {
        pkceCodeVerifier: attempt.codeVerifier,
        expectedState: state,
        expectedNonce: attempt.nonce,
        idTokenExpected: true,
      });
      const idClaims = tokens.claims();
      if (!idClaims) throw new ApiError('invalid_sign_in', 'the identity provider returned no ID token');
      // Scope claims (email, groups) often come only from userinfo (oidc-provider, Keycloak without mappers).
      const userinfo = await client.fetchUserInfo(config, tokens.access_token, idClaims.sub);
      const { claims, groups } = signInClaims(
        { iss: String(idClaims.iss), sub: idClaims.sub, iat: idClaims.iat },
        { ...idClaims, ...userinfo },
        this.settings.groupsClaim,
        Math.floor(this.now().getTime() / 1000),
      );
      return { claims, groups, returnTo: attempt.returnTo };
    } catch (err) {
      throw classify(err);
    }
  }

  /** Discovery once, cached; a failure is not cached, so the next request tries again. */
  private async discover(): Promise<client.Configuration> {
    this.config ??= client
      .discovery(new URL(this.settings.issuer), this.settings.clientId, this.settings.clientSecret, undefined, {
        timeout: IDP_TIMEOUT_S,
        // openid-client checks the ID token's claims but its signature only when asked: the signature is
        // verified against the keys of the IdP's jwks_uri (fetched and cached by the library; an unknown kid
        // fetches them again, so key rotation at the IdP needs nothing here).
        execute: [
          client.enableNonRepudiationChecks,
          ...(this.settings.allowInsecureIssuer ? [client.allowInsecureRequests] : []),
        ],
      })
      .then((config) => {
        config.timeout = IDP_TIMEOUT_S;
        return config;
      });
    try {
      return await this.config;
    } catch (err) {
      this.config = undefined;
      throw classify(err);
    }
  }
}

/** A random value for cookies and tokens: 256 bits, base64url. */
export function randomToken(): string {
  return randomBytes(32).toString('base64url');
}

/**
 * The IdP could not be reached or failed (retry later: 503 idp_unavailable), or it answered and the answer does
 * not check out (state, nonce, code, signature: 400 invalid_sign_in, start again).
 */
function classify(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  const e = err as { name?: string; code?: string; status?: number; message?: string; cause?: unknown };
  const unreachable =
    e?.name === 'TypeError' ||
    e?.name === 'AbortError' ||
    e?.name === 'TimeoutError' ||
    (e?.cause as { name?: string } | undefined)?.name === 'TypeError' ||
    (e instanceof client.ResponseBodyError && e.status >= 500) ||
    e?.code === 'OAUTH_RESPONSE_IS_NOT_JSON' ||
    e?.code === 'OAUTH_RESPONSE_IS_NOT_CONFORM';
  if (unreachable) {
    return new ApiError(
      'idp_unavailable',
      `the identity provider could not be reached or failed (${e?.message ?? 'error'}); try again later`,
    );
  }
  // openid-client rewords oauth4webapi's errors ("invalid response encountered"): what failed (the claim, or a
  // signature) is in the cause, one or two levels down.
  const cause = e?.cause as { claim?: unknown; message?: unknown; cause?: { claim?: unknown } } | undefined;
  const claim = cause?.claim ?? cause?.cause?.claim;
  const which = typeof claim === 'string' ? ` (claim ${claim})` : '';
  const detail = typeof cause?.message === 'string' && cause.message !== e?.message ? `: ${cause.message}` : '';
  return new ApiError(
    'invalid_sign_in',
    `the sign-in did not check out: ${e?.message ?? String(err)}${detail}${which}; start again`,
  );
}
