// The stand the sign-in tests share: the test IdP (oidc-provider, in process) and the real service configured as its
// relying party, both on ephemeral loopback ports, with tenants made and people invited to them by email (the
// invitation becomes a membership at their first sign-in with that verified email).
import type { AppOptions } from '../../src/app.js';
import type { OidcSettings } from '../../src/auth/oidc/settings.js';
import type { Role } from '../../src/store/records/roles.js';
import { callAction, startTestService, type TestService } from './service.js';
import { listenTestIdp, TEST_CLIENT, type TestAccount, type TestIdp } from './test-idp.js';

export interface OidcStand {
  idp: TestIdp;
  svc: TestService;
  /** The service's base URL (http://127.0.0.1:PORT). */
  base: string;
  settings: OidcSettings;
  close(): Promise<void>;
}

export interface OidcStandOptions {
  accounts: Record<string, TestAccount>;
  /** Tenants to create (ECC_NIST_P256 keys). */
  tenants: string[];
  invitations: Array<{ email: string; tenant: string; role: Role }>;
  settings?: Partial<OidcSettings>;
  app?: Partial<AppOptions>;
}

export async function startOidcStand(opts: OidcStandOptions): Promise<OidcStand> {
  const idp = await listenTestIdp(opts.accounts);
  const settings: OidcSettings = {
    issuer: idp.issuer,
    clientId: TEST_CLIENT.id,
    clientSecret: TEST_CLIENT.secret,
    scopes: ['openid', 'email', 'profile'],
    groupsClaim: 'groups',
    personKeyMs: 12 * 3_600_000,
    autoJoin: [],
    allowInsecureIssuer: true,
    ...opts.settings,
  };
  let base = '';
  const svc = await startTestService({ ...opts.app, oauth: { oidc: settings, publicUrl: () => base } });
  base = await svc.app.listen({ host: '127.0.0.1', port: 0 });
  idp.start(`${base}/oauth/callback`);
  for (const tenant of opts.tenants) {
    const made = await callAction(svc.app, svc.operator, 'create_tenant', {
      tenant_id: tenant,
      key_spec: 'ECC_NIST_P256',
    });
    if (made.status !== 201) throw new Error(`create_tenant ${tenant}: ${JSON.stringify(made.body)}`);
  }
  for (const i of opts.invitations) {
    await svc.store.people.addMembership({
      tenantId: i.tenant,
      role: i.role,
      personId: null,
      email: i.email,
      createdAt: new Date().toISOString(),
      createdBy: 'test',
    });
  }
  return {
    idp,
    svc,
    base,
    settings,
    async close() {
      await svc.close();
      await idp.close();
    },
  };
}
