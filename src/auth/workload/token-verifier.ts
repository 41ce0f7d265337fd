// Verification of a CI workload's ID token with jose: signature against the issuer's keys (issuer-keys.ts), an
// allow-list of asymmetric algorithms, exact iss, aud, exp/nbf/iat with a leeway, a maximum token age, iat and sub
// required, the token's text canonical base64url (jws-encoding.ts). Each failure becomes a reason that names the
// check, never the token. docs/ci.md, "The exchange".
import { createHash } from 'node:crypto';
import { errors, type JWTPayload, jwtVerify } from 'jose';
import type { KeyForHeader } from './issuer-keys.js';
import { compactJwsProblem } from './jws-encoding.js';

/** Asymmetric algorithms only: never `none`, never HS* (a MAC keyed with the public key is the classic forgery). */
export const WORKLOAD_ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'EdDSA'];

/**
 * A token that failed a check; `signatureVerified` says whether the refusal concerns a token the issuer signed, and
 * `expired` whether its time is up (past exp, or older than the maximum token age): STS names that case apart.
 */
export class TokenRefused extends Error {
  constructor(
    reason: string,
    readonly signatureVerified: boolean,
    readonly expired = false,
  ) {
    super(reason);
  }
}

export interface VerifyOptions {
  issuer: string;
  /** Audiences any of which the token's aud must contain. */
  audiences: string[];
  key: KeyForHeader;
  clockToleranceS: number;
  maxTokenAgeS: number;
  now: Date;
}

export interface VerifiedToken {
  claims: JWTPayload & Record<string, unknown>;
  /** The replay key (replayKeyOf): `jti`, or `claims:<sha256 of the signed claims>` when the issuer gives none. */
  tokenId: string;
  /**
   * For a token without `jti`: the replay key that versions before 2026-11-28 recorded for it (`sha256:<hex of
   * the token's text>`). A token exchanged by such a version moments before an upgrade has only that key on
   * record, and must still count as used until it expires.
   */
  formerTokenId?: string;
  /** When the token stops being valid (exp + leeway): until then its one use is remembered. */
  usableUntil: Date;
}

/** The longest `jti` taken as the replay key; a longer one is hashed with the rest of the claims. */
const MAX_JTI_LENGTH = 256;

/**
 * The key of a token's one use, from what was verified: the issuer's `jti` when it sets one, else the SHA-256 of
 * the claims' bytes as the issuer signed them (iss, sub, iat, exp and every other claim). Not the token's text, nor
 * its signature: a text has other spellings of the same bytes (refused anyway, jws-encoding.ts), and an ECDSA
 * signature (r, s) has a twin (r, n - s) that verifies as well, so neither names one token. Two tokens of the same
 * claims are one token here: only the issuer can make them, and it sets another `iat` for the next one.
 */
export function replayKeyOf(signedPayload: Uint8Array, claims: JWTPayload): string {
  if (typeof claims.jti === 'string' && claims.jti.length > 0 && claims.jti.length <= MAX_JTI_LENGTH) return claims.jti;
  return `claims:${createHash('sha256').update(signedPayload).digest('hex')}`;
}

export async function verifyWorkloadToken(token: string, opts: VerifyOptions): Promise<VerifiedToken> {
  const spelling = compactJwsProblem(token);
  if (spelling) {
    throw new TokenRefused(`the token is not a valid signed JWT (${spelling}; RFC 7515 §2 allows one spelling)`, false);
  }
  let payload: JWTPayload;
  try {
    ({ payload } = await jwtVerify(token, opts.key, {
      algorithms: WORKLOAD_ALGORITHMS,
      issuer: opts.issuer,
      audience: opts.audiences,
      clockTolerance: opts.clockToleranceS,
      maxTokenAge: opts.maxTokenAgeS,
      requiredClaims: ['iat', 'exp', 'sub'],
      currentDate: opts.now,
    }));
  } catch (err) {
    throw refusal(err, opts);
  }
  // Verified, so the text has three canonical segments: the payload's bytes are the ones the signature covers.
  const signedPayload = Buffer.from(token.split('.')[1] as string, 'base64url');
  const tokenId = replayKeyOf(signedPayload, payload);
  return {
    claims: payload as VerifiedToken['claims'],
    tokenId,
    ...(tokenId.startsWith('claims:') && {
      formerTokenId: `sha256:${createHash('sha256').update(token).digest('hex')}`,
    }),
    usableUntil: new Date(((payload.exp as number) + opts.clockToleranceS) * 1000),
  };
}

/** jose's error as a reason a CI log can show: which check failed and what was expected, without the token. */
function refusal(err: unknown, opts: VerifyOptions): Error {
  if (err instanceof errors.JWTExpired) {
    if (err.claim === 'iat') {
      return new TokenRefused(`the token is too old (issued more than ${opts.maxTokenAgeS} s ago)`, true, true);
    }
    return new TokenRefused('the token has expired (exp is in the past)', true, true);
  }
  if (err instanceof errors.JWTClaimValidationFailed) {
    const reason = (() => {
      switch (err.claim) {
        case 'iss':
          return `the token's iss is not ${opts.issuer}`;
        case 'aud':
          return `the token's aud is missing or not one this tenant accepts from this issuer (${opts.audiences.join(', ')})`;
        case 'nbf':
          return 'the token is not yet valid (nbf is in the future)';
        case 'iat':
          return err.reason === 'missing'
            ? 'the token has no iat (issued-at) claim'
            : 'the token was issued in the future (iat is in the future)';
        case 'exp':
          return 'the token has no valid exp (expiry) claim';
        case 'sub':
          return 'the token has no sub (subject) claim';
        default:
          return `the token's ${err.claim} claim is invalid (${err.reason})`;
      }
    })();
    return new TokenRefused(reason, true);
  }
  if (err instanceof errors.JOSEAlgNotAllowed) {
    return new TokenRefused(
      `the token's signing algorithm is not allowed (only ${WORKLOAD_ALGORITHMS.join(', ')}; never none or HS*)`,
      false,
    );
  }
  if (err instanceof errors.JWSSignatureVerificationFailed) {
    return new TokenRefused("the token's signature does not verify with the issuer's key of that kid", false);
  }
  if (err instanceof errors.JWTInvalid || err instanceof errors.JWSInvalid) {
    return new TokenRefused(`the token is not a valid signed JWT (${err.message})`, false);
  }
  if (err instanceof errors.JOSENotSupported || err instanceof errors.JWKSMultipleMatchingKeys) {
    return new TokenRefused(`the token cannot be verified: ${err.message}`, false);
  }
  // IssuerUnreachable, IssuerRefused, NoMatchingKey from the key lookup: the caller maps them.
  return err as Error;
}
