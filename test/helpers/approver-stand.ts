// The console as an approver meets it: the test IdP with Carol invited as an approver of tenant acme, and a policy
// that holds every signature for the production environment.
import { parsePolicyDocument } from '../../src/policy/policy-file.js';
import { RulesPolicyEngine } from '../../src/policy/rules-engine.js';
import { type OidcStand, startOidcStand } from './oidc-service.js';

export function startApproverStand(): Promise<OidcStand> {
  return startOidcStand({
    accounts: { carol: { email: 'carol@example.com', email_verified: true, name: 'Carol' } },
    tenants: ['acme'],
    invitations: [{ email: 'carol@example.com', tenant: 'acme', role: 'approver' }],
    app: {
      policy: new RulesPolicyEngine(
        parsePolicyDocument('version: 1\nrules:\n  environments:\n    requireApproval: [production]\n', 'test'),
      ),
    },
  });
}
