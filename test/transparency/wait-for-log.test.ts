// `Prefer: wait-for-log` on POST /v1/sign (src/api/log-proof-preference.ts) with the real service (SQLite, SoftHSM,
// the integrator at its defaults): the answer carries a C2SP tlog-proof of the signature's own entry, checked here
// with the independent RFC 9162 verifier and node:crypto against the published vkey; many waiting requests are all
// answered; a log that does not publish in time answers the signature without a proof. The same on
// POST /v1/sign_batch (a proof in each signed item) and on KMS Sign through the AWS SDK for JavaScript (the proof in
// the Signbridge-Log-Proof header, since the body is KMS's own JSON).
import { createHash, verify } from 'node:crypto';
import { KMSClient, SignCommand } from '@aws-sdk/client-kms';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAwsApiKey } from '../../src/auth/aws-credentials/aws-credentials.js';
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

/**
 * The tlog-proof read as c2sp.org/tlog-proof says, checked against the vkey; its entry's fields (with `batchItem`,
 * the item a batch's signature carries in `extra` beside the entry: docs/transparency.md, "Proof files").
 */
function checkedProof(text: string, index: number, batchItem = false): Record<string, unknown> {
  const cut = text.indexOf('\n\n');
  const lines = text.slice(0, cut).split('\n');
  expect(lines[0]).toBe('c2sp.org/tlog-proof@v1');
  expect(lines[2]).toBe(`index ${index}`);
  const extra = Buffer.from((lines[1] as string).replace(/^extra /, ''), 'base64');
  const item = batchItem ? (JSON.parse(extra.toString()) as { batch_item: unknown; entry: string }) : undefined;
  const entry = item ? Buffer.from(item.entry, 'base64') : extra;
  const checkpoint = verifyCheckpoint(text.slice(cut + 2), vkey);
  const proof = lines.slice(3).map((l) => Buffer.from(l, 'base64'));
  expect(refVerifyInclusion(refLeaf(entry), index, checkpoint.size, proof, checkpoint.root)).toBe(true);
  const fields = JSON.parse(entry.toString()) as Record<string, unknown>;
  return item ? { ...fields, batchItem: item.batch_item } : fields;
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

describe('Prefer: wait-for-log on sign_batch and KMS Sign', () => {
  it("sign_batch: each signed item carries the tlog-proof of its batch's entry with its item, all against one checkpoint", async () => {
    const hashes = [0, 1, 2].map((i) => createHash('sha256').update(`batch item ${i}`).digest('base64'));
    const res = await svc.app.inject({
      method: 'POST',
      url: '/v1/sign_batch',
      headers: { authorization: `Bearer ${signer}`, prefer: 'wait-for-log; wait=30' },
      payload: { action: 'sign_batch', tenant_id: TENANT, algorithm: 'ECDSA_SHA_256', hashes },
    });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.headers['preference-applied']).toBe('wait-for-log');
    const results = res.json().results as Array<{ signature: string; log_index: number; log_proof?: string }>;
    expect(results).toHaveLength(3);
    const checkpoints = new Set<string>();
    for (const [i, item] of results.entries()) {
      const entry = checkedProof(item.log_proof as string, item.log_index, true);
      expect(entry.seq).toBe(item.log_index + 1);
      // The item names its signature (its path to the entry's root: test/transparency/batch-item-proof.test.ts).
      expect(entry.batchItem).toMatchObject({
        index: i,
        digest: hashes[i],
        signature_sha256: createHash('sha256').update(Buffer.from(item.signature, 'base64')).digest('hex'),
      });
      checkpoints.add((item.log_proof as string).slice((item.log_proof as string).indexOf('\n\n') + 2));
    }
    expect(checkpoints.size).toBe(1);
    // Without the preference: the batch as always, no proofs.
    const plain = await callAction(svc.app, signer, 'sign_batch', {
      tenant_id: TENANT,
      algorithm: 'ECDSA_SHA_256',
      hashes,
    });
    expect(plain.status).toBe(200);
    expect((plain.body.results as Array<Record<string, unknown>>)[0]?.log_proof).toBeUndefined();
  });

  it('KMS Sign (@aws-sdk/client-kms, a Prefer header added before SigV4): the proof in Signbridge-Log-Proof', async () => {
    const made = await createAwsApiKey(svc.store, svc.keyStore, 'signer', TENANT, 'wait-for-log');
    const endpoint = await svc.app.listen({ host: '127.0.0.1', port: 0 });
    const kms = new KMSClient({
      endpoint,
      region: 'eu-west-1',
      credentials: { accessKeyId: made.accessKeyId, secretAccessKey: made.secretAccessKey },
      maxAttempts: 1,
    });
    let headers: Record<string, string> = {};
    // In the build step, before the signing step: the header is signed with the rest, as a caller would add it.
    kms.middlewareStack.add(
      (next) => async (args) => {
        (args.request as { headers: Record<string, string> }).headers.prefer = 'wait-for-log, wait=30';
        const out = await next(args);
        headers = (out.response as { headers: Record<string, string> }).headers;
        return out;
      },
      { step: 'build', name: 'preferWaitForLog' },
    );
    try {
      const message = Buffer.from('a container image manifest');
      const signed = await kms.send(
        new SignCommand({ KeyId: `alias/${TENANT}`, Message: message, SigningAlgorithm: 'ECDSA_SHA_256' }),
      );
      const signature = Buffer.from(signed.Signature as Uint8Array);
      expect(verify('sha256', message, publicKeyPem, signature)).toBe(true);
      expect(headers['preference-applied']).toBe('wait-for-log');
      const index = Number(headers['signbridge-log-index']);
      const proof = Buffer.from(headers['signbridge-log-proof'] as string, 'base64').toString('utf8');
      const entry = checkedProof(proof, index);
      expect(entry.tenant_id).toBe(TENANT);
      expect((entry.details as { signature_sha256: string }).signature_sha256).toBe(
        createHash('sha256').update(signature).digest('hex'),
      );
    } finally {
      kms.destroy();
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

  it('reads wait-for-log=witnessed (RFC 7240 token=value), in any case, with or without quotes', async () => {
    const { logPreferenceOf } = await import('../../src/api/log-proof-preference.js');
    expect(logPreferenceOf('wait-for-log')).toEqual({ waitMs: 10_000, witnessed: false });
    expect(logPreferenceOf('wait-for-log=witnessed, wait=20')).toEqual({ waitMs: 20_000, witnessed: true });
    expect(logPreferenceOf('Wait-For-Log="Witnessed"; wait=3')).toEqual({ waitMs: 3_000, witnessed: true });
    expect(logPreferenceOf('respond-async, wait-for-log=other')).toEqual({ waitMs: 10_000, witnessed: false });
    expect(logPreferenceOf('wait-for-log-witnessed')).toBeUndefined();
  });
});
