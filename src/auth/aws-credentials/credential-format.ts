// How an AWS-format signbridge key looks to AWS clients (docs/kms-api.md, "Credentials"). The access key id carries
// the API key's id, so the record is found without a lookup table: `SBAK` + the 16 hex digits in upper case for a
// key an admin made (AWS's long-term keys start AKIA), `SBTK` for temporary credentials from AssumeRoleWithWebIdentity
// (AWS's start ASIA). The secret access key is 40 characters of base64, like AWS's. A temporary key's session token
// is `sbst_<id>_<43 base64url>`; only its hash is stored, and it is never accepted as a Bearer key.

import { randomBytes } from 'node:crypto';

export const LONG_TERM_PREFIX = 'SBAK';
export const TEMPORARY_PREFIX = 'SBTK';
const ACCESS_KEY_ID = /^SB([AT])K([0-9A-F]{16})$/;
const SESSION_TOKEN = /^sbst_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$/;

export interface ParsedAccessKeyId {
  /** The API key record's id. */
  id: string;
  temporary: boolean;
}

export function accessKeyIdOf(apiKeyId: string, temporary: boolean): string {
  return (temporary ? TEMPORARY_PREFIX : LONG_TERM_PREFIX) + apiKeyId.toUpperCase();
}

export function parseAccessKeyId(accessKeyId: string): ParsedAccessKeyId | undefined {
  const match = ACCESS_KEY_ID.exec(accessKeyId);
  if (!match) return undefined;
  return { id: (match[2] as string).toLowerCase(), temporary: match[1] === 'T' };
}

/** 30 random bytes: 240 bits, 40 base64 characters (AWS's secret access keys are 40 characters too). */
export function newSecretAccessKey(): string {
  return randomBytes(30).toString('base64');
}

export function newSessionToken(apiKeyId: string): { token: string; secret: string } {
  const secret = randomBytes(32).toString('base64url');
  return { token: `sbst_${apiKeyId}_${secret}`, secret };
}

export function parseSessionToken(token: string): { id: string; secret: string } | undefined {
  const match = SESSION_TOKEN.exec(token);
  return match ? { id: match[1] as string, secret: match[2] as string } : undefined;
}

/**
 * The key as a section of the AWS shared credentials file (~/.aws/credentials), which every AWS SDK and the CLI
 * read with AWS_PROFILE=<profile>.
 */
export function sharedCredentialsSection(profile: string, accessKeyId: string, secretAccessKey: string): string {
  return `[${profile}]\naws_access_key_id = ${accessKeyId}\naws_secret_access_key = ${secretAccessKey}\n`;
}
