// The policy is checked again at approval time: an exception that was revoked or expired while the request
// waited no longer covers its vulnerability, and the approval ends in a denial with no signature.
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parsePolicyDocument } from '../../src/policy/policy-file.js';
import { RulesPolicyEngine } from '../../src/policy/rules-engine.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

let clock = Date.parse('2026-09-01T08:00:00Z');
const finding = {
  vulnId: 'GHSA-35jh-r3h4-6jhm',
  severity: 'HIGH' as const,
  fixVersion: '4.17.21',
  component: 'pkg:npm/lodash@4.17.20',
};
const policy = new RulesPolicyEngine(
  parsePolicyDocument('version: 1\nrules:\n  environments: { requireApproval: [production] }\n', 't'),
  {
    scan: (sbom) => (sbom.includes('lodash') ? [finding] : []),
  },
);

let svc: TestService;
let signer: string;
let approver: string;
let admin: string;
beforeAll(async () => {
  svc = await startTestService({ policy, now: () => new Date(clock) });
  await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'rc', key_spec: 'ECC_NIST_P256' });
  signer = await svc.apiKey('signer', 'rc');
  approver = await svc.apiKey('approver', 'rc');
  admin = await svc.apiKey('admin', 'rc');
});
afterAll(async () => svc?.close());

const hash = (m: string) => createHash('sha256').update(m).digest('base64');
async function pendingWithException(message: string, expiresInMs: number) {
  const exc = await callAction(svc.app, admin, 'create_exception', {
    tenant_id: 'rc',
    vuln_id: finding.vulnId,
    reason: 'temporary',
    expires_at: new Date(clock + expiresInMs).toISOString(),
  });
  expect(exc.status).toBe(201);
  const req = await callAction(svc.app, signer, 'sign', {
    tenant_id: 'rc',
    algorithm: 'ECDSA_SHA_256',
    hash: hash(message),
    environment: 'production',
    sbom: 'lodash 4.17.20',
  });
  expect(req.status).toBe(202);
  return { exceptionId: exc.body.exception_id, requestId: req.body.request_id };
}

describe('re-check at approval', () => {
  it('denies when the exception was revoked while the request waited', async () => {
    const { exceptionId, requestId } = await pendingWithException('revoked meanwhile', 86_400_000);
    await callAction(svc.app, admin, 'revoke_exception', { tenant_id: 'rc', exception_id: exceptionId });
    const res = await callAction(svc.app, approver, 'approve_sign', { tenant_id: 'rc', request_id: requestId });
    expect(res.status).toBe(403);
    expect(res.body).toMatchObject({ error: 'policy_denied', vuln_id: finding.vulnId, fix_version: '4.17.21' });
    const collected = await callAction(svc.app, signer, 'sign', {
      tenant_id: 'rc',
      algorithm: 'ECDSA_SHA_256',
      hash: hash('revoked meanwhile'),
      request_id: requestId,
    });
    expect(collected.status).toBe(403);
    expect(collected.body.error).toBe('policy_denied');
    expect((await svc.store.signatures.list('rc', 100)).some((s) => s.hash === hash('revoked meanwhile'))).toBe(false);
  });

  it('denies when the exception expired while the request waited', async () => {
    const { requestId } = await pendingWithException('expired meanwhile', 3_600_000);
    clock += 2 * 3_600_000;
    const res = await callAction(svc.app, approver, 'approve_sign', { tenant_id: 'rc', request_id: requestId });
    expect(res.status).toBe(403);
    expect(res.body.error).toBe('policy_denied');
  });

  it('signs when the exception still holds', async () => {
    const { requestId } = await pendingWithException('still covered', 86_400_000);
    const res = await callAction(svc.app, approver, 'approve_sign', { tenant_id: 'rc', request_id: requestId });
    expect(res.status).toBe(200);
    expect(res.body.status).toBe('approved');
  });
});
