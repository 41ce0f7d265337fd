// API keys, roles and tenant isolation.
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REDACT_PATHS } from '../../src/app.js';
import { ACTION_ROLES, ACTIONS, ROLES } from '../../src/store/records/roles.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

const logLines: string[] = [];
const logStream = new Writable({
  write(chunk, _enc, cb) {
    logLines.push(chunk.toString());
    cb();
  },
});

let svc: TestService;
const hash = Buffer.alloc(32, 7).toString('base64');
const ecSign = { hash, algorithm: 'ECDSA_SHA_256' };

beforeAll(async () => {
  svc = await startTestService({
    logger: { level: 'trace', stream: logStream, redact: { paths: REDACT_PATHS, censor: '[redacted]' } },
  });
  for (const t of ['alpha', 'beta']) {
    const res = await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: t, key_spec: 'ECC_NIST_P256' });
    expect(res.status).toBe(201);
  }
});
afterAll(async () => svc?.close());

describe('authentication', () => {
  it('answers 401 with an ErrorResponse when the key is missing, malformed, unknown or revoked', async () => {
    const signer = await svc.apiKey('signer', 'alpha');
    const [, id] = /^sbk_([0-9a-f]{16})_/.exec(signer) as RegExpExecArray;
    const wrongSecret = signer.slice(0, -4) + (signer.endsWith('AAAA') ? 'BBBB' : 'AAAA');
    const cases: Array<[string, Record<string, string>]> = [
      ['missing', {}],
      ['not bearer', { authorization: `Basic ${signer}` }],
      ['malformed', { authorization: 'Bearer not-a-key' }],
      ['wrong secret', { authorization: `Bearer ${wrongSecret}` }],
      ['unknown id', { authorization: `Bearer sbk_0000000000000000_${'A'.repeat(43)}` }],
      [
        'SigV4-style',
        { authorization: 'AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/execute-api/aws4_request' },
      ],
    ];
    for (const [name, headers] of cases) {
      const res = await svc.app.inject({
        method: 'POST',
        url: '/v1/sign',
        headers,
        payload: { action: 'sign', tenant_id: 'alpha', ...ecSign },
      });
      expect(res.statusCode, name).toBe(401);
      expect(res.json(), name).toEqual({ error: 'unauthorized', reason: expect.any(String) });
    }
    expect((await callAction(svc.app, signer, 'sign', { tenant_id: 'alpha', ...ecSign })).status).toBe(200);
    expect(await svc.store.apiKeys.revoke(id as string, new Date().toISOString())).toBe(true);
    const revoked = await callAction(svc.app, signer, 'sign', { tenant_id: 'alpha', ...ecSign });
    expect(revoked.status).toBe(401);
    expect(revoked.body.reason).toContain('revoked');
  });

  it('stores only a hash of the secret', async () => {
    const token = await svc.apiKey('signer', 'alpha');
    const id = token.slice(4, 20);
    const record = await svc.store.apiKeys.get(id);
    expect(record?.secretHash).toMatch(/^[0-9a-f]{64}$/);
    expect(JSON.stringify(record)).not.toContain(token.slice(21));
  });

  it('never writes API keys to the log', async () => {
    const token = await svc.apiKey('signer', 'alpha');
    expect((await callAction(svc.app, token, 'sign', { tenant_id: 'alpha', ...ecSign })).status).toBe(200);
    await callAction(svc.app, `${token}x`, 'sign', { tenant_id: 'alpha', ...ecSign });
    // Fastify's request serializer leaves headers out; should anything log them, redaction still applies.
    svc.app.log.info({ headers: { authorization: `Bearer ${token}` } }, 'headers');
    const log = logLines.join('');
    expect(log).toContain('"authorization":"[redacted]"');
    expect(log).not.toContain(token.slice(21));
  });
});

describe('authorisation: roles and tenants', () => {
  const bodyFor: Record<string, Record<string, unknown>> = {
    sign: ecSign,
    pkcs11_sign: { hash },
    sign_batch: { hashes: [hash] },
    approve_sign: { request_id: '6f1c1c3e-0c7a-4e8e-9a59-8f8f6f0f1a2b' },
    create_tenant: { key_spec: 'ECC_NIST_P256' },
    get_import_params: {
      key_spec: 'RSA_2048',
      wrapping_algorithm: 'RSAES_OAEP_SHA_256',
      wrapping_key_spec: 'RSA_2048',
    },
    create_exception: { vuln_id: 'GHSA-1', reason: 'r', expires_at: new Date(Date.now() + 86_400_000).toISOString() },
    revoke_exception: { exception_id: '6f1c1c3e-0c7a-4e8e-9a59-8f8f6f0f1a2c' },
    import_key: {
      kms_key_id: 'k',
      import_token: 'AAAA',
      encrypted_key_material: 'AAAA',
      expiration_model: 'KEY_MATERIAL_DOES_NOT_EXPIRE',
    },
  };

  it.each(
    ROLES.filter((r) => r !== 'operator'),
  )('a %s key gets 403 on every action its role does not allow', async (role) => {
    const token = await svc.apiKey(role, 'alpha');
    for (const action of ACTIONS.filter((a) => !ACTION_ROLES[a].includes(role))) {
      const tenant = action === 'create_tenant' ? 'gamma' : 'alpha';
      const res = await callAction(svc.app, token, action, { tenant_id: tenant, ...bodyFor[action] });
      expect(res.status, `${role} ${action}`).toBe(403);
      expect(res.body.error).toBe('forbidden');
      expect(res.body.reason).toContain(role);
    }
    expect(await svc.store.tenants.get('gamma')).toBeUndefined();
  });

  it('an operator key can create tenants but cannot sign or read a tenant key', async () => {
    for (const action of ['sign', 'pkcs11_sign', 'get_public_key', 'rotate_key'] as const) {
      const res = await callAction(svc.app, svc.operator, action, { tenant_id: 'alpha', ...bodyFor[action] });
      expect(res.status, action).toBe(403);
    }
  });

  it('a tenant key used on another tenant gets 403 and nothing is signed', async () => {
    const signerA = await svc.apiKey('signer', 'alpha');
    const adminA = await svc.apiKey('admin', 'alpha');
    const before = await svc.store.signatures.list('beta', 100);
    for (const [token, action] of [
      [signerA, 'sign'],
      [signerA, 'pkcs11_sign'],
      [signerA, 'get_public_key'],
      [adminA, 'rotate_key'],
    ] as const) {
      const res = await callAction(svc.app, token, action, { tenant_id: 'beta', ...bodyFor[action] });
      expect(res.status, action).toBe(403);
      expect(res.body.reason).toContain('another tenant');
    }
    expect(await svc.store.signatures.list('beta', 100)).toEqual(before);
    expect(await svc.store.tenants.listKeys('beta')).toHaveLength(1);
  });

  it('each role reaches the actions it is allowed (no 401/403)', async () => {
    for (const role of ROLES.filter((r) => r !== 'operator')) {
      const token = await svc.apiKey(role, 'alpha');
      for (const action of ACTIONS.filter((a) => ACTION_ROLES[a].includes(role))) {
        const res = await callAction(svc.app, token, action, { tenant_id: 'alpha', ...bodyFor[action] });
        expect([401, 403], `${role} ${action}: ${JSON.stringify(res.body)}`).not.toContain(res.status);
      }
    }
  });
});
