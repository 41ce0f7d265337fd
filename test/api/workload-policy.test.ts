// Issue 22, "The policy decides on verified facts": a key from the CI token exchange signs with the facts its token
// verified as policy inputs. A body that contradicts them (or states CI facts with any other key) is 400
// claims_conflict and changes nothing; workload.required / workload.require decide on the verified facts; velocity
// limits per identity, per run and per tenant answer 429 with Retry-After and an audit entry; attempt 2 of a run
// continues attempt 1's pending request; audit entries name repository, ref and run.
//
// The workload keys are made directly with createWorkloadApiKey and a hand-built WorkloadIdentity, the record the
// token exchange (built on the ci-exchange branch) stores: this file tests what the signing path does with such a
// key, not the exchange. Over HTTP with the real rules engine, SoftHSM and a controlled clock; on SQLite, and on
// PostgreSQL when the API tests run there (SIGNBRIDGE_TEST_STORE=postgres, scripts/test.sh).
import { createHash, createPublicKey, randomUUID, verify } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiKey, createWorkloadApiKey } from '../../src/auth/api-keys.js';
import {
  runUrlOf,
  type WorkloadFacts,
  type WorkloadIdentity,
  workloadIdentityId,
} from '../../src/auth/workload/workload-identity.js';
import { parsePolicyDocument } from '../../src/policy/policy-file.js';
import { RulesPolicyEngine } from '../../src/policy/rules-engine.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

let clock = Date.parse('2026-07-01T09:00:00Z');
const GITHUB = 'https://token.actions.githubusercontent.com';

const POLICY = `version: 1
rules:
  environments:
    requireApproval: [production]
tenants:
  ci-only:
    workload: { required: true }
  release:
    workload:
      require:
        ref_protected: "true"
        runner_environment: github-hosted
        environment: release
  held:
    environments: { requireApproval: [production] }
    workload:
      require: { environment: production, ref: "refs/heads/*" }
  vel-identity:
    velocity: { perIdentity: { max: 3, windowSeconds: 3600 } }
  vel-run:
    velocity: { perRun: { max: 3, windowSeconds: 600 } }
  vel-tenant:
    velocity: { perTenant: { max: 3, windowSeconds: 60 } }
`;
const TENANTS = ['plain', 'ci-only', 'release', 'held', 'vel-identity', 'vel-run', 'vel-tenant'];

let svc: TestService;
const pems = new Map<string, string>();

beforeAll(async () => {
  svc = await startTestService({
    policy: new RulesPolicyEngine(parsePolicyDocument(POLICY, 'workload-policy')),
    now: () => new Date(clock),
  });
  for (const tenant of TENANTS) {
    const made = await callAction(svc.app, svc.operator, 'create_tenant', {
      tenant_id: tenant,
      key_spec: 'ECC_NIST_P256',
    });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    pems.set(
      tenant,
      (await callAction(svc.app, await svc.apiKey('signer', tenant), 'get_public_key', { tenant_id: tenant })).body
        .public_key_pem as string,
    );
  }
}, 120_000);
afterAll(async () => svc?.close());

/** A GitHub Actions job's identity as the exchange would store it (facts from its token's claims). */
function githubJob(over: Partial<WorkloadFacts> = {}): WorkloadIdentity {
  const facts: WorkloadFacts = {
    project: 'acme/app',
    ref: 'refs/heads/main',
    refType: 'branch',
    refProtected: true,
    workflow: 'acme/app/.github/workflows/release.yml@refs/heads/main',
    sha: 'c0ffee0000000000000000000000000000000001',
    runId: '9001',
    runAttempt: '1',
    actor: 'octocat',
    eventName: 'push',
    runnerEnvironment: 'github-hosted',
    ...over,
  };
  const subject = `repo:${facts.project}:${facts.environment ? `environment:${facts.environment}` : `ref:${facts.ref}`}`;
  const runUrl = runUrlOf('github', GITHUB, facts);
  return {
    issuer: GITHUB,
    subject,
    kind: 'github',
    ruleId: 'tr_0123456789abcdef',
    tokenId: randomUUID(),
    facts,
    ...(runUrl && { runUrl }),
  };
}

