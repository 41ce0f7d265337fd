// What the service takes from the IdP's claims, and the limits it holds them to (docs/oauth.md, "Claims from the
// IdP"). The claims come from another system: identity claims that break a limit refuse the sign-in (shortening
// them would change who the person is), display data is shortened.
import { ApiError } from '../../errors.js';
import type { SignInClaims } from '../../store/people/people-store.js';

/** OpenID Connect Core §2: `sub` "MUST NOT exceed 255 ASCII characters". */
export const MAX_SUBJECT_LENGTH = 255;
/** The longest address SMTP carries (RFC 5321 §4.5.3.1.3, 256 with the angle brackets). */
export const MAX_EMAIL_LENGTH = 254;
/** The display name is cut to this many characters. */
export const MAX_NAME_LENGTH = 200;
/** Group values longer than this are ignored (they are compared with auto-join rules, never stored). */
export const MAX_GROUP_LENGTH = 256;
/** How far in the future an ID token's `iat` may be, for clocks that differ a little between IdP and service. */
export const IAT_LEEWAY_S = 60;

// C0 and C1 control characters: never part of a name or an identifier, and PostgreSQL stores no NUL.
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

function refuse(claim: string, why: string): never {
  throw new ApiError('invalid_sign_in', `the identity provider's ${claim} claim ${why} (claim ${claim}); start again`);
}

/**
 * The sign-in's claims from the validated ID token and userinfo (`merged`: userinfo over the ID token), held to
 * the limits above. `nowS` is the service's clock in seconds.
 */
export function signInClaims(
  idToken: { iss: string; sub: string; iat: number },
  merged: Record<string, unknown>,
  groupsClaim: string,
  nowS: number,
): { claims: SignInClaims; groups: string[] } {
  if (idToken.iat > nowS + IAT_LEEWAY_S) {
    refuse(
      'iat',
      `says the ID token was issued ${idToken.iat - nowS} s in the future (at most ${IAT_LEEWAY_S} s of clock difference is accepted; check the clocks of the IdP and this service)`,
    );
  }
  const subject = idToken.sub;
  if (subject.length > MAX_SUBJECT_LENGTH) {
    refuse('sub', `is ${subject.length} characters long; at most ${MAX_SUBJECT_LENGTH} are accepted`);
  }
  if (CONTROL.test(subject)) refuse('sub', 'contains a control character');
  const email = typeof merged.email === 'string' ? merged.email : null;
  if (email !== null && email.length > MAX_EMAIL_LENGTH) {
    refuse('email', `is ${email.length} characters long; at most ${MAX_EMAIL_LENGTH} are accepted`);
  }
  if (email !== null && CONTROL.test(email)) refuse('email', 'contains a control character');
  const groupsValue = merged[groupsClaim];
  return {
    claims: {
      issuer: idToken.iss,
      subject,
      email,
      emailVerified: merged.email_verified === true,
      name: typeof merged.name === 'string' ? displayName(merged.name) : null,
    },
    groups: Array.isArray(groupsValue)
      ? groupsValue.filter((g): g is string => typeof g === 'string' && g.length <= MAX_GROUP_LENGTH)
      : [],
  };
}

/** Control characters dropped, then cut to MAX_NAME_LENGTH characters (code points: no half of a surrogate pair). */
function displayName(name: string): string {
  return [...name.replace(new RegExp(CONTROL, 'g'), '')].slice(0, MAX_NAME_LENGTH).join('');
}
