// Issue 21: a client's own retry of a signature held for approval (pkcs11-tool and osslsigncode sign again after a
// refusal or the module's approval timeout) continues the request it opened: 202 with the same request_id and no
// second pending row; a retry shortly after a rejection gets the rejection again; after the retry window, or once
// the request expired, a retry opens a new request. Over HTTP with the real rules engine and a controlled clock; on
// SQLite, and on PostgreSQL when the API tests run there (SIGNBRIDGE_TEST_STORE=postgres).
import { createHash, createPublicKey, randomUUID, verify } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parsePolicyDocument } from '../../src/policy/policy-file.js';
import { RulesPolicyEngine } from '../../src/policy/rules-engine.js';
import { policySettings } from '../../src/signing/policy-settings.js';
import { DEFAULT_APPROVAL_RETRY_WINDOW_MS, SigningService } from '../../src/signing/signing-service.js';
import { ConflictError, type PendingRequestRecord } from '../../src/store/store.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

let clock = Date.parse('2026-06-01T12:00:00Z');
const LIFETIME_MS = 3_600_000;
const policy = new RulesPolicyEngine(
  parsePolicyDocument('version: 1\nrules:\n  environments:\n    requireApproval: [production]\n', 'test-policy'),
);

let svc: TestService;
let requester: string;
let otherSigner: string;
let approver: string;
let pem: string;

beforeAll(async () => {
  // The retry window is left at its default: the tests show the default.
  svc = await startTestService({ policy, now: () => new Date(clock), approvalLifetimeMs: LIFETIME_MS });
  await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'rt', key_spec: 'ECC_NIST_P256' });
  requester = await svc.apiKey('signer', 'rt');
  otherSigner = await svc.apiKey('signer', 'rt');
  approver = await svc.apiKey('approver', 'rt');
  pem = (await callAction(svc.app, approver, 'get_public_key', { tenant_id: 'rt' })).body.public_key_pem as string;
}, 60_000);
afterAll(async () => svc?.close());

const digestOf = (m: string) => createHash('sha256').update(m).digest();
const inputs = { environment: 'production', project: 'payments', artifact_version: '1.0' };
const sign = (message: string, token = requester, extra: Record<string, unknown> = inputs) =>
  callAction(svc.app, token, 'sign', {
    tenant_id: 'rt',
    algorithm: 'ECDSA_SHA_256',
    hash: digestOf(message).toString('base64'),
    ...extra,
  });
const pkcs11Sign = (message: string) =>
  callAction(svc.app, requester, 'pkcs11_sign', {
    tenant_id: 'rt',
    key_spec: 'ECC_NIST_P256',
    hash: digestOf(message).toString('base64'),
    ...inputs,
  });
const decide = (requestId: unknown, decision: 'approve' | 'reject', reason?: string) =>
  callAction(svc.app, approver, 'approve_sign', {
    tenant_id: 'rt',
    request_id: requestId,
    decision,
    ...(reason !== undefined && { reason }),
  });

/** The requests the store holds for a message's digest, oldest first. */
async function requestsFor(message: string): Promise<Array<{ id: string; status: string }>> {
  return svc.run<{ id: string; status: string }>(
    sql`SELECT id, status FROM pending_requests WHERE tenant_id = 'rt' AND hash = ${digestOf(message).toString('base64')}
        ORDER BY created_at, id`,
  );
}

/** The audit entries that name a request, as outcome strings in log order. */
async function auditOutcomes(requestId: string): Promise<string[]> {
  const entries = await svc.store.audit.read(0, 100_000);
  return entries.filter((e) => e.details.request_id === requestId).map((e) => `${e.action}:${e.outcome}`);
}

