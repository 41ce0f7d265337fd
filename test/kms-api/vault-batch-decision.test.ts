// Vault transit's sign with batch_input is one sign_batch request (issue 45): the items that decode get one policy
// decision and one velocity count, then each is signed with its own `signed` entry (via the vault-transit door); an
// item that does not decode fails alone in its place. Denied, every item carries the denial and nothing is signed;
// held, the batch is one request for all its digests, approved once, and the same call sent again collects it whole
// (with the RSA PSS salt it asked for). hvac (Debian's python3-hvac) sends each call: its sign_data knows no
// batch_input, so the body goes through hvac's own adapter. On SQLite, and on PostgreSQL with
// SIGNBRIDGE_TEST_STORE=postgres.
import { createHash, createPublicKey, constants as cryptoConstants, verify } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PolicyEngine, PolicyInput } from '../../src/policy/policy.js';
import { hvacMissing, runHvac } from '../helpers/hvac.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

const missing = hvacMissing();

/** How many times the service asked the policy, per tenant: its decisions and its velocity limits (one per count). */
const decisions = new Map<string, number>();
const velocityCounts = new Map<string, number>();
const bump = (counts: Map<string, number>, tenant: string) => counts.set(tenant, (counts.get(tenant) ?? 0) + 1);

/** Tenant b-deny is denied, b-held and b-held-rsa wait for approval, b-ec is allowed. */
const policy: PolicyEngine = {
  async evaluate(input: PolicyInput) {
    bump(decisions, input.tenantId);
    if (input.tenantId === 'b-deny') {
      return { outcome: 'deny', rule: 'vuln-block', reason: 'the artifact has a critical vulnerability' };
    }
    if (input.tenantId.startsWith('b-held')) {
      return { outcome: 'pending_approval', rule: 'two-person', reason: 'needs a second person' };
    }
    return { outcome: 'allow', rule: 'default', reason: 'allowed' };
  },
  velocityLimits(tenantId: string) {
    bump(velocityCounts, tenantId);
    return undefined;
  },
};

let svc: TestService;
let url: string;
const signers: Record<string, string> = {};
const pems: Record<string, string> = {};
const TENANTS = {
  'b-ec': 'ECC_NIST_P256',
  'b-deny': 'ECC_NIST_P256',
  'b-held': 'ECC_NIST_P256',
  'b-held-rsa': 'RSA_2048',
} as const;

beforeAll(async () => {
  if (missing) return;
  svc = await startTestService({ policy, kmsApi: { enabled: true, heldWaitMs: 0, vaultMount: 'transit' } });
  url = await svc.app.listen({ host: '127.0.0.1', port: 0 });
  for (const [tenant, spec] of Object.entries(TENANTS)) {
    const made = await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: tenant, key_spec: spec });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    signers[tenant] = await svc.apiKey('signer', tenant);
    const admin = await svc.apiKey('admin', tenant);
    pems[tenant] = (await callAction(svc.app, admin, 'get_public_key', { tenant_id: tenant })).body
      .public_key_pem as string;
  }
}, 120_000);
afterAll(async () => svc?.close());

