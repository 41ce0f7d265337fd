// Issue 31: the one-use key of a CI token without `jti` names what was verified, not how it was spelled. Real jose
// verification with local keys: a text re-spelled in its unused bits is refused (RFC 7515 §2), and where a second
// valid token can be made without the issuer (ECDSA's (r, n - s) twin, which jose accepts), or the spelling check
// were bypassed, the replay key is the same, so the store's one use still holds.
import { generateKeyPairSync, type KeyObject } from 'node:crypto';
import { type JWTPayload, SignJWT } from 'jose';
import { describe, expect, it } from 'vitest';
import { base64urlProblem, compactJwsProblem } from '../../src/auth/workload/jws-encoding.js';
import { replayKeyOf, TokenRefused, verifyWorkloadToken } from '../../src/auth/workload/token-verifier.js';

const ISSUER = 'https://k8s.example.com';
const AUDIENCE = 'https://signbridge.example.com';
const NOW_S = 1_790_000_000;
const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
const sigBytes = (token: string) => Buffer.from(token.split('.')[2] as string, 'base64url');
/** P-256's group order: s and n - s both verify (ECDSA signatures are malleable). */
const P256_ORDER = 0xffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551n;

function keyPair(type: 'ec' | 'rsa') {
  return type === 'ec'
    ? generateKeyPairSync('ec', { namedCurve: 'P-256' })
    : generateKeyPairSync('rsa', { modulusLength: 2048 });
}

const claims = (over: JWTPayload = {}): JWTPayload => ({
  iss: ISSUER,
  aud: AUDIENCE,
  sub: 'system:serviceaccount:builds:signer',
  iat: NOW_S,
  exp: NOW_S + 600,
  ...over,
});

const sign = (payload: JWTPayload, alg: string, key: KeyObject) =>
  new SignJWT(payload).setProtectedHeader({ alg, kid: 'k1', typ: 'JWT' }).sign(key);

const verify = (token: string, publicKey: KeyObject) =>
  verifyWorkloadToken(token, {
    issuer: ISSUER,
    audiences: [AUDIENCE],
    key: async () => publicKey,
    clockToleranceS: 60,
    maxTokenAgeS: 3600,
    now: new Date(NOW_S * 1000),
  });

/** The ES256 token's twin: the same r, s replaced by n - s. A valid signature nobody but the holder had to make. */
function ecdsaTwin(token: string): string {
  const [header, payload, signature] = token.split('.') as [string, string, string];
  const bytes = Buffer.from(signature, 'base64url');
  const s = BigInt(`0x${bytes.subarray(32).toString('hex')}`);
  const twinS = Buffer.from((P256_ORDER - s).toString(16).padStart(64, '0'), 'hex');
  return `${header}.${payload}.${Buffer.concat([bytes.subarray(0, 32), twinS]).toString('base64url')}`;
}

describe('canonical base64url (RFC 7515 §2, RFC 4648 §3.5)', () => {
  it('accepts the one spelling of some bytes and names what is wrong with any other', () => {
    expect(base64urlProblem(Buffer.from([0xff]).toString('base64url'))).toBeUndefined(); // "_w"
    expect(base64urlProblem('_x')).toMatch(/unused bits/); // decodes to 0xff too
    expect(base64urlProblem('_w==')).toMatch(/outside base64url/);
    expect(base64urlProblem('_w+/')).toMatch(/outside base64url/);
    expect(base64urlProblem('abcde')).toMatch(/length/);
    expect(compactJwsProblem('_x.e30.AA')).toMatch(/^its header /);
    expect(compactJwsProblem('e30.e31.AA')).toMatch(/^its payload /);
    expect(compactJwsProblem('e30.e30.AB')).toMatch(/^its signature /);
    expect(compactJwsProblem('e30.e30.AA')).toBeUndefined();
  });

  it('verification refuses a re-spelled token before any key is asked for, as an unverified token', async () => {
    const { privateKey, publicKey } = keyPair('rsa');
    const token = await sign(claims(), 'RS256', privateKey);
    // A spelling of the same signature bytes (its last character with other unused bits).
    const sameBytes = [...ALPHABET]
      .map((c) => `${token.slice(0, -1)}${c}`)
      .find((t) => t !== token && sigBytes(t).equals(sigBytes(token)));
    expect(sameBytes).toBeDefined();
    let keyAsked = false;
    const refused = await verifyWorkloadToken(sameBytes as string, {
      issuer: ISSUER,
      audiences: [AUDIENCE],
      key: async () => {
        keyAsked = true;
        return publicKey;
      },
      clockToleranceS: 60,
      maxTokenAgeS: 3600,
      now: new Date(NOW_S * 1000),
    }).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(TokenRefused);
    expect((refused as TokenRefused).signatureVerified).toBe(false);
    expect((refused as Error).message).toMatch(/its signature sets unused bits/);
    expect(keyAsked).toBe(false);
  });
});

describe('the replay key of a token without jti', () => {
  it('ES256: the (r, n - s) twin verifies (jose accepts it) and has the same replay key', async () => {
    const { privateKey, publicKey } = keyPair('ec');
    const token = await sign(claims(), 'ES256', privateKey);
    const twin = ecdsaTwin(token);
    expect(twin).not.toBe(token);
    expect(compactJwsProblem(twin), 'the twin is spelled canonically').toBeUndefined();
    const original = await verify(token, publicKey);
    const second = await verify(twin, publicKey);
    expect(original.tokenId).toMatch(/^claims:[0-9a-f]{64}$/);
    expect(second.tokenId).toBe(original.tokenId);
  });

  it('is derived from the signed claims alone: any spelling of the same bytes gives the same key', async () => {
    const { privateKey } = keyPair('rsa');
    const token = await sign(claims(), 'RS256', privateKey);
    const [, payload] = token.split('.') as [string, string, string];
    // As if the spelling check were bypassed: payload spellings that decode to the same bytes.
    const spellings = [...ALPHABET]
      .map((c) => `${payload.slice(0, -1)}${c}`)
      .filter((p) => Buffer.from(p, 'base64url').equals(Buffer.from(payload, 'base64url')));
    const keys = new Set(spellings.map((p) => replayKeyOf(Buffer.from(p, 'base64url'), claims())));
    expect(keys.size).toBe(1);
  });

  it('another iat, subject or issuer is another token; a jti is the key as it is', async () => {
    const key = (over: JWTPayload) => {
      const c = claims(over);
      return replayKeyOf(Buffer.from(JSON.stringify(c)), c);
    };
    const base = key({});
    expect(key({})).toBe(base);
    expect(key({ iat: NOW_S + 1 })).not.toBe(base);
    expect(key({ sub: 'system:serviceaccount:builds:other' })).not.toBe(base);
    expect(key({ iss: 'https://other.example.com' })).not.toBe(base);
    expect(key({ jti: 'abc-123' })).toBe('abc-123');
    // A jti too long to keep is hashed with the claims instead.
    expect(key({ jti: 'x'.repeat(300) })).toMatch(/^claims:/);
  });
});