describe('a retry of a signature held for approval', () => {
  it('continues the waiting request (same request_id, no second row); the approval then answers the retry', async () => {
    const first = await sign('release 2.0');
    expect(first.status).toBe(202);
    const id = first.body.request_id as string;

    const retry = await sign('release 2.0');
    expect(retry.status, JSON.stringify(retry.body)).toBe(202);
    expect(retry.body).toMatchObject({ request_id: id, status: 'pending_approval' });
    expect(retry.body.message).toContain(`already waits as request ${id}`);
    // The module's pkcs11_sign for the same digest, key and inputs is the same request.
    const viaModule = await pkcs11Sign('release 2.0');
    expect(viaModule.status).toBe(202);
    expect(viaModule.body.request_id).toBe(id);
    expect(await requestsFor('release 2.0')).toEqual([{ id, status: 'pending_approval' }]);
    // One entry for the new request; each continuation appends a small `continued` entry, never a second pending.
    expect(await auditOutcomes(id)).toEqual(['sign:pending_approval', 'sign:continued', 'pkcs11_sign:continued']);

    expect((await decide(id, 'approve')).status).toBe(200);
    // A retry that arrives after the approval (the client had given up waiting) gets the signature.
    const late = await sign('release 2.0');
    expect(late.status, JSON.stringify(late.body)).toBe(200);
    expect(late.body.request_id).toBe(id);
    const sig = Buffer.from(late.body.signature as string, 'base64');
    expect(verify('sha256', Buffer.from('release 2.0'), createPublicKey(pem), sig)).toBe(true);
    expect(await requestsFor('release 2.0')).toEqual([{ id, status: 'approved' }]);
  });

  it('does not continue a request of another caller, another digest or other policy inputs', async () => {
    const first = await sign('release 3.0');
    const id = first.body.request_id as string;
    const otherCaller = await sign('release 3.0', otherSigner);
    const otherInputs = await sign('release 3.0', requester, { ...inputs, artifact_version: '1.1' });
    const otherDigest = await sign('release 3.0.1');
    const ids = [otherCaller, otherInputs, otherDigest].map((r) => {
      expect(r.status).toBe(202);
      return r.body.request_id;
    });
    expect(new Set([id, ...ids]).size).toBe(4);
    expect(await requestsFor('release 3.0')).toHaveLength(3);
    // The order a client sends its fields in is no difference in the inputs.
    const reordered = await sign('release 3.0', requester, {
      artifact_version: '1.0',
      project: 'payments',
      environment: 'production',
    });
    expect(reordered.body.request_id).toBe(id);
  });

  it('gets the rejection again at once within the window, with the request id and reason; a new request after', async () => {
    const first = await sign('release 4.0');
    const id = first.body.request_id as string;
    expect((await decide(id, 'reject', 'unreviewed change')).status).toBe(200);

    clock += DEFAULT_APPROVAL_RETRY_WINDOW_MS - 1000;
    const again = await sign('release 4.0');
    expect(again.status).toBe(403);
    expect(again.body).toMatchObject({ error: 'request_rejected', request_id: id });
    expect(again.body.reason).toContain('unreviewed change');
    expect(again.body.reason).toContain(id);
    expect(await requestsFor('release 4.0')).toEqual([{ id, status: 'rejected' }]);
    expect((await auditOutcomes(id)).at(-1)).toBe('sign:continued');

    clock += 2000; // the window has passed: the person may be asked again
    const fresh = await sign('release 4.0');
    expect(fresh.status).toBe(202);
    expect(fresh.body.request_id).not.toBe(id);
    expect(await requestsFor('release 4.0')).toEqual([
      { id, status: 'rejected' },
      { id: fresh.body.request_id, status: 'pending_approval' },
    ]);
  });

  it('opens a new request once the waiting one expired (the person missed it)', async () => {
    const first = await sign('release 5.0');
    const id = first.body.request_id as string;
    clock += LIFETIME_MS + 1;
    const retry = await sign('release 5.0');
    expect(retry.status).toBe(202);
    expect(retry.body.request_id).not.toBe(id);
    expect(await requestsFor('release 5.0')).toEqual([
      { id, status: 'expired' },
      { id: retry.body.request_id, status: 'pending_approval' },
    ]);
    expect(await auditOutcomes(id)).toEqual(['sign:pending_approval', 'approve_sign:expired']);
  });

  it('makes one request of concurrent identical requests', async () => {
    const answers = await Promise.all(Array.from({ length: 8 }, () => sign('release 6.0')));
    for (const a of answers) expect(a.status, JSON.stringify(a.body)).toBe(202);
    const ids = new Set(answers.map((a) => a.body.request_id));
    expect(ids.size).toBe(1);
    const rows = await requestsFor('release 6.0');
    expect(rows).toHaveLength(1);
    const outcomes = await auditOutcomes(rows[0]?.id as string);
    expect(outcomes.filter((o) => o === 'sign:pending_approval')).toHaveLength(1);
    expect(outcomes.filter((o) => o === 'sign:continued')).toHaveLength(7);
  });
});

