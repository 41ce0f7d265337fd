// Auto-join rules (config `oidc.autoJoin`): a verified email domain or a value of the IdP's group claim admits a
// person to a tenant with a role at sign-in. An unverified email never matches.
import type { SignInClaims } from '../../store/people/people-store.js';
import type { Role } from '../../store/records/roles.js';
import type { AutoJoin } from './settings.js';

export function matchAutoJoin(
  rules: readonly AutoJoin[],
  claims: SignInClaims,
  groups: readonly string[],
): Array<{ tenantId: string; role: Role }> {
  const domain = claims.emailVerified && claims.email ? claims.email.toLowerCase().split('@').at(-1) : undefined;
  const grants = new Map<string, { tenantId: string; role: Role }>();
  for (const rule of rules) {
    const matches =
      (rule.emailDomain !== undefined && domain === rule.emailDomain) ||
      (rule.group !== undefined && groups.includes(rule.group));
    if (matches) grants.set(`${rule.tenant}\n${rule.role}`, { tenantId: rule.tenant, role: rule.role });
  }
  return [...grants.values()];
}
