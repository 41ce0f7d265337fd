// POST /trial/sign: modes, the published test key, the rate limit, bad input.
import { createHash, createPrivateKey, createPublicKey, verify } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TRIAL_KEY_PATH } from '../../src/trial/trial-signer.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

let svc: TestService;
beforeAll(async () => {
  svc = await startTestService();
});
afterAll(async () => svc?.close());

let nextIp = 1;
/** Each test uses its own client address, so the per-IP limit of one test does not leak into another. */
function trial(payload: unknown, ip = `10.0.0.${nextIp++}`) {
  return svc.app.inject({ method: 'POST', url: '/trial/sign', remoteAddress: ip, payload: payload as object });
}

const trialPublicKey = createPublicKey(createPrivateKey(readFileSync(TRIAL_KEY_PATH, 'utf8')));

describe('trial signing', () => {
  it('mock mode (the default) returns the placeholder, which is no valid signature', async () => {
    const res = await trial({ hash: createHash('sha256').update('m').digest('base64') });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body).toEqual({
      status: 'success',
      mode: 'mock',
      algorithm: 'RSASSA_PKCS1_V1_5_SHA_256',
      signature: expect.stringMatching(/^TRIAL_MOCK_SIG_NOT_CRYPTOGRAPHICALLY_VALID/),
    });
  });

  it('real mode signs with the published RSA-2048 key (512 hex characters, verifiable offline)', async () => {
    const message = Buffer.from('trial message');
    const hash = createHash('sha256').update(message).digest().toString('base64url');
    const res = await trial({ hash, mode: 'real', algorithm: 'RSASSA_PKCS1_V1_5_SHA_256' });
    expect(res.statusCode).toBe(200);
    const { signature, mode } = res.json();
    expect(mode).toBe('real');
    expect(signature).toMatch(/^[0-9a-f]{512}$/);
    expect(trialPublicKey.asymmetricKeyDetails).toMatchObject({ modulusLength: 2048, publicExponent: 65537n });
    expect(verify('sha256', message, trialPublicKey, Buffer.from(signature, 'hex'))).toBe(true);
    expect(verify('sha256', Buffer.from('other'), trialPublicKey, Buffer.from(signature, 'hex'))).toBe(false);
  });

  it.each([
    ['no hash', {}],
    ['a short hash', { hash: Buffer.alloc(20).toString('base64') }],
    ['a bad mode', { hash: Buffer.alloc(32).toString('base64'), mode: 'live' }],
    ['another algorithm', { hash: Buffer.alloc(32).toString('base64'), algorithm: 'ECDSA_SHA_256' }],
    ['an unknown field', { hash: Buffer.alloc(32).toString('base64'), tenant_id: 'x' }],
  ])('answers %s with 400 and an ErrorResponse', async (_name, payload) => {
    const res = await trial(payload);
    expect(res.statusCode).toBe(400);
    expect(res.json()).toEqual({ error: expect.stringMatching(/^invalid_/), reason: expect.any(String) });
  });

  it('allows 10 requests per hour per client address, then 429 with Retry-After and an ErrorResponse', async () => {
    const payload = { hash: Buffer.alloc(32, 3).toString('base64') };
    for (let i = 0; i < 10; i++) expect((await trial(payload, '192.0.2.7')).statusCode).toBe(200);
    const limited = await trial(payload, '192.0.2.7');
    expect(limited.statusCode).toBe(429);
    expect(Number(limited.headers['retry-after'])).toBeGreaterThan(3000);
    expect(limited.json()).toEqual({ error: 'rate_limited', reason: expect.stringContaining('10 requests') });
    // Another address is not affected.
    expect((await trial(payload, '192.0.2.8')).statusCode).toBe(200);
  });

  it('the trial key is not reachable from production: tenants get their own keys and the trial needs no auth', async () => {
    await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'prod', key_spec: 'RSA_2048' });
    const signer = await svc.apiKey('signer', 'prod');
    const pub = await callAction(svc.app, signer, 'get_public_key', { tenant_id: 'prod' });
    const trialPem = trialPublicKey.export({ type: 'spki', format: 'pem' });
    expect(pub.body.public_key_pem).not.toBe(trialPem);
    const message = Buffer.from('prod');
    const signed = await callAction(svc.app, signer, 'sign', {
      tenant_id: 'prod',
      hash: createHash('sha256').update(message).digest('base64'),
    });
    expect(verify('sha256', message, trialPublicKey, Buffer.from(signed.body.signature as string, 'base64'))).toBe(
      false,
    );
  });
});
