// The console's doors, without a browser: no IdP configured (a 503 page saying so), no session (a GET goes to the
// IdP sign-in and comes back to the same page; a POST is a 401 page and changes nothing).

import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { type OidcStand, startOidcStand } from '../helpers/oidc-service.js';

let plain: FastifyInstance;
let stand: OidcStand;

beforeAll(async () => {
  stand = await startOidcStand({ accounts: {}, tenants: ['acme'], invitations: [] });
  // The same store and key store without an IdP (one SoftHSM per process: a second test service would share it).
  plain = await buildApp({ store: stand.svc.store, keyStore: stand.svc.keyStore });
});
afterAll(async () => {
  await plain?.close();
  await stand?.close();
});

describe('console access', () => {
  it('without an IdP every console page is a 503 page that says what to configure', async () => {
    const res = await plain.inject({ method: 'GET', url: '/console/requests' });
    expect(res.statusCode).toBe(503);
    expect(res.headers['content-type']).toMatch(/^text\/html/);
    expect(res.body).toContain('oauth_not_configured');
    expect(res.headers['content-security-policy']).toContain("default-src 'none'");
  });

  it('a GET without a session goes through /oauth/start and back to the same page', async () => {
    const res = await stand.svc.app.inject({ method: 'GET', url: '/console/tenants/acme/members?x=1' });
    expect(res.statusCode).toBe(303);
    expect(res.headers.location).toBe(
      `/oauth/start?return_to=${encodeURIComponent('/console/tenants/acme/members?x=1')}`,
    );
  });

  it('a POST without a session is a 401 page and changes nothing', async () => {
    const before = await stand.svc.store.people.listMemberships({ tenantId: 'acme' });
    const res = await stand.svc.app.inject({
      method: 'POST',
      url: '/console/tenants/acme/members',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      payload: 'email=mallory%40example.com&role=admin&csrf_token=guess',
    });
    expect(res.statusCode).toBe(401);
    expect(res.body).toContain('Not signed in');
    expect(await stand.svc.store.people.listMemberships({ tenantId: 'acme' })).toEqual(before);
  });
});
