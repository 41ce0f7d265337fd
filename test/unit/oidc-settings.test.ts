// OIDC configuration (file and environment), cookie attributes, user codes and auto-join rules.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { matchAutoJoin } from '../../src/auth/oidc/auto-join.js';
import { formatUserCode, newUserCode, normaliseUserCode } from '../../src/auth/oidc/device-flow.js';
import { cookieName, serializeCookie } from '../../src/auth/oidc/sessions.js';
import { resolveConfig } from '../../src/config/config.js';
import { ConfigError } from '../../src/config-error.js';
import { makeTempDir } from '../helpers/service.js';

const ENV = {
  SIGNBRIDGE_OIDC_ISSUER: 'https://login.example.com/realms/build',
  SIGNBRIDGE_OIDC_CLIENT_ID: 'signbridge',
  SIGNBRIDGE_OIDC_CLIENT_SECRET: 'from-env',
  SIGNBRIDGE_PUBLIC_URL: 'https://signbridge.example.com',
};

function configFile(text: string): string {
  const file = join(makeTempDir(), 'c.yaml');
  writeFileSync(file, text);
  return file;
}

describe('OIDC configuration', () => {
  it('is off without an issuer', () => {
    expect(resolveConfig({ dataDir: '/tmp/x', env: {} }).oidc).toBeUndefined();
  });

  it('comes from the environment with defaults (scopes, 12 h person keys)', () => {
    const config = resolveConfig({ dataDir: '/tmp/x', env: ENV });
    expect(config.publicUrl).toBe('https://signbridge.example.com');
    expect(config.oidc).toEqual({
      issuer: ENV.SIGNBRIDGE_OIDC_ISSUER,
      clientId: 'signbridge',
      clientSecret: 'from-env',
      scopes: ['openid', 'email', 'profile'],
      groupsClaim: 'groups',
      personKeyMs: 12 * 3_600_000,
      autoJoin: [],
      allowInsecureIssuer: false,
    });
  });

  it('comes from the file, the environment winning; a secret file is read', () => {
    const dir = makeTempDir();
    writeFileSync(join(dir, 'secret'), 'from-file\n');
    const file = configFile(`publicUrl: https://sb.example
oidc:
  issuer: https://idp.example
  clientId: file-client
  clientSecretFile: ${join(dir, 'secret')}
  scopes: [openid, email, groups]
  personKeyHours: 8
  autoJoin:
    - { emailDomain: Example.COM, tenant: acme, role: signer }
    - { group: release-approvers, tenant: acme, role: approver }
`);
    const config = resolveConfig({ dataDir: '/tmp/x', configFile: file, env: {} });
    expect(config.oidc).toMatchObject({
      issuer: 'https://idp.example',
      clientId: 'file-client',
      clientSecret: 'from-file',
      scopes: ['openid', 'email', 'groups'],
      personKeyMs: 8 * 3_600_000,
      autoJoin: [
        { emailDomain: 'example.com', tenant: 'acme', role: 'signer' },
        { group: 'release-approvers', tenant: 'acme', role: 'approver' },
      ],
    });
    const env = { SIGNBRIDGE_OIDC_CLIENT_ID: 'env-client' };
    expect(resolveConfig({ dataDir: '/tmp/x', configFile: file, env }).oidc?.clientId).toBe('env-client');
  });

  it.each([
    [{ SIGNBRIDGE_OIDC_ISSUER: 'https://idp.example' }, /no client id/],
    [{ SIGNBRIDGE_OIDC_CLIENT_ID: 'x' }, /no issuer/],
    [{ ...ENV, SIGNBRIDGE_OIDC_ISSUER: 'http://idp.example' }, /must be https/],
    [{ ...ENV, SIGNBRIDGE_OIDC_ISSUER: 'not a url' }, /not a URL/],
    [{ ...ENV, SIGNBRIDGE_PUBLIC_URL: undefined }, /SIGNBRIDGE_PUBLIC_URL/],
  ])('refuses a half configuration %#', (env, message) => {
    expect(() => resolveConfig({ dataDir: '/tmp/x', env: env as NodeJS.ProcessEnv })).toThrow(ConfigError);
    expect(() => resolveConfig({ dataDir: '/tmp/x', env: env as NodeJS.ProcessEnv })).toThrow(message);
  });

  it('refuses auto-join rules with an unknown or global role, or no condition', () => {
    const bad = (rule: string) =>
      resolveConfig({ dataDir: '/tmp/x', configFile: configFile(`oidc:\n  autoJoin:\n    - ${rule}\n`), env: ENV });
    expect(() => bad('{ emailDomain: a.com, tenant: t, role: root }')).toThrow(/tenant role/);
    expect(() => bad('{ emailDomain: a.com, tenant: t, role: operator }')).toThrow(/tenant role/);
    expect(() => bad('{ tenant: t, role: signer }')).toThrow(/exactly one of emailDomain or group/);
  });
});

describe('cookies, codes, rules', () => {
  it('https: __Host- prefix and Secure; http: plain name, no Secure; always HttpOnly and SameSite=Lax', () => {
    expect(cookieName('signbridge-session', true)).toBe('__Host-signbridge-session');
    expect(serializeCookie('__Host-s', 'v', { secure: true, maxAgeS: 60 })).toBe(
      '__Host-s=v; Path=/; HttpOnly; SameSite=Lax; Secure; Max-Age=60',
    );
    expect(cookieName('signbridge-session', false)).toBe('signbridge-session');
    expect(serializeCookie('s', 'v', { secure: false })).toBe('s=v; Path=/; HttpOnly; SameSite=Lax');
  });

  it('user codes: base-20, 8 characters, typed in any case with or without the dash', () => {
    const codes = new Set<string>();
    for (let i = 0; i < 200; i++) {
      const code = newUserCode();
      expect(code).toMatch(/^[BCDFGHJKLMNPQRSTVWXZ]{8}$/);
      codes.add(code);
    }
    expect(codes.size).toBeGreaterThan(190);
    expect(formatUserCode('BCDFGHJK')).toBe('BCDF-GHJK');
    expect(normaliseUserCode(' bcdf-ghjk ')).toBe('BCDFGHJK');
    expect(normaliseUserCode('BCDF-GHJ')).toBeUndefined();
    expect(normaliseUserCode('ABCD-EFGH')).toBeUndefined(); // vowels are not in the alphabet
  });

  it('auto-join: verified email domain or group; unverified email never', () => {
    const rules = [
      { emailDomain: 'example.com', tenant: 'acme', role: 'signer' as const },
      { group: 'approvers', tenant: 'acme', role: 'approver' as const },
    ];
    const claims = (email: string, verified: boolean) => ({
      issuer: 'i',
      subject: 's',
      email,
      emailVerified: verified,
      name: null,
    });
    expect(matchAutoJoin(rules, claims('a@Example.com', true), [])).toEqual([{ tenantId: 'acme', role: 'signer' }]);
    expect(matchAutoJoin(rules, claims('a@example.com', false), [])).toEqual([]);
    expect(matchAutoJoin(rules, claims('a@evil-example.com', true), ['approvers'])).toEqual([
      { tenantId: 'acme', role: 'approver' },
    ]);
  });
});