describe('the race between two identical requests', () => {
  it('lets the store hold one waiting request per continuation key; a decided one frees the key', async () => {
    const at = new Date(clock).toISOString();
    const record = (id: string): PendingRequestRecord => ({
      id,
      tenantId: 'rt',
      keyId: 'k',
      algorithm: 'ECDSA_SHA_256',
      hash: digestOf('store level').toString('base64'),
      inputs: '{}',
      requester: 'r',
      rule: 'rule',
      reason: 'why',
      status: 'pending_approval',
      nextStages: [],
      decisions: [],
      signature: null,
      createdAt: at,
      expiresAt: new Date(clock + LIFETIME_MS).toISOString(),
      updatedAt: at,
      continuationKey: 'same-key',
    });
    await svc.store.requests.create(record(randomUUID()));
    await expect(svc.store.requests.create(record(randomUUID()))).rejects.toBeInstanceOf(ConflictError);
    const waiting = await svc.store.requests.findContinuable('rt', 'same-key', null);
    expect(waiting?.status).toBe('pending_approval');
    // Another tenant's request with the same key is not found from this tenant.
    expect(await svc.store.requests.findContinuable('other', 'same-key', null)).toBeUndefined();
    await svc.store.requests.update(waiting?.id as string, 'pending_approval', { status: 'rejected' });
    expect(await svc.store.requests.findContinuable('rt', 'same-key', null)).toBeUndefined();
    expect((await svc.store.requests.findContinuable('rt', 'same-key', at))?.status).toBe('rejected');
    await svc.store.requests.create(record(randomUUID()));
  });

  it('continues the winner when both looked before either opened the request', async () => {
    // Both lookups are held until each request has made its own, so both find nothing and both try to open
    // the request (on SQLite the HTTP requests above may not interleave that way by themselves).
    let arrived = 0;
    let releaseBoth: () => void = () => undefined;
    const bothLooked = new Promise<void>((resolve) => {
      releaseBoth = resolve;
    });
    const requests = new Proxy(svc.store.requests, {
      get(target, prop, receiver) {
        if (prop !== 'findContinuable') {
          const value = Reflect.get(target, prop, receiver);
          return typeof value === 'function' ? value.bind(target) : value;
        }
        return async (...args: Parameters<typeof target.findContinuable>) => {
          const found = await target.findContinuable(...args);
          if (++arrived === 2) releaseBoth();
          if (arrived <= 2) await bothLooked;
          return found;
        };
      },
    });
    const store = new Proxy(svc.store, {
      get(target, prop, receiver) {
        if (prop === 'requests') return requests;
        const value = Reflect.get(target, prop, receiver);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    const signing = new SigningService({ store, keyStore: svc.keyStores, policy, now: () => new Date(clock) });
    const req = {
      tenantId: 'rt',
      callerId: 'racing-caller',
      digest: digestOf('release 8.0'),
      algorithm: 'ECDSA_SHA_256' as const,
      context: { environment: 'production' },
    };
    const outcomes = await Promise.all([signing.sign(req), signing.sign(req)]);
    expect(arrived).toBeGreaterThanOrEqual(3); // the loser looked again after its insert was refused
    const ids = outcomes.map((o) => (o.kind === 'pending' ? o.requestId : 'signed'));
    expect(ids[0]).toBe(ids[1]);
    expect(await requestsFor('release 8.0')).toEqual([{ id: ids[0], status: 'pending_approval' }]);
  });
});

describe('approvals.retryWindowMinutes', () => {
  it('is read from the policy file (0: a retry after a decision opens a new request)', () => {
    const file = join(svc.dataDir, 'policy.yml');
    writeFileSync(file, 'version: 1\napprovals: { retryWindowMinutes: 0 }\n');
    expect(policySettings({ policyFile: file }, svc.store).approvalRetryWindowMs).toBe(0);
    writeFileSync(file, 'version: 1\napprovals: { retryWindowMinutes: 30 }\n');
    expect(policySettings({ policyFile: file }, svc.store).approvalRetryWindowMs).toBe(30 * 60_000);
    writeFileSync(file, 'version: 1\napprovals: { retryWindowMinutes: -1 }\n');
    expect(() => policySettings({ policyFile: file }, svc.store)).toThrow(/retryWindowMinutes/);
  });

  it('at 0 answers a retry after a rejection with a new request', async () => {
    const signing = new SigningService({
      store: svc.store,
      keyStore: svc.keyStores,
      policy,
      now: () => new Date(clock),
      approvalRetryWindowMs: 0,
    });
    const caller = { tenantId: 'rt', callerId: 'window-zero', digest: digestOf('release 7.0') };
    const context = { environment: 'production' };
    const first = await signing.sign({ ...caller, algorithm: 'ECDSA_SHA_256', context });
    expect(first.kind).toBe('pending');
    const id = first.kind === 'pending' ? first.requestId : '';
    // Still waiting: continued whatever the window.
    expect(await signing.sign({ ...caller, algorithm: 'ECDSA_SHA_256', context })).toMatchObject({ requestId: id });
    await signing.decide('rt', id, { id: 'someone-else', role: 'approver' }, 'reject');
    const retry = await signing.sign({ ...caller, algorithm: 'ECDSA_SHA_256', context });
    expect(retry.kind).toBe('pending');
    expect(retry.kind === 'pending' && retry.requestId).not.toBe(id);
  });
});
