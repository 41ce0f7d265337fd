// The approval life cycle over HTTP with separate identities, the real rules engine and a controlled clock.
import { createHash, createPublicKey, verify } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parsePolicyDocument } from '../../src/policy/policy-file.js';
import { RulesPolicyEngine } from '../../src/policy/rules-engine.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

let clock = Date.parse('2026-06-01T12:00:00Z');
const policy = new RulesPolicyEngine(
  parsePolicyDocument(
    `version: 1
rules:
  environments:
    requireApproval: [production]
    attested: [enclave]
`,
    'test-policy',
  ),
);

let svc: TestService;
let requester: string;
let otherSigner: string;
let approver: string;
let approver2: string;
let reviewer: string;
let pem: string;

beforeAll(async () => {
  svc = await startTestService({ policy, now: () => new Date(clock), approvalLifetimeMs: 3_600_000 });
  await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'ap', key_spec: 'ECC_NIST_P256' });
  await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'other', key_spec: 'ECC_NIST_P256' });
  requester = await svc.apiKey('signer', 'ap');
  otherSigner = await svc.apiKey('signer', 'ap');
  approver = await svc.apiKey('approver', 'ap');
  approver2 = await svc.apiKey('approver', 'ap');
  reviewer = await svc.apiKey('security_reviewer', 'ap');
  pem = (await callAction(svc.app, approver, 'get_public_key', { tenant_id: 'ap' })).body.public_key_pem as string;
});
afterAll(async () => svc?.close());

const digestOf = (m: string) => createHash('sha256').update(m).digest();
async function request(message: string, extra: Record<string, unknown> = { environment: 'production' }) {
  const res = await callAction(svc.app, requester, 'sign', {
    tenant_id: 'ap',
    algorithm: 'ECDSA_SHA_256',
    hash: digestOf(message).toString('base64'),
    ...extra,
  });
  return res;
}
const approve = (token: string, requestId: unknown, extra: Record<string, unknown> = {}) =>
  callAction(svc.app, token, 'approve_sign', { tenant_id: 'ap', request_id: requestId, ...extra });
const collect = (token: string, message: string, requestId: unknown) =>
  callAction(svc.app, token, 'sign', {
    tenant_id: 'ap',
    algorithm: 'ECDSA_SHA_256',
    hash: digestOf(message).toString('base64'),
    request_id: requestId,
  });