const b64 = (data: Buffer | string) => Buffer.from(data).toString('base64');
const sigBytes = (text: string) => Buffer.from(text.split(':')[2] as string, 'base64');
const messages = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix} ${i}`);

/** One transit sign call with batch_input, through hvac's adapter; its batch_results. */
async function signBatch(tenant: string, json: Record<string, unknown>) {
  const [result] = await runHvac(url, signers[tenant] as string, [
    { method: 'post', path: `/v1/transit/sign/${tenant}`, json },
  ]);
  expect(result?.error, JSON.stringify(result?.error)).toBeUndefined();
  return result?.ok.data.batch_results as Array<Record<string, unknown>>;
}

async function entriesOf(tenant: string) {
  const entries = await svc.store.audit.read(0, 1_000_000);
  return entries.filter((e) => e.tenantId === tenant);
}

describe.skipIf(missing)('Vault transit batch_input: one decision per batch', () => {
  it('a batch of 5 is one policy decision and one velocity count, 5 signed entries; a bad item fails alone', async () => {
    const texts = messages('batch item', 5);
    const batchInput = [
      ...texts.slice(0, 2).map((t, i) => ({ input: b64(t), reference: `r${i}` })),
      { input: 'not base64!', reference: 'bad' },
      ...texts.slice(2).map((t, i) => ({ input: b64(t), reference: `r${i + 2}` })),
    ];
    const results = await signBatch('b-ec', { batch_input: batchInput });
    // Before issue 45 every item was a sign request of its own: 5 decisions and 5 velocity counts.
    expect(decisions.get('b-ec')).toBe(1);
    expect(velocityCounts.get('b-ec')).toBe(1);
    expect(results).toHaveLength(6);
    expect(results[2]).toEqual({ error: 'unable to decode batch_input[2].input as base64', reference: 'bad' });
    const key = createPublicKey(pems['b-ec'] as string);
    const signed = results.filter((_, i) => i !== 2) as Array<{ signature: string; log_index: number }>;
    for (const [i, r] of signed.entries()) {
      expect(r).toMatchObject({ key_version: 1, reference: `r${i}` });
      expect(verify('sha256', Buffer.from(texts[i] as string), key, sigBytes(r.signature))).toBe(true);
      const [entry] = await svc.store.audit.read(r.log_index, 1);
      expect(entry).toMatchObject({ tenantId: 'b-ec', outcome: 'signed' });
      expect(entry?.details.via).toEqual({ api: 'vault-transit', api_key_id: signers['b-ec']?.split('_')[1] });
      // The batch's one entry holds each signature as an item, its digest with it.
      const items = await svc.store.signatures.batchItems(r.log_index + 1);
      expect(items[i]?.digest.toString('base64')).toBe(
        b64(
          createHash('sha256')
            .update(texts[i] as string)
            .digest(),
        ),
      );
    }
    // The five are one batch: one `signed` entry.
    const entries = await entriesOf('b-ec');
    expect(
      entries.filter((e) => e.outcome === 'signed').map((e) => (e.details.batch as { signed: number }).signed),
    ).toEqual([5]);
  });

  it('a denied batch: one decision, every decodable item carries the denial, nothing signed', async () => {
    const results = await signBatch('b-deny', {
      batch_input: [{ input: b64('one') }, { input: '***' }, { input: b64('two'), reference: 'x' }],
    });
    expect(decisions.get('b-deny')).toBe(1);
    expect(results[0]?.error).toMatch(/denied by signbridge policy: vuln-block: the artifact has a critical/);
    expect(results[1]?.error).toBe('unable to decode batch_input[1].input as base64');
    expect(results[2]).toEqual({ error: results[0]?.error, reference: 'x' });
    const entries = await entriesOf('b-deny');
    expect(entries.filter((e) => e.outcome === 'signed')).toHaveLength(0);
    expect(entries.filter((e) => e.outcome === 'denied')).toHaveLength(1);
  });

  it('a held batch is one request: approved once, the same call collects every signature', async () => {
    const texts = messages('held item', 3);
    const call = { batch_input: texts.map((t) => ({ input: b64(t) })) };
    const held = await signBatch('b-held', call);
    expect(decisions.get('b-held')).toBe(1);
    const ids = held.map((r) => /signing request ([0-9a-f-]{36}) is pending_approval/.exec(r.error as string)?.[1]);
    expect(ids[0], JSON.stringify(held)).toBeDefined();
    expect(new Set(ids)).toEqual(new Set([ids[0]]));
    const request = await svc.store.requests.get('b-held', ids[0] as string);
    expect(request?.batch?.hashes).toEqual(texts.map((t) => b64(createHash('sha256').update(t).digest())));
    const approver = await svc.apiKey('approver', 'b-held');
    const approved = await callAction(svc.app, approver, 'approve_sign', { tenant_id: 'b-held', request_id: ids[0] });
    expect(approved.status, JSON.stringify(approved.body)).toBe(200);
    const again = await signBatch('b-held', call);
    const key = createPublicKey(pems['b-held'] as string);
    for (const [i, r] of again.entries()) {
      expect(verify('sha256', Buffer.from(texts[i] as string), key, sigBytes(r.signature as string))).toBe(true);
      const [entry] = await svc.store.audit.read(r.log_index as number, 1);
      expect(entry?.details).toMatchObject({ via: { api: 'vault-transit' }, batch: { id: ids[0], signed: 3 } });
    }
    expect((await entriesOf('b-held')).filter((e) => e.outcome === 'signed')).toHaveLength(1);
  });

  it('a held RSA PSS batch is signed at its approval with the salt length the call asked for', async () => {
    const texts = messages('salted item', 2);
    const call = { salt_length: '20', signature_algorithm: 'pss', batch_input: texts.map((t) => ({ input: b64(t) })) };
    const held = await signBatch('b-held-rsa', call);
    const requestId = /signing request ([0-9a-f-]{36})/.exec(held[0]?.error as string)?.[1];
    expect(requestId, JSON.stringify(held)).toBeDefined();
    expect((await svc.store.requests.get('b-held-rsa', requestId as string))?.pssSaltLength).toBe(20);
    const approver = await svc.apiKey('approver', 'b-held-rsa');
    const approved = await callAction(svc.app, approver, 'approve_sign', {
      tenant_id: 'b-held-rsa',
      request_id: requestId,
    });
    expect(approved.status, JSON.stringify(approved.body)).toBe(200);
    const again = await signBatch('b-held-rsa', call);
    const key = createPublicKey(pems['b-held-rsa'] as string);
    for (const [i, r] of again.entries()) {
      const signature = sigBytes(r.signature as string);
      const pss = (saltLength: number) => ({ key, padding: cryptoConstants.RSA_PKCS1_PSS_PADDING, saltLength });
      expect(verify('sha256', Buffer.from(texts[i] as string), pss(20), signature)).toBe(true);
      expect(verify('sha256', Buffer.from(texts[i] as string), pss(32), signature)).toBe(false);
    }
  });
});
