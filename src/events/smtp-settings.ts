// Outgoing mail for e-mail subscriptions (the config file's `smtp`, SIGNBRIDGE_SMTP_PASSWORD; docs/events.md#smtp).
import { readFileSync } from 'node:fs';
import { type Static, Type } from '@sinclair/typebox';
import { ConfigError } from '../config-error.js';

/** The environment variables the SMTP settings read. */
export const SMTP_ENV = ['SIGNBRIDGE_SMTP_PASSWORD'] as const;

export const SMTP_TLS_MODES = ['starttls', 'implicit', 'none'] as const;
/** Outgoing mail for e-mail subscriptions (docs/events.md#smtp); the password comes from a file or the environment. */
export const SmtpConfigSchema = Type.Object(
  {
    host: Type.String({ minLength: 1 }),
    /** Default: 587 with starttls, 465 with implicit, 25 with none. */
    port: Type.Optional(Type.Integer({ minimum: 1, maximum: 65535 })),
    /** The From address: `signbridge@example.com` or `signbridge <signbridge@example.com>`. */
    from: Type.String({ minLength: 3 }),
    user: Type.Optional(Type.String({ minLength: 1 })),
    passwordFile: Type.Optional(Type.String({ minLength: 1 })),
    /** starttls (default: the upgrade is required), implicit (TLS from the first byte), none (clear text). */
    tls: Type.Optional(Type.Union(SMTP_TLS_MODES.map((m) => Type.Literal(m)))),
    /** Extra PEM trust anchors for the server's certificate (a private CA). */
    caFile: Type.Optional(Type.String({ minLength: 1 })),
    /** For connecting, the greeting and each reply (default 30000). */
    timeoutMs: Type.Optional(Type.Integer({ minimum: 1000, maximum: 300_000 })),
  },
  { additionalProperties: false },
);
export type SmtpConfigFile = Static<typeof SmtpConfigSchema>;

export type SmtpTlsMode = (typeof SMTP_TLS_MODES)[number];

export interface SmtpSettings {
  host: string;
  port: number;
  from: string;
  tls: SmtpTlsMode;
  /** Present when smtp.user is set; `pass` from SIGNBRIDGE_SMTP_PASSWORD or smtp.passwordFile. Never log it. */
  auth?: { user: string; pass: string };
  /** Extra PEM trust anchors (smtp.caFile's contents). */
  caPem?: string;
  timeoutMs: number;
}

/** The file's keys as it spells them, with what applies when one is not set (the port follows `tls`). */
export const SMTP_DEFAULTS = { tls: 'starttls' as SmtpTlsMode, timeoutMs: 30_000 };

const SMTP_DEFAULT_PORTS: Record<SmtpTlsMode, number> = { starttls: 587, implicit: 465, none: 25 };

/**
 * The smtp section with its password (SIGNBRIDGE_SMTP_PASSWORD over smtp.passwordFile) and CA file read now: a
 * missing file or a user without a password stops the start instead of failing every mail later. Errors name the
 * setting and the file, never the password.
 */
export function smtpSetting(file: SmtpConfigFile, env: NodeJS.ProcessEnv): SmtpSettings {
  // A CR or LF in From would let the address add header lines to every mail.
  if (!file.from.includes('@') || /[\r\n]/.test(file.from)) {
    throw new ConfigError(
      `smtp.from must be one address such as signbridge@example.com or "signbridge <signbridge@example.com>", got ${JSON.stringify(file.from)}`,
    );
  }
  let pass = env.SIGNBRIDGE_SMTP_PASSWORD || undefined;
  if (pass === undefined && file.passwordFile) {
    try {
      pass = readFileSync(file.passwordFile, 'utf8').replace(/[\r\n]+$/, '');
    } catch (err) {
      throw new ConfigError(
        `smtp.passwordFile ${file.passwordFile} cannot be read: ${(err as NodeJS.ErrnoException).code ?? 'error'}`,
      );
    }
    if (pass === '') throw new ConfigError(`smtp.passwordFile ${file.passwordFile} is empty`);
  }
  if (file.user && pass === undefined) {
    throw new ConfigError('smtp.user is set: give its password in smtp.passwordFile or SIGNBRIDGE_SMTP_PASSWORD');
  }
  if (!file.user && pass !== undefined) {
    throw new ConfigError(
      'an SMTP password is set (smtp.passwordFile or SIGNBRIDGE_SMTP_PASSWORD) but smtp.user is not',
    );
  }
  let caPem: string | undefined;
  if (file.caFile) {
    try {
      caPem = readFileSync(file.caFile, 'utf8');
    } catch (err) {
      throw new ConfigError(`smtp.caFile ${file.caFile} cannot be read: ${(err as Error).message}`);
    }
    if (!caPem.includes('-----BEGIN CERTIFICATE-----')) {
      throw new ConfigError(`smtp.caFile ${file.caFile} holds no PEM certificate`);
    }
  }
  const tls = file.tls ?? SMTP_DEFAULTS.tls;
  return {
    host: file.host,
    port: file.port ?? SMTP_DEFAULT_PORTS[tls],
    from: file.from,
    tls,
    ...(file.user && pass !== undefined && { auth: { user: file.user, pass } }),
    ...(caPem !== undefined && { caPem }),
    timeoutMs: file.timeoutMs ?? SMTP_DEFAULTS.timeoutMs,
  };
}
