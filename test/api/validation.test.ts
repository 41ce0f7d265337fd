// Bad input gets a clear 4xx ErrorResponse and changes nothing.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

let svc: TestService;
let signer: string;
let admin: string;
const hash = Buffer.alloc(32, 1).toString('base64');

beforeAll(async () => {
  svc = await startTestService({ bodyLimit: 64 * 1024 });
  await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'v', key_spec: 'RSA_2048' });
  signer = await svc.apiKey('signer', 'v');
  admin = await svc.apiKey('admin', 'v');
});
afterAll(async () => svc?.close());

async function raw(payload: string, headers: Record<string, string> = {}, url = '/v1/sign') {
  const res = await svc.app.inject({
    method: 'POST',
    url,
    headers: { authorization: `Bearer ${signer}`, 'content-type': 'application/json', ...headers },
    payload,
  });
  return { status: res.statusCode, body: res.json() };
}

describe('request envelope', () => {
  it('answers malformed JSON with 400 invalid_json', async () => {
    const res = await raw('{"action":"sign",');
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('invalid_json');
  });

  it('answers an empty JSON body with 400 invalid_json', async () => {
    const res = await raw('');
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('invalid_json');
  });

  it('answers a non-object body with 400 naming the body', async () => {
    const res = await raw('[1,2]');
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: 'invalid_request', reason: 'body must be object' });
  });

  it('answers an oversized body with 413 payload_too_large', async () => {
    const res = await raw(JSON.stringify({ action: 'sign', tenant_id: 'v', hash, sbom: 'x'.repeat(70 * 1024) }));
    expect(res.status).toBe(413);
    expect(res.body.error).toBe('payload_too_large');
  });

  it('answers another content type with 415', async () => {
    const res = await raw('action=sign', { 'content-type': 'application/x-www-form-urlencoded' });
    expect(res.status).toBe(415);
    expect(res.body.error).toBe('unsupported_media_type');
  });

  it('requires the body action to equal the path action', async () => {
    const res = await raw(JSON.stringify({ action: 'pkcs11_sign', tenant_id: 'v', hash }));
    expect(res.status).toBe(400);
    expect(res.body).toEqual({
      error: 'action_mismatch',
      reason: 'body.action is pkcs11_sign but the path is /v1/sign',
    });
  });

  it('accepts version v1 and rejects any other version', async () => {
    expect((await callAction(svc.app, signer, 'sign', { tenant_id: 'v', hash, version: 'v1' })).status).toBe(200);
    const res = await callAction(svc.app, signer, 'sign', { tenant_id: 'v', hash, version: 'v2' });
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('unsupported_version');
  });

  it('answers unknown actions with 404 unknown_action and unknown paths with 404 not_found', async () => {
    const unknown = await callAction(svc.app, signer, 'delete_everything', { tenant_id: 'v' });
    expect(unknown.status).toBe(404);
    expect(unknown.body.error).toBe('unknown_action');
    const v2 = await raw(JSON.stringify({ action: 'sign', tenant_id: 'v', hash }), {}, '/v2/sign');
    expect(v2.status).toBe(404);
    expect(v2.body.error).toBe('not_found');
  });

  it('rejects unknown fields, naming them', async () => {
    const res = await callAction(svc.app, signer, 'sign', { tenant_id: 'v', hash, hsah: hash });
    expect(res.status).toBe(400);
    expect(res.body.reason).toBe('body.hsah is not a known field');
  });

  it('names the field and the allowed values for a bad enum', async () => {
    const res = await callAction(svc.app, signer, 'sign', { tenant_id: 'v', hash, algorithm: 'RSA_MD5' });
    expect(res.status).toBe(400);
    expect(res.body.reason).toMatch(/^body\.algorithm must be one of: RSASSA_PKCS1_V1_5_SHA_256/);
  });

  it('rejects a wrong type for a policy input', async () => {
    const res = await callAction(svc.app, signer, 'sign', { tenant_id: 'v', hash, require_tee: 'yes' });
    expect(res.status).toBe(400);
    expect(res.body.reason).toBe('body.require_tee must be boolean');
  });

  it('changes nothing when a request is refused', async () => {
    const before = await svc.store.signatures.list('v', 1000);
    await raw('{"action":"sign","tenant_id":"v","hash":');
    await callAction(svc.app, signer, 'sign', { tenant_id: 'v', hash, version: 'v9' });
    expect(await svc.store.signatures.list('v', 1000)).toEqual(before);
  });
});

describe('key import requests are validated before any key store is touched', () => {
  it.each([
    [
      'get_import_params',
      { key_spec: 'RSA_2048', wrapping_algorithm: 'RSAES_OAEP_SHA_256', wrapping_key_spec: 'RSA_4096' },
      'wrapping_algorithm_not_allowed',
    ],
    [
      'import_key',
      {
        kms_key_id: 'k',
        import_token: 'AAAA',
        encrypted_key_material: 'AAAA',
        expiration_model: 'KEY_MATERIAL_EXPIRES',
      },
      'invalid_request',
    ],
  ] as const)('%s answers a 400 with its own code (docs/keys.md), and refuses unknown fields', async (action, body, code) => {
    const token = await svc.apiKey('admin', 'v');
    const res = await callAction(svc.app, token, action, { tenant_id: 'v', ...body });
    expect(res.status).toBe(400);
    expect(res.body.error).toBe(code);
    const bad = await callAction(svc.app, token, action, { tenant_id: 'v', ...body, bogus: 1 });
    expect(bad.status).toBe(400);
    expect(bad.body.reason).toContain('bogus');
  });

  it('validates required fields of approve_sign and import_key before anything else', async () => {
    const approver = await svc.apiKey('approver', 'v');
    const res = await callAction(svc.app, approver, 'approve_sign', { tenant_id: 'v', request_id: 'not-a-uuid' });
    expect(res.status).toBe(400);
    expect(res.body.reason).toContain('body.request_id');
    const missing = await callAction(svc.app, admin, 'import_key', { tenant_id: 'v', kms_key_id: 'k' });
    expect(missing.status).toBe(400);
    expect(missing.body.reason).toBe('body.import_token is required');
  });
});

describe('readiness', () => {
  it('answers 503 naming the part that is down, once the key store is gone', async () => {
    const ready = await svc.app.inject({ method: 'GET', url: '/readyz' });
    expect(ready.json()).toEqual({ status: 'ready', store: 'ok', key_store: 'ok' });
    await svc.keyStore.close();
    const down = await svc.app.inject({ method: 'GET', url: '/readyz' });
    expect(down.statusCode).toBe(503);
    expect(down.json()).toEqual({ status: 'not_ready', store: 'ok', key_store: 'unavailable' });
    const sign = await callAction(svc.app, signer, 'sign', { tenant_id: 'v', hash });
    expect(sign.status).toBe(503);
    expect(sign.body.error).toBe('key_store_unavailable');
  });
});
