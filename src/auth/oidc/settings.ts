// The OpenID Connect settings of the service as a relying party of the organisation's IdP (docs/oauth.md).
// From the config file's `oidc` section and SIGNBRIDGE_OIDC_* variables; the environment wins.
import { type Static, Type } from '@sinclair/typebox';
import { isRole, type Role } from '../../store/records/roles.js';

/** The environment variables the OIDC settings read. */
export const OIDC_ENV = [
  'SIGNBRIDGE_OIDC_ISSUER',
  'SIGNBRIDGE_OIDC_CLIENT_ID',
  'SIGNBRIDGE_OIDC_CLIENT_SECRET',
] as const;

const AutoJoinRule = Type.Object(
  {
    /** A verified email in this domain (e.g. example.com) joins `tenant` with `role`. */
    emailDomain: Type.Optional(Type.String({ minLength: 1 })),
    /** A value of the IdP's group claim (`groupsClaim`) that joins `tenant` with `role`. */
    group: Type.Optional(Type.String({ minLength: 1 })),
    tenant: Type.String({ minLength: 1 }),
    role: Type.String({ minLength: 1 }),
  },
  { additionalProperties: false },
);

export const OidcConfigSchema = Type.Object(
  {
    issuer: Type.Optional(Type.String({ minLength: 1 })),
    clientId: Type.Optional(Type.String({ minLength: 1 })),
    clientSecret: Type.Optional(Type.String({ minLength: 1 })),
    clientSecretFile: Type.Optional(Type.String({ minLength: 1 })),
    scopes: Type.Optional(Type.Array(Type.String({ minLength: 1 }), { minItems: 1 })),
    groupsClaim: Type.Optional(Type.String({ minLength: 1 })),
    /** Lifetime of the API keys the device flow mints (default 12). */
    personKeyHours: Type.Optional(Type.Number({ exclusiveMinimum: 0, maximum: 24 * 30 })),
    autoJoin: Type.Optional(Type.Array(AutoJoinRule)),
    /** Allow an http:// issuer (development and tests only). */
    allowInsecureIssuer: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);
export type OidcConfigFile = Static<typeof OidcConfigSchema>;

export interface AutoJoin {
  emailDomain?: string;
  group?: string;
  tenant: string;
  role: Role;
}

export interface OidcSettings {
  issuer: string;
  clientId: string;
  clientSecret?: string;
  scopes: string[];
  groupsClaim: string;
  personKeyMs: number;
  autoJoin: AutoJoin[];
  allowInsecureIssuer: boolean;
}

export const DEFAULT_SCOPES = ['openid', 'email', 'profile'];
export const DEFAULT_PERSON_KEY_HOURS = 12;

/**
 * The settings, or undefined when no IdP is configured (no issuer anywhere). A half configuration (an issuer
 * without a client id, a rule naming an unknown role) is an error: `fail` builds the caller's error type.
 */
export function resolveOidcSettings(
  file: OidcConfigFile | undefined,
  env: NodeJS.ProcessEnv,
  readSecretFile: (path: string) => string,
  fail: (message: string) => Error,
): OidcSettings | undefined {
  const issuer = env.SIGNBRIDGE_OIDC_ISSUER ?? file?.issuer;
  const clientId = env.SIGNBRIDGE_OIDC_CLIENT_ID ?? file?.clientId;
  const secretFile = file?.clientSecretFile;
  const clientSecret =
    env.SIGNBRIDGE_OIDC_CLIENT_SECRET ??
    file?.clientSecret ??
    (secretFile ? readSecretFile(secretFile).trim() : undefined);
  if (!issuer) {
    if (clientId || clientSecret)
      throw fail('an OIDC client id or secret is set but no issuer: set SIGNBRIDGE_OIDC_ISSUER');
    return undefined;
  }
  if (!clientId) throw fail('SIGNBRIDGE_OIDC_ISSUER is set but no client id: set SIGNBRIDGE_OIDC_CLIENT_ID');
  let url: URL;
  try {
    url = new URL(issuer);
  } catch {
    throw fail(`the OIDC issuer "${issuer}" is not a URL`);
  }
  const allowInsecureIssuer = file?.allowInsecureIssuer ?? false;
  if (url.protocol !== 'https:' && !allowInsecureIssuer) {
    throw fail(`the OIDC issuer must be https (got ${issuer}); oidc.allowInsecureIssuer is for development only`);
  }
  const autoJoin = (file?.autoJoin ?? []).map((rule, i) => {
    if (!isRole(rule.role) || rule.role === 'operator') {
      throw fail(`oidc.autoJoin[${i}].role must be a tenant role (admin, signer, approver, security_reviewer)`);
    }
    if ((rule.emailDomain === undefined) === (rule.group === undefined)) {
      throw fail(`oidc.autoJoin[${i}] needs exactly one of emailDomain or group`);
    }
    return { ...rule, role: rule.role, ...(rule.emailDomain && { emailDomain: rule.emailDomain.toLowerCase() }) };
  });
  return {
    issuer,
    clientId,
    ...(clientSecret !== undefined && { clientSecret }),
    scopes: file?.scopes ?? DEFAULT_SCOPES,
    groupsClaim: file?.groupsClaim ?? 'groups',
    personKeyMs: (file?.personKeyHours ?? DEFAULT_PERSON_KEY_HOURS) * 3_600_000,
    autoJoin,
    allowInsecureIssuer,
  };
}
