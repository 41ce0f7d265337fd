// create_exception / list_exceptions / revoke_exception over HTTP, with a controlled clock.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

let clock = Date.parse('2026-03-01T00:00:00Z');
const day = 86_400_000;
let svc: TestService;
let admin: string;
let approver: string;
let signer: string;

beforeAll(async () => {
  svc = await startTestService({ now: () => new Date(clock), exceptionMaxLifetimeMs: 30 * day });
  await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'ex', key_spec: 'ECC_NIST_P256' });
  await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'ex2', key_spec: 'ECC_NIST_P256' });
  admin = await svc.apiKey('admin', 'ex');
  approver = await svc.apiKey('approver', 'ex');
  signer = await svc.apiKey('signer', 'ex');
});
afterAll(async () => svc?.close());

const at = (offset: number) => new Date(clock + offset).toISOString();

describe('policy exceptions', () => {
  it('creates an exception (201) with the documented record', async () => {
    const res = await callAction(svc.app, admin, 'create_exception', {
      tenant_id: 'ex',
      vuln_id: 'GHSA-29mw-wpgm-hmr9',
      project: 'payments',
      reason: 'not reachable: we never call the vulnerable function',
      expires_at: at(7 * day),
    });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    expect(res.body).toEqual({
      exception_id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      tenant_id: 'ex',
      vuln_id: 'GHSA-29mw-wpgm-hmr9',
      project: 'payments',
      reason: 'not reachable: we never call the vulnerable function',
      created_by: admin.slice(4, 20),
      created_at: at(0),
      expires_at: at(7 * day),
      status: 'active',
    });
  });

  it.each([
    ['no expiry', { vuln_id: 'X', reason: 'r' }, /expires_at is required/],
    ['an expiry in the past', { vuln_id: 'X', reason: 'r', expires_at: at(-1000) }, /in the future/],
    ['an expiry beyond the limit', { vuln_id: 'X', reason: 'r', expires_at: at(31 * day) }, /at most 30 days/],
    ['no reason', { vuln_id: 'X', expires_at: at(day) }, /reason is required/],
    ['a malformed date', { vuln_id: 'X', reason: 'r', expires_at: 'next week' }, /expires_at must match format/],
  ])('refuses %s with a 400 naming the field', async (_n, body, pattern) => {
    const before = (await svc.store.exceptions.list('ex')).length;
    const res = await callAction(svc.app, admin, 'create_exception', { tenant_id: 'ex', ...body });
    expect(res.status).toBe(400);
    expect(res.body.reason).toMatch(pattern);
    expect((await svc.store.exceptions.list('ex')).length).toBe(before);
  });

  it('lists with status and vuln filters; expiry and revocation change the status', async () => {
    const short = await callAction(svc.app, admin, 'create_exception', {
      tenant_id: 'ex',
      vuln_id: 'CVE-2024-1',
      reason: 'short',
      expires_at: at(day),
    });
    const revokeMe = await callAction(svc.app, admin, 'create_exception', {
      tenant_id: 'ex',
      vuln_id: 'CVE-2024-2',
      reason: 'revoke',
      expires_at: at(10 * day),
    });
    const revoked = await callAction(svc.app, admin, 'revoke_exception', {
      tenant_id: 'ex',
      exception_id: revokeMe.body.exception_id,
    });
    expect(revoked.status).toBe(200);
    expect(revoked.body).toMatchObject({ status: 'revoked', revoked_by: admin.slice(4, 20), revoked_at: at(0) });
    clock += 2 * day;
    const all = await callAction(svc.app, approver, 'list_exceptions', { tenant_id: 'ex' });
    expect(all.status).toBe(200);
    const statuses = Object.fromEntries(
      (all.body.exceptions as Array<{ vuln_id: string; status: string }>).map((e) => [e.vuln_id, e.status]),
    );
    expect(statuses).toMatchObject({
      'GHSA-29mw-wpgm-hmr9': 'active',
      'CVE-2024-1': 'expired',
      'CVE-2024-2': 'revoked',
    });
    const active = await callAction(svc.app, admin, 'list_exceptions', { tenant_id: 'ex', status: 'active' });
    expect((active.body.exceptions as unknown[]).length).toBe(1);
    const byVuln = await callAction(svc.app, admin, 'list_exceptions', { tenant_id: 'ex', vuln_id: 'CVE-2024-1' });
    expect((byVuln.body.exceptions as Array<{ exception_id: string }>).map((e) => e.exception_id)).toEqual([
      short.body.exception_id,
    ]);
  });

  it('revoking twice is 409, an unknown id 404, another tenant’s exception 404', async () => {
    const e = await callAction(svc.app, admin, 'create_exception', {
      tenant_id: 'ex',
      vuln_id: 'CVE-2024-3',
      reason: 'r',
      expires_at: at(day),
    });
    expect(
      (await callAction(svc.app, admin, 'revoke_exception', { tenant_id: 'ex', exception_id: e.body.exception_id }))
        .status,
    ).toBe(200);
    const twice = await callAction(svc.app, admin, 'revoke_exception', {
      tenant_id: 'ex',
      exception_id: e.body.exception_id,
    });
    expect(twice.status).toBe(409);
    expect(twice.body.error).toBe('exception_not_active');
    const unknown = await callAction(svc.app, admin, 'revoke_exception', {
      tenant_id: 'ex',
      exception_id: '00000000-0000-4000-8000-000000000001',
    });
    expect(unknown.status).toBe(404);
    const admin2 = await svc.apiKey('admin', 'ex2');
    const cross = await callAction(svc.app, admin2, 'revoke_exception', {
      tenant_id: 'ex2',
      exception_id: e.body.exception_id,
    });
    expect(cross.status).toBe(404);
  });

  it('only tenant admins manage exceptions; approvers may list them; signers may not', async () => {
    const body = { tenant_id: 'ex', vuln_id: 'X', reason: 'r', expires_at: at(day) };
    expect((await callAction(svc.app, approver, 'create_exception', body)).status).toBe(403);
    expect((await callAction(svc.app, signer, 'create_exception', body)).status).toBe(403);
    expect((await callAction(svc.app, signer, 'list_exceptions', { tenant_id: 'ex' })).status).toBe(403);
  });
});