describe('approval workflow', () => {
  it('signs staging at once and holds production for approval (202 pending_approval)', async () => {
    const staging = await request('staging build', { environment: 'staging' });
    expect(staging.status).toBe(200);
    const prod = await request('prod build');
    expect(prod.status).toBe(202);
    expect(prod.body.status).toBe('pending_approval');
    expect(prod.body.message).toContain('environment-approval');
    expect(prod.body.message).toMatch(/\[inputs sha256:[0-9a-f]{64}\]/);
  });

  it('runs the whole life cycle: pending, collect (202), approve (signature), collect (200)', async () => {
    const { body } = await request('release 1.0');
    const id = body.request_id;
    const waiting = await collect(requester, 'release 1.0', id);
    expect(waiting.status).toBe(202);
    expect(waiting.body.status).toBe('pending_approval');

    const approved = await approve(approver, id);
    expect(approved.status, JSON.stringify(approved.body)).toBe(200);
    expect(approved.body).toMatchObject({ request_id: id, status: 'approved' });
    const sig = Buffer.from(approved.body.signature as string, 'base64');
    expect(verify('sha256', Buffer.from('release 1.0'), createPublicKey(pem), sig)).toBe(true);

    const collected = await collect(otherSigner, 'release 1.0', id);
    expect(collected.status).toBe(200);
    expect(collected.body.signature).toBe(approved.body.signature);
    expect(collected.body.request_id).toBe(id);

    const again = await approve(approver2, id);
    expect(again.status).toBe(409);
    expect(again.body.error).toBe('request_not_pending');
    expect(
      (await svc.store.signatures.list('ap', 100)).filter((s) => s.hash === digestOf('release 1.0').toString('base64')),
    ).toHaveLength(1);
  });

  it("names the API and credential in every signed entry: /v1's own, and at approval the request's (issue 44)", async () => {
    const entries = async () => (await svc.store.audit.read(0, 1_000_000)).filter((e) => e.tenantId === 'ap');
    const atOnce = await request('via at once', { environment: 'staging' });
    expect(atOnce.status).toBe(200);
    const signedAtOnce = (await entries()).find(
      (e) => e.outcome === 'signed' && e.details.hash === digestOf('via at once').toString('base64'),
    );
    expect(signedAtOnce?.details.via).toEqual({ api: 'signbridge', api_key_id: signedAtOnce?.actor });

    const held = await request('via at approval');
    const id = held.body.request_id;
    expect((await approve(approver, id)).status).toBe(200);
    const ofRequest = (await entries()).filter((e) => e.details.request_id === id);
    expect(ofRequest.map((e) => [e.action, e.outcome])).toEqual([
      ['sign', 'pending_approval'],
      ['approve_sign', 'signed'],
    ]);
    const [pending, signed] = ofRequest;
    // The requester's key made the request; the approver's key only decided it.
    expect(pending?.details.via).toEqual({ api: 'signbridge', api_key_id: pending?.actor });
    expect(signed?.details.via).toEqual(pending?.details.via);
    expect(signed?.actor).not.toBe(pending?.actor);
  });

  it('signs with the key version recorded in the request, even after a rotation', async () => {
    const { body } = await request('before rotation');
    const admin = await svc.apiKey('admin', 'ap');
    const rotated = await callAction(svc.app, admin, 'rotate_key', { tenant_id: 'ap' });
    expect(rotated.status).toBe(200);
    const approved = await approve(approver, body.request_id);
    expect(approved.body.key_id).not.toBe(rotated.body.key_id);
    const sig = Buffer.from(approved.body.signature as string, 'base64');
    expect(verify('sha256', Buffer.from('before rotation'), createPublicKey(pem), sig)).toBe(true);
    pem = (await callAction(svc.app, approver, 'get_public_key', { tenant_id: 'ap' })).body.public_key_pem as string;
  });

  it('never lets the requester approve, nor a signer, nor another tenant', async () => {
    const { body } = await request('self approval');
    const self = await callAction(svc.app, requester, 'approve_sign', { tenant_id: 'ap', request_id: body.request_id });
    expect(self.status).toBe(403); // a signer may not call approve_sign at all
    const otherTenantApprover = await svc.apiKey('approver', 'other');
    const cross = await callAction(svc.app, otherTenantApprover, 'approve_sign', {
      tenant_id: 'other',
      request_id: body.request_id,
    });
    expect(cross.status).toBe(404);
    expect(cross.body.error).toBe('request_not_found');
    const crossPath = await callAction(svc.app, otherTenantApprover, 'approve_sign', {
      tenant_id: 'ap',
      request_id: body.request_id,
    });
    expect(crossPath.status).toBe(403);
    expect((await collect(requester, 'self approval', body.request_id)).status).toBe(202);
  });

  it('refuses an approver who is the requester (same API key)', async () => {
    // An approver key that also asks for a signature cannot exist (one role per key), so the rule is checked
    // at the service layer directly: same caller id as the requester.
    const { body } = await request('same identity');
    const record = await svc.store.requests.get('ap', body.request_id as string);
    const { SigningService } = await import('../../src/signing/signing-service.js');
    const signing = new SigningService({
      store: svc.store,
      keyStore: svc.keyStore,
      policy,
      now: () => new Date(clock),
    });
    await expect(
      signing.decide('ap', body.request_id as string, { id: record?.requester as string, role: 'approver' }, 'approve'),
    ).rejects.toMatchObject({ code: 'self_approval' });
  });

  it('rejects: the decision is recorded with its reason and the requester gets 403 request_rejected', async () => {
    const { body } = await request('to reject');
    const rejected = await approve(approver, body.request_id, { decision: 'reject', reason: 'not a release build' });
    expect(rejected.status).toBe(200);
    expect(rejected.body).toMatchObject({ status: 'rejected' });
    expect(rejected.body.signature).toBeUndefined();
    const res = await collect(requester, 'to reject', body.request_id);
    expect(res.status).toBe(403);
    expect(res.body).toEqual({
      error: 'request_rejected',
      reason: expect.stringContaining('not a release build'),
      request_id: body.request_id,
    });
    expect((await approve(approver2, body.request_id)).status).toBe(409);
  });

  it('expires after its lifetime: late approvals fail and the requester gets 403 request_expired', async () => {
    const { body } = await request('late');
    clock += 3_600_001;
    const late = await approve(approver, body.request_id);
    expect(late.status).toBe(409);
    expect(late.body.reason).toContain('expired');
    const res = await collect(requester, 'late', body.request_id);
    expect(res.status).toBe(403);
    expect(res.body.error).toBe('request_expired');
  });

  it('lets exactly one of two racing approvals sign', async () => {
    const { body } = await request('race');
    const results = await Promise.all([approve(approver, body.request_id), approve(approver2, body.request_id)]);
    expect(results.map((r) => r.status).sort()).toEqual([200, 409]);
    const hash = digestOf('race').toString('base64');
    expect((await svc.store.signatures.list('ap', 1000)).filter((s) => s.hash === hash)).toHaveLength(1);
  });

  it('require_tee outside an attested environment needs a security review, then the approval stage', async () => {
    const attested = await request('in enclave', { environment: 'enclave', require_tee: true });
    expect(attested.status).toBe(200);
    const { status, body } = await request('tee prod', { environment: 'production', require_tee: true });
    expect(status).toBe(202);
    expect(body.status).toBe('pending_security_review');
    const wrongRole = await approve(approver, body.request_id);
    expect(wrongRole.status).toBe(403);
    expect(wrongRole.body.reason).toContain('security_reviewer');
    const reviewed = await approve(reviewer, body.request_id);
    expect(reviewed.status).toBe(200);
    expect(reviewed.body).toMatchObject({ status: 'pending_approval' });
    expect(reviewed.body.signature).toBeUndefined();
    expect((await collect(requester, 'tee prod', body.request_id)).body.status).toBe('pending_approval');
    const approved = await approve(approver, body.request_id);
    expect(approved.body.status).toBe('approved');
    expect((await collect(requester, 'tee prod', body.request_id)).status).toBe(200);
  });

  it('answers a collect with another hash with 400 hash_mismatch, and unknown ids with 404', async () => {
    const { body } = await request('mismatch');
    const res = await collect(requester, 'something else', body.request_id);
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('hash_mismatch');
    const unknown = await collect(requester, 'x', '00000000-0000-4000-8000-000000000000');
    expect(unknown.status).toBe(404);
  });

  it('recovers a request left in signing by a crashed process: it can be approved again', async () => {
    const { body } = await request('crashed mid-signature');
    const id = body.request_id as string;
    const record = await svc.store.requests.get('ap', id);
    // What a process that died after claiming the request leaves behind.
    expect(
      await svc.store.requests.update(id, 'pending_approval', {
        status: 'signing',
        decisions: [
          ...(record?.decisions ?? []),
          { stage: 'pending_approval', by: 'crashed', at: new Date(clock).toISOString(), decision: 'approve' },
        ],
        updatedAt: new Date(clock).toISOString(),
      }),
    ).toBe(true);
    const early = await approve(approver, id);
    expect(early.status).toBe(409);
    expect(early.body.reason).toContain('being signed');
    clock += 2 * 60 * 1000 + 1;
    expect((await collect(requester, 'crashed mid-signature', id)).body.status).toBe('pending_approval');
    const approved = await approve(approver, id);
    expect(approved.status, JSON.stringify(approved.body)).toBe(200);
    expect(approved.body.status).toBe('approved');
  });
});

