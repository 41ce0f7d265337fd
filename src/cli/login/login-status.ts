// The "who is signed in" part of `signbridge status`: the service's own answer (/oauth/whoami) when it can be
// reached, else what login.json recorded, marked as such.
import { type LoginFiles, readLoginKey, readLoginMetadata } from '../../../daemon/login-files.js';
import { whoAmI } from './session-api.js';

export interface LoginReport {
  email: string | null;
  tenant: string;
  roles: string[];
  expiresAt: string | null;
  service: string;
  /** `service`: confirmed by /oauth/whoami; `local`: from login.json (the service could not say). */
  source: 'service' | 'local';
  /** The key is expired, revoked or unreadable: sign in again. */
  problem?: string;
  note?: string;
}

export async function loginStatus(files: LoginFiles, now = Date.now()): Promise<LoginReport | undefined> {
  let key: string | undefined;
  let meta: ReturnType<typeof readLoginMetadata>;
  try {
    key = readLoginKey(files);
    meta = readLoginMetadata(files);
  } catch (err) {
    return {
      email: null,
      tenant: '?',
      roles: [],
      expiresAt: null,
      service: '?',
      source: 'local',
      problem: `${(err as Error).message}: run \`signbridge login\``,
    };
  }
  if (!key || !meta) return undefined;
  const report: LoginReport = {
    email: meta.email,
    tenant: meta.tenant_id,
    roles: meta.roles,
    expiresAt: meta.expires_at,
    service: meta.service_url,
    source: 'local',
  };
  const base = new URL(meta.service_url.endsWith('/') ? meta.service_url : `${meta.service_url}/`);
  const answer = await whoAmI(base, key);
  if (answer.kind === 'ok') {
    Object.assign(report, {
      email: answer.who.email,
      tenant: answer.who.tenantId,
      roles: answer.who.roles,
      expiresAt: answer.who.expiresAt,
      source: 'service',
    });
  } else if (answer.kind === 'refused') {
    report.problem = `the service refuses the key (${answer.why}): run \`signbridge login\``;
  } else {
    report.note = `from ${files.metadataFile}; the service could not confirm it (${answer.why})`;
  }
  if (!report.problem && report.expiresAt && Date.parse(report.expiresAt) <= now) {
    report.problem = `the key expired at ${report.expiresAt}: run \`signbridge login\``;
  }
  return report;
}
