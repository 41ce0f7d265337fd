// `Prefer: wait-for-log` on POST /v1/sign (src/api/log-proof-preference.ts) with the real service (SQLite, SoftHSM,
// the integrator at its defaults): the answer carries a C2SP tlog-proof of the signature's own entry, checked here
// with the independent RFC 9162 verifier and node:crypto against the published vkey; many waiting requests are all
// answered; a log that does not publish in time answers the signature without a proof.
import { createHash, verify } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LOG_DEFAULTS } from '../../src/transparency/log-service.js';
import { logGet, parseVkey, type Vkey, verifyCheckpoint } from '../helpers/log-client.js';
import { refLeaf, refVerifyInclusion } from '../helpers/rfc9162-verify.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

const TENANT = 'wl';
let svc: TestService;
let signer: string;
let vkey: Vkey;
let publicKeyPem: string;

async function signPreferring(prefer: string | undefined, message: string) {
  const hash = createHash('sha256').update(message).digest('base64');
  const res = await svc.app.inject({
    method: 'POST',
    url: '/v1/sign',
    headers: { authorization: `Bearer ${signer}`, ...(prefer !== undefined && { prefer }) },
    payload: { action: 'sign', tenant_id: TENANT, algorithm: 'ECDSA_SHA_256', hash },
  });
  expect(res.statusCode, res.body).toBe(200);
  const body = res.json() as { signature: string; log_proof?: string };
  // The signature itself, whatever else the answer carries.
  expect(verify('sha256', Buffer.from(message), publicKeyPem, Buffer.from(body.signature, 'base64'))).toBe(true);
  return { res, body, hash, index: Number(res.headers['signbridge-log-index']) };
}

/** The tlog-proof read as c2sp.org/tlog-proof says, checked against the vkey; its entry's fields. */
function checkedProof(text: string, index: number): Record<string, unknown> {
  const cut = text.indexOf('\n\n');
  const lines = text.slice(0, cut).split('\n');
  expect(lines[0]).toBe('c2sp.org/tlog-proof@v1');
  expect(lines[2]).toBe(`index ${index}`);
  const entry = Buffer.from((lines[1] as string).replace(/^extra /, ''), 'base64');
  const checkpoint = verifyCheckpoint(text.slice(cut + 2), vkey);
  const proof = lines.slice(3).map((l) => Buffer.from(l, 'base64'));
  expect(refVerifyInclusion(refLeaf(entry), index, checkpoint.size, proof, checkpoint.root)).toBe(true);
  return JSON.parse(entry.toString()) as Record<string, unknown>;
}

beforeAll(async () => {
  svc = await startTestService({ log: { ...LOG_DEFAULTS } });
  const created = await callAction(svc.app, svc.operator, 'create_tenant', {
    tenant_id: TENANT,
    key_spec: 'ECC_NIST_P256',
  });
  expect(created.status).toBe(201);
  signer = await svc.apiKey('signer', TENANT);
  const got = await callAction(svc.app, signer, 'get_public_key', { tenant_id: TENANT });
  publicKeyPem = got.body.public_key_pem as string;
  vkey = parseVkey((await logGet(svc.app, '/log/public-key', signer)).text);
}, 60_000);
afterAll(async () => svc?.close());

describe('Prefer: wait-for-log', () => {
  it('answers the signature with the tlog-proof of its own entry, signed by the log key', async () => {
    const { res, body, hash, index } = await signPreferring('wait-for-log', 'release 1');
    expect(res.headers['preference-applied']).toBe('wait-for-log');
    const entry = checkedProof(body.log_proof as string, index);
    expect(entry.seq).toBe(index + 1);
    expect(entry.tenant_id).toBe(TENANT);
    expect((entry.details as { hash: string }).hash).toBe(hash);
    const signature = Buffer.from(body.signature, 'base64');
    expect(createHash('sha256').update(signature).digest('hex')).toBe(
      (entry.details as { signature_sha256: string }).signature_sha256,
    );
  });

  it('without the preference: no proof, no Preference-Applied, the index as always', async () => {
    const { res, body, index } = await signPreferring(undefined, 'release 2');
    expect(body.log_proof).toBeUndefined();
    expect(res.headers['preference-applied']).toBeUndefined();
    expect(Number.isInteger(index)).toBe(true);
    const other = await signPreferring('respond-async, return=minimal', 'release 3');
    expect(other.body.log_proof).toBeUndefined();
  });

  it('answers fifty requests waiting at once, each with the proof of its own entry', async () => {
    const all = await Promise.all(
      Array.from({ length: 50 }, (_, i) => signPreferring('wait-for-log; wait=30', `batch ${i}`)),
    );
    expect(new Set(all.map((a) => a.index)).size).toBe(50);
    for (const { body, index, hash } of all) {
      const entry = checkedProof(body.log_proof as string, index);
      expect((entry.details as { hash: string }).hash).toBe(hash);
    }
  });
});

describe('a log that does not publish in time', () => {
  let quiet: TestService;
  beforeAll(async () => {
    // intervalMs 0: this instance never integrates in the background (another instance would).
    quiet = await startTestService({ log: { ...LOG_DEFAULTS, intervalMs: 0 } });
  }, 60_000);
  afterAll(async () => quiet?.close());

  it('answers the signature after the wait asked for, without a proof', async () => {
    await callAction(quiet.app, quiet.operator, 'create_tenant', { tenant_id: TENANT, key_spec: 'ECC_NIST_P256' });
    const key = await quiet.apiKey('signer', TENANT);
    const started = Date.now();
    const res = await quiet.app.inject({
      method: 'POST',
      url: '/v1/sign',
      headers: { authorization: `Bearer ${key}`, prefer: 'wait-for-log; wait=1' },
      payload: {
        action: 'sign',
        tenant_id: TENANT,
        algorithm: 'ECDSA_SHA_256',
        hash: createHash('sha256').update('x').digest('base64'),
      },
    });
    expect(res.statusCode).toBe(200);
    expect(res.json().signature).toBeTypeOf('string');
    expect(res.json().log_proof).toBeUndefined();
    expect(res.headers['preference-applied']).toBeUndefined();
    // It did wait (a lower bound only: nothing here depends on the machine's speed).
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
  });
});

describe('the Prefer header', () => {
  it('reads wait-for-log with RFC 7240 wait=N as its own preference or as its parameter, capped', async () => {
    const { logWaitOf } = await import('../../src/api/log-proof-preference.js');
    expect(logWaitOf(undefined)).toBeUndefined();
    expect(logWaitOf('return=minimal')).toBeUndefined();
    expect(logWaitOf('Wait-For-Log')).toBe(10_000);
    expect(logWaitOf('wait-for-log, wait=5')).toBe(5_000);
    expect(logWaitOf('wait-for-log; wait=2')).toBe(2_000);
    expect(logWaitOf(['respond-async', 'wait-for-log'])).toBe(10_000);
    expect(logWaitOf('wait-for-log, wait=3600')).toBe(60_000);
    expect(logWaitOf('wait=5')).toBeUndefined();
  });
});