/** The short-lived signer key the exchange would mint for `identity` (a new one per exchange, as for each attempt). */
async function workloadKey(tenantId: string, identity: WorkloadIdentity): Promise<string> {
  const made = await createWorkloadApiKey(svc.store, {
    tenantId,
    role: 'signer',
    expiresAt: new Date(clock + 15 * 60_000),
    identity,
  });
  return made.token;
}

/** A key an admin made (`signbridge admin api-key create`): no workload identity. */
const adminMadeKey = async (tenantId: string) =>
  (await createApiKey(svc.store, 'signer', tenantId, 'made by an admin')).token;

const digestOf = (message: string) => createHash('sha256').update(message).digest();
const sign = (tenantId: string, token: string, message: string, extra: Record<string, unknown> = {}) =>
  callAction(svc.app, token, 'sign', {
    tenant_id: tenantId,
    algorithm: 'ECDSA_SHA_256',
    hash: digestOf(message).toString('base64'),
    ...extra,
  });

function verifies(tenantId: string, message: string, signature: unknown): boolean {
  return verify(
    'sha256',
    Buffer.from(message),
    createPublicKey(pems.get(tenantId) as string),
    Buffer.from(signature as string, 'base64'),
  );
}

async function auditEntries(tenantId: string) {
  return (await svc.store.audit.read(0, 1_000_000)).filter((e) => e.tenantId === tenantId);
}

describe('a request body and the verified facts', () => {
  it('repeating every verified fact is fine: the signature is made and verifies', async () => {
    const job = githubJob();
    const token = await workloadKey('plain', job);
    const res = await sign('plain', token, 'repeat the facts', {
      project: 'acme/app',
      identity_id: workloadIdentityId(job),
      identity_status: 'active',
      ref: 'refs/heads/main',
      ref_type: 'branch',
      ref_protected: true,
      workflow: job.facts.workflow,
      sha: job.facts.sha,
      run_id: '9001',
      run_attempt: '1',
      actor: 'octocat',
      event_name: 'push',
      runner_environment: 'github-hosted',
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(verifies('plain', 'repeat the facts', res.body.signature)).toBe(true);
  });

  it.each([
    ['project', 'acme/other', '"acme/app"'],
    ['ref', 'refs/heads/feature', '"refs/heads/main"'],
    ['ref_type', 'tag', '"branch"'],
    ['ref_protected', false, 'true'],
    ['workflow', 'acme/app/.github/workflows/evil.yml@refs/heads/main', 'release.yml'],
    ['sha', 'deadbeef00000000000000000000000000000000', '"c0ffee0000000000000000000000000000000001"'],
    ['run_id', '9002', '"9001"'],
    ['run_attempt', '7', '"1"'],
    ['actor', 'mallory', '"octocat"'],
    ['event_name', 'workflow_dispatch', '"push"'],
    ['runner_environment', 'self-hosted', '"github-hosted"'],
    ['identity_id', 'someone-else', `"${GITHUB}#repo:acme/app:ref:refs/heads/main"`],
    ['identity_status', 'inactive', '"active"'],
  ])('%s stated as another value is 400 claims_conflict naming the field and the verified value', async (field, stated, verified) => {
    const token = await workloadKey('plain', githubJob());
    const before = (await auditEntries('plain')).length;
    const res = await sign('plain', token, `conflict ${field}`, { [field]: stated });
    expect(res.status, JSON.stringify(res.body)).toBe(400);
    expect(res.body.error).toBe('claims_conflict');
    expect(res.body.reason).toContain(field);
    expect(res.body.reason).toContain(verified);
    expect((await auditEntries('plain')).length, 'nothing was decided or recorded').toBe(before);
  });

  it('a fact the token did not carry (environment) cannot be stated: claims_conflict', async () => {
    const token = await workloadKey('plain', githubJob());
    const res = await sign('plain', token, 'no environment in the token', { environment: 'dev' });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ error: 'claims_conflict' });
    expect(res.body.reason).toContain('carries no environment');
  });

  it('pkcs11_sign checks the same: a conflicting run_id is claims_conflict', async () => {
    const token = await workloadKey('plain', githubJob());
    const res = await callAction(svc.app, token, 'pkcs11_sign', {
      tenant_id: 'plain',
      hash: digestOf('pkcs11 conflict').toString('base64'),
      run_id: '1',
    });
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('claims_conflict');
  });

  it.each([
    ['ref', 'refs/heads/main'],
    ['ref_protected', true],
    ['run_id', '9001'],
    ['runner_environment', 'github-hosted'],
  ])('a key an admin made may not state the CI fact %s (400 claims_conflict), so no caller asserts one', async (field, value) => {
    const token = await adminMadeKey('plain');
    const before = (await auditEntries('plain')).length;
    const res = await sign('plain', token, `admin ${field}`, { [field]: value });
    expect(res.status, JSON.stringify(res.body)).toBe(400);
    expect(res.body.error).toBe('claims_conflict');
    expect(res.body.reason).toContain(field);
    expect(res.body.reason).toContain('token exchange');
    expect((await auditEntries('plain')).length).toBe(before);
    // Without the CI fact the same key signs (the refusal was about the fact, not the key).
    expect((await sign('plain', token, `admin ${field}`)).status).toBe(200);
  });
});

