// Issue 31: an approval sent again by the same approver with the same verdict (a client that lost the answer, e.g.
// to a kill -9 of the instance after the decision committed, and retried) gets the first answer again: 200 with the
// same signature for the last approval, the same status for a stage approval or a rejection, and nothing is decided,
// audited or told of twice. Another approver, or the opposite verdict, is still 409. The crash itself, with a real
// server process: test/cli/approve-retry-kill.test.ts. Over HTTP with the real rules engine and SoftHSM; on SQLite,
// and on PostgreSQL when the API tests run there (SIGNBRIDGE_TEST_STORE=postgres).
import { createHash, createPublicKey, verify } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parsePolicyDocument } from '../../src/policy/policy-file.js';
import { RulesPolicyEngine } from '../../src/policy/rules-engine.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

const policy = new RulesPolicyEngine(
  parsePolicyDocument(
    'version: 1\nrules:\n  environments:\n    requireApproval: [production]\n    attested: [enclave]\n',
    'approve-retry-policy',
  ),
);

let svc: TestService;
let requester: string;
let approver: string;
let approver2: string;
let reviewer: string;
let pem: string;

beforeAll(async () => {
  svc = await startTestService({ policy });
  await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'ar', key_spec: 'ECC_NIST_P256' });
  requester = await svc.apiKey('signer', 'ar');
  approver = await svc.apiKey('approver', 'ar');
  approver2 = await svc.apiKey('approver', 'ar');
  reviewer = await svc.apiKey('security_reviewer', 'ar');
  pem = (await callAction(svc.app, approver, 'get_public_key', { tenant_id: 'ar' })).body.public_key_pem as string;
}, 60_000);
afterAll(async () => svc?.close());

const digestOf = (m: string) => createHash('sha256').update(m).digest();

async function hold(message: string, extra: Record<string, unknown> = { environment: 'production' }) {
  const res = await callAction(svc.app, requester, 'sign', {
    tenant_id: 'ar',
    algorithm: 'ECDSA_SHA_256',
    hash: digestOf(message).toString('base64'),
    ...extra,
  });
  expect(res.status, JSON.stringify(res.body)).toBe(202);
  return res.body.request_id as string;
}

const decide = (token: string, requestId: string, extra: Record<string, unknown> = {}) =>
  callAction(svc.app, token, 'approve_sign', { tenant_id: 'ar', request_id: requestId, ...extra });

/** What the request left behind: its approve_sign audit entries, its events, the signatures of its digest. */
async function traces(requestId: string, message: string) {
  const audit = (await svc.store.audit.read(0, 1_000_000)).filter(
    (e) => e.action === 'approve_sign' && (e.details as Record<string, unknown>).request_id === requestId,
  );
  const events = await svc.run<{ type: string }>(
    sql`SELECT type FROM event_outbox WHERE data LIKE ${`%"request_id":"${requestId}"%`} ORDER BY seq`,
  );
  const hash = digestOf(message).toString('base64');
  const signatures = (await svc.store.signatures.list('ar', 100_000)).filter((s) => s.hash === hash);
  return { audit: audit.map((e) => e.outcome), events: events.map((e) => e.type), signatures: signatures.length };
}

describe('approve_sign sent again by the same approver', () => {
  it('answers the last approval again: 200, the same body and signature, nothing recorded twice', async () => {
    const id = await hold('retried approval');
    const first = await decide(approver, id);
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    expect(first.body.status).toBe('approved');
    const after = await traces(id, 'retried approval');
    expect(after).toEqual({
      audit: ['signed'],
      events: ['signature.pending', 'signature.approved', 'signature.signed'],
      signatures: 1,
    });

    const again = await decide(approver, id);
    expect(again.status, JSON.stringify(again.body)).toBe(200);
    expect(again.body).toEqual(first.body);
    expect(again.headers['signbridge-log-index']).toBe(first.headers['signbridge-log-index']);
    const signature = Buffer.from(again.body.signature as string, 'base64');
    expect(verify('sha256', Buffer.from('retried approval'), createPublicKey(pem), signature)).toBe(true);
    // A third time, with a reason this time: still the same answer, still nothing new.
    expect((await decide(approver, id, { decision: 'approve', reason: 'again' })).body).toEqual(first.body);
    expect(await traces(id, 'retried approval')).toEqual(after);
  });

  it('still refuses another approver, and the opposite verdict, with 409', async () => {
    const id = await hold('decided once');
    expect((await decide(approver, id)).status).toBe(200);
    const before = await traces(id, 'decided once');
    const other = await decide(approver2, id);
    expect(other.status).toBe(409);
    expect(other.body.error).toBe('request_not_pending');
    const opposite = await decide(approver, id, { decision: 'reject', reason: 'changed my mind' });
    expect(opposite.status).toBe(409);
    expect(opposite.body.error).toBe('request_not_pending');
    expect(await traces(id, 'decided once')).toEqual(before);
  });

  it('answers a rejection again with 200 rejected; an approval after it is 409', async () => {
    const id = await hold('rejected once');
    const first = await decide(approver, id, { decision: 'reject', reason: 'not on the calendar' });
    expect(first.status).toBe(200);
    expect(first.body.status).toBe('rejected');
    const before = await traces(id, 'rejected once');
    const again = await decide(approver, id, { decision: 'reject', reason: 'not on the calendar' });
    expect(again.status).toBe(200);
    expect(again.body).toEqual(first.body);
    expect((await decide(approver, id)).status).toBe(409);
    expect((await decide(approver2, id, { decision: 'reject' })).status).toBe(409);
    expect(await traces(id, 'rejected once')).toEqual({ ...before, signatures: 0 });
  });

  it('answers a stage approval again with the stage it moved to, before and after the next stage is decided', async () => {
    const id = await hold('two stages', { environment: 'production', require_tee: true });
    const reviewed = await decide(reviewer, id);
    expect(reviewed.status).toBe(200);
    expect(reviewed.body.status).toBe('pending_approval');
    const retried = await decide(reviewer, id);
    expect(retried.status).toBe(200);
    expect(retried.body).toEqual(reviewed.body);
    expect((await traces(id, 'two stages')).audit).toEqual(['stage_approved']);

    const approved = await decide(approver, id);
    expect(approved.body.status).toBe('approved');
    // The reviewer's retry arrives after the last stage was decided: still its own answer, and no second signature.
    expect((await decide(reviewer, id)).body).toEqual(reviewed.body);
    expect((await decide(approver, id)).body).toEqual(approved.body);
    expect(await traces(id, 'two stages')).toEqual({
      audit: ['stage_approved', 'signed'],
      events: [
        'signature.pending',
        'signature.approved',
        'signature.pending',
        'signature.approved',
        'signature.signed',
      ],
      signatures: 1,
    });
  });
});
