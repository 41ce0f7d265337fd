import { createHash, createPublicKey, verify } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { type TestService, callAction, startTestService } from './helpers/service.js';

let svc: TestService;
beforeAll(async () => {
  svc = await startTestService();
});
afterAll(async () => svc?.close());

it('creates a tenant and signs', async () => {
  const created = await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'acme', key_spec: 'RSA_2048' });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  const signer = await svc.apiKey('signer', 'acme');
  const digest = createHash('sha256').update('hello').digest();
  const signed = await callAction(svc.app, signer, 'sign', { tenant_id: 'acme', hash: digest.toString('base64url') });
  expect(signed.status, JSON.stringify(signed.body)).toBe(200);
  const pub = await callAction(svc.app, signer, 'get_public_key', { tenant_id: 'acme' });
  expect(pub.status).toBe(200);
  const ok = verify('sha256', Buffer.from('hello'), createPublicKey(pub.body.public_key_pem as string), Buffer.from(signed.body.signature as string, 'base64'));
  expect(ok).toBe(true);
});