describe('workload rules of the policy file', () => {
  it('workload.required: a key an admin made is denied; a workload key signs', async () => {
    const denied = await sign('ci-only', await adminMadeKey('ci-only'), 'required');
    expect(denied.status).toBe(403);
    expect(denied.body.error).toBe('policy_denied');
    expect(denied.body.reason).toContain('workload-required');
    const signed = await sign('ci-only', await workloadKey('ci-only', githubJob()), 'required');
    expect(signed.status, JSON.stringify(signed.body)).toBe(200);
    expect(verifies('ci-only', 'required', signed.body.signature)).toBe(true);
  });

  const releaseJob = (over: Partial<WorkloadFacts> = {}) =>
    githubJob({ environment: 'release', ref: 'refs/tags/v1.0.0', refType: 'tag', ...over });

  it('workload.require: a protected ref on a GitHub-hosted runner in environment release signs', async () => {
    const res = await sign('release', await workloadKey('release', releaseJob()), 'release v1.0.0');
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(verifies('release', 'release v1.0.0', res.body.signature)).toBe(true);
  });

  it.each([
    ['an unprotected ref', { refProtected: false }, 'ref_protected is "false"'],
    ['a self-hosted runner', { runnerEnvironment: 'self-hosted' }, 'runner_environment is "self-hosted"'],
    ['environment staging', { environment: 'staging' }, 'environment is "staging"'],
    ['no environment', { environment: undefined }, 'the token carries no environment'],
  ])('workload.require denies %s (403, rule workload-facts, saying which fact)', async (_what, over, says) => {
    const res = await sign('release', await workloadKey('release', releaseJob(over)), 'release v1.0.0');
    expect(res.status, JSON.stringify(res.body)).toBe(403);
    expect(res.body.error).toBe('policy_denied');
    expect(res.body.reason).toContain('workload-facts');
    expect(res.body.reason).toContain(says);
  });

  it('workload.require refuses a key an admin made, whatever its body says (the facts are not verified)', async () => {
    const res = await sign('release', await adminMadeKey('release'), 'release v1.0.0', { environment: 'release' });
    expect(res.status).toBe(403);
    expect(res.body.reason).toContain('workload-required');
  });
});

