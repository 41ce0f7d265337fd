// Every signature passes the policy seam: its inputs arrive intact, and its decisions map to HTTP outcomes.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PolicyDecision, PolicyEngine, PolicyInput } from '../../src/policy/policy.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

const seen: PolicyInput[] = [];
let next: PolicyDecision = { outcome: 'allow', rule: 'test', reason: 'allowed' };
const policy: PolicyEngine = {
  async evaluate(input) {
    seen.push(input);
    return next;
  },
};

let svc: TestService;
let signer: string;
const hash = Buffer.alloc(32, 9).toString('base64');
beforeAll(async () => {
  svc = await startTestService({ policy });
  await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'p', key_spec: 'RSA_2048' });
  signer = await svc.apiKey('signer', 'p');
});
afterAll(async () => svc?.close());

describe('policy seam', () => {
  it('passes the contract policy inputs plus caller, tenant and key to the policy', async () => {
    seen.length = 0;
    const res = await callAction(svc.app, signer, 'pkcs11_sign', {
      tenant_id: 'p',
      hash,
      artifact_type: 'jar',
      artifact_version: '1.2.3',
      environment: 'staging',
      identity_id: 'ci-bot',
      identity_status: 'active',
      project: 'payments',
      require_tee: false,
      sbom: '{"bomFormat":"CycloneDX"}',
    });
    expect(res.status).toBe(200);
    expect(seen).toHaveLength(1);
    expect(seen[0]).toEqual({
      tenantId: 'p',
      keyId: res.body.key_id,
      keySpec: 'RSA_2048',
      algorithm: 'RSASSA_PKCS1_V1_5_SHA_256',
      callerId: signer.slice(4, 20),
      artifactType: 'jar',
      artifactVersion: '1.2.3',
      environment: 'staging',
      identityId: 'ci-bot',
      identityStatus: 'active',
      project: 'payments',
      requireTee: false,
      sbom: '{"bomFormat":"CycloneDX"}',
      exceptions: [],
    });
  });

  it('maps a deny to 403 policy_denied with vuln_id and fix_version, and signs nothing', async () => {
    next = {
      outcome: 'deny',
      rule: 'sbom-vulnerable',
      reason: 'lodash 4.17.20 is vulnerable',
      vulnId: 'GHSA-xxxx',
      fixVersion: '4.17.21',
    };
    const before = await svc.store.signatures.list('p', 100);
    const res = await callAction(svc.app, signer, 'sign', { tenant_id: 'p', hash });
    expect(res.status).toBe(403);
    expect(res.body).toEqual({
      error: 'policy_denied',
      reason: 'sbom-vulnerable: lodash 4.17.20 is vulnerable',
      vuln_id: 'GHSA-xxxx',
      fix_version: '4.17.21',
    });
    expect(await svc.store.signatures.list('p', 100)).toEqual(before);
  });

  it('turns a pending decision into a stored request (202) and signs nothing yet', async () => {
    next = { outcome: 'pending_approval', rule: 'prod-approval', reason: 'production needs approval' };
    const before = await svc.store.signatures.list('p', 100);
    const res = await callAction(svc.app, signer, 'sign', { tenant_id: 'p', hash });
    expect(res.status).toBe(202);
    expect(res.body).toEqual({
      message: expect.stringContaining('production needs approval'),
      request_id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      status: 'pending_approval',
    });
    expect(await svc.store.requests.get('p', res.body.request_id as string)).toMatchObject({
      status: 'pending_approval',
      hash,
      rule: 'prod-approval',
      requester: signer.slice(4, 20),
    });
    expect(await svc.store.signatures.list('p', 100)).toEqual(before);
    next = { outcome: 'allow', rule: 'test', reason: 'allowed' };
  });
});