describe('where a held request is decided', () => {
  it('a 202 names the console page under the public URL (approve_url); none without a public URL', async () => {
    expect((await request('no public url')).body.approve_url).toBeUndefined();
    const published = await startTestService({ policy, publicUrl: 'https://signing.example.test/sb/' });
    try {
      await callAction(published.app, published.operator, 'create_tenant', {
        tenant_id: 'ap',
        key_spec: 'ECC_NIST_P256',
      });
      const signer = await published.apiKey('signer', 'ap');
      const held = await callAction(published.app, signer, 'sign', {
        tenant_id: 'ap',
        algorithm: 'ECDSA_SHA_256',
        hash: digestOf('published').toString('base64'),
        environment: 'production',
      });
      expect(held.status).toBe(202);
      const id = held.body.request_id as string;
      expect(held.body.approve_url).toBe(`https://signing.example.test/sb/console/requests#req-${id}`);
      // Collecting it while it waits names the same page.
      const waiting = await callAction(published.app, signer, 'sign', {
        tenant_id: 'ap',
        algorithm: 'ECDSA_SHA_256',
        hash: digestOf('published').toString('base64'),
        request_id: id,
      });
      expect(waiting.status).toBe(202);
      expect(waiting.body.approve_url).toBe(held.body.approve_url);
    } finally {
      await published.close();
    }
  });
});