describe('velocity limits', () => {
  it('per identity: the fourth request of one workload identity in the window is 429 with Retry-After and an audit entry; malformed ones do not count', async () => {
    const job = githubJob({ project: 'acme/velocity', runId: '100' });
    const token = await workloadKey('vel-identity', job);
    expect((await sign('vel-identity', token, 'v1')).status).toBe(200);
    // A new run of the same job (new key, same identity) counts against the same identity.
    const nextRun = await workloadKey('vel-identity', { ...job, facts: { ...job.facts, runId: '101' } });
    expect((await sign('vel-identity', nextRun, 'v2')).status).toBe(200);
    // Malformed requests never reach the policy, so they are not counted.
    const badHash = await callAction(svc.app, token, 'sign', {
      tenant_id: 'vel-identity',
      algorithm: 'ECDSA_SHA_384',
      hash: digestOf('wrong length').toString('base64'),
    });
    expect(badHash.status).toBe(400);
    expect((await sign('vel-identity', token, 'conflict', { ref: 'refs/heads/other' })).status).toBe(400);
    expect((await sign('vel-identity', token, 'v3')).status).toBe(200);

    const limited = await sign('vel-identity', nextRun, 'v4');
    expect(limited.status, JSON.stringify(limited.body)).toBe(429);
    expect(limited.body.error).toBe('rate_limited');
    expect(limited.body.reason).toContain('velocity.perIdentity');
    expect(limited.headers['retry-after']).toBe('3600'); // the clock stood still since the window's first request
    const entry = (await auditEntries('vel-identity')).at(-1);
    expect(entry).toMatchObject({
      action: 'sign',
      outcome: 'rate_limited',
      details: {
        limit: 'perIdentity',
        max: 3,
        window_seconds: 3600,
        counted: workloadIdentityId(job),
        workload: { project: 'acme/velocity', run_id: '101' },
      },
    });
    // Another identity of the tenant is not limited by this one.
    const other = await workloadKey('vel-identity', githubJob({ project: 'acme/other', runId: '7' }));
    expect((await sign('vel-identity', other, 'other identity')).status).toBe(200);
    // The window ends: the identity signs again (with a fresh key: the first ones expired meanwhile).
    clock += 3600_000;
    expect((await sign('vel-identity', await workloadKey('vel-identity', job), 'v5')).status).toBe(200);
  });

  it('per run: attempts of one run count together; another run of the same job has its own count', async () => {
    const attempt1 = githubJob({ project: 'acme/runs', runId: '500', runAttempt: '1' });
    const attempt2 = githubJob({ project: 'acme/runs', runId: '500', runAttempt: '2' });
    const key1 = await workloadKey('vel-run', attempt1);
    const key2 = await workloadKey('vel-run', attempt2);
    expect((await sign('vel-run', key1, 'r1')).status).toBe(200);
    expect((await sign('vel-run', key1, 'r2')).status).toBe(200);
    expect((await sign('vel-run', key2, 'r3')).status).toBe(200);
    clock += 1000;
    const limited = await callAction(svc.app, key2, 'pkcs11_sign', {
      tenant_id: 'vel-run',
      hash: digestOf('r4').toString('base64'),
    });
    expect(limited.status).toBe(429);
    expect(limited.body.reason).toContain('velocity.perRun');
    expect(limited.headers['retry-after']).toBe('599');
    expect((await auditEntries('vel-run')).at(-1)).toMatchObject({
      action: 'pkcs11_sign',
      outcome: 'rate_limited',
      details: { limit: 'perRun', max: 3, window_seconds: 600, workload: { run_id: '500', run_attempt: '2' } },
    });
    const otherRun = await workloadKey('vel-run', githubJob({ project: 'acme/runs', runId: '501' }));
    expect((await sign('vel-run', otherRun, 'r5')).status).toBe(200);
  });

  it('per tenant: workload identities and plain keys share the tenant allowance', async () => {
    const a = await workloadKey('vel-tenant', githubJob({ project: 'acme/a', runId: '1' }));
    const b = await workloadKey('vel-tenant', githubJob({ project: 'acme/b', runId: '2' }));
    const plain = await adminMadeKey('vel-tenant');
    expect((await sign('vel-tenant', a, 't1')).status).toBe(200);
    expect((await sign('vel-tenant', b, 't2')).status).toBe(200);
    expect((await sign('vel-tenant', plain, 't3')).status).toBe(200);
    const limited = await sign('vel-tenant', plain, 't4');
    expect(limited.status).toBe(429);
    expect(limited.body.reason).toContain('velocity.perTenant');
    expect(limited.headers['retry-after']).toBe('60');
    const entry = (await auditEntries('vel-tenant')).at(-1);
    expect(entry).toMatchObject({
      outcome: 'rate_limited',
      details: { limit: 'perTenant', counted: 'tenant vel-tenant' },
    });
    expect(entry?.details.workload, 'a plain key has no workload details').toBeUndefined();
    expect((await sign('vel-tenant', a, 't5')).status).toBe(429);
  });
});

describe('a retried run continues its pending request', () => {
  const run = (runId: string, runAttempt: string) =>
    githubJob({ project: 'acme/held', environment: 'production', runId, runAttempt });

  it('attempt 2 (a new key) continues attempt 1’s request for the same digest; another run opens its own; the approval re-check sees the stored facts', async () => {
    const attempt1 = await workloadKey('held', run('700', '1'));
    const first = await sign('held', attempt1, 'held artifact');
    expect(first.status, JSON.stringify(first.body)).toBe(202);
    const requestId = first.body.request_id as string;

    const attempt2 = await workloadKey('held', run('700', '2'));
    const retried = await sign('held', attempt2, 'held artifact');
    expect(retried.status, JSON.stringify(retried.body)).toBe(202);
    expect(retried.body.request_id).toBe(requestId);
    expect(retried.body.message).toContain(`already waits as request ${requestId}`);

    const otherRun = await workloadKey('held', run('701', '1'));
    const separate = await sign('held', otherRun, 'held artifact');
    expect(separate.status).toBe(202);
    expect(separate.body.request_id).not.toBe(requestId);

    // The pending request keeps the verified facts; the approval's re-check evaluates workload.require on them.
    const approver = await svc.apiKey('approver', 'held');
    const approved = await callAction(svc.app, approver, 'approve_sign', { tenant_id: 'held', request_id: requestId });
    expect(approved.status, JSON.stringify(approved.body)).toBe(200);
    expect(approved.body.status).toBe('approved');
    expect(verifies('held', 'held artifact', approved.body.signature)).toBe(true);
    const collected = await sign('held', attempt2, 'held artifact', { request_id: requestId });
    expect(collected.status).toBe(200);
    expect(collected.body.signature).toBe(approved.body.signature);

    const entries = (await auditEntries('held')).filter((e) => e.details.request_id === requestId);
    expect(entries.map((e) => `${e.action}:${e.outcome}`)).toEqual([
      'sign:pending_approval',
      'sign:continued',
      'approve_sign:signed',
    ]);
    expect(entries[1]?.details.workload).toMatchObject({ run_id: '700', run_attempt: '2' });
    expect(entries[2]?.details.workload).toMatchObject({ project: 'acme/held', run_id: '700', run_attempt: '1' });
  });

  it('a run of another job (another subject) with the same run id does not continue it', async () => {
    const first = await sign('held', await workloadKey('held', run('800', '1')), 'two jobs');
    const otherJob = githubJob({ project: 'acme/held', environment: 'production', runId: '800', runAttempt: '1' });
    otherJob.subject = `${otherJob.subject}:job:other`;
    const second = await sign('held', await workloadKey('held', otherJob), 'two jobs');
    expect(first.status).toBe(202);
    expect(second.status).toBe(202);
    expect(second.body.request_id).not.toBe(first.body.request_id);
  });
});

describe('the audit log names who signed', () => {
  it('a signature by a workload key carries issuer, subject, repository, ref, workflow, run, attempt, commit and run URL', async () => {
    const job = githubJob({ project: 'acme/audited', runId: '4242', runAttempt: '3' });
    const res = await sign('plain', await workloadKey('plain', job), 'audited');
    expect(res.status).toBe(200);
    const entry = (await auditEntries('plain')).at(-1);
    expect(entry).toMatchObject({ action: 'sign', outcome: 'signed' });
    expect(entry?.details.workload).toEqual({
      issuer: GITHUB,
      subject: 'repo:acme/audited:ref:refs/heads/main',
      project: 'acme/audited',
      ref: 'refs/heads/main',
      workflow: 'acme/app/.github/workflows/release.yml@refs/heads/main',
      run_id: '4242',
      run_attempt: '3',
      sha: 'c0ffee0000000000000000000000000000000001',
      run_url: 'https://github.com/acme/audited/actions/runs/4242/attempts/3',
    });
  });

  it('a pending request by a workload key carries them too', async () => {
    const job = githubJob({ project: 'acme/pending', environment: 'production', runId: '77' });
    const res = await sign('plain', await workloadKey('plain', job), 'pending audited');
    expect(res.status).toBe(202);
    const entry = (await auditEntries('plain')).at(-1);
    expect(entry).toMatchObject({
      outcome: 'pending_approval',
      details: {
        request_id: res.body.request_id,
        workload: { project: 'acme/pending', ref: 'refs/heads/main', run_id: '77', run_url: expect.any(String) },
      },
    });
  });
});
