// create_tenant, rotate_key and get_public_key on a real SoftHSM token.
import { createPublicKey } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { digestOf, verifyWithNode } from '../helpers/crypto.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

let svc: TestService;
beforeAll(async () => {
  svc = await startTestService();
});
afterAll(async () => svc?.close());

describe('create_tenant', () => {
  it.each([
    ['RSA_2048', 'rsa', 2048],
    ['RSA_3072', 'rsa', 3072],
    ['RSA_4096', 'rsa', 4096],
    ['ECC_NIST_P256', 'ec', 'prime256v1'],
    ['ECC_NIST_P384', 'ec', 'secp384r1'],
    ['ECC_NIST_P521', 'ec', 'secp521r1'],
  ])('creates a tenant with a %s key (201) whose public key is %s %s', async (spec, type, size) => {
    const tenant = `c-${spec.toLowerCase().replaceAll('_', '-')}`;
    const res = await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: tenant, key_spec: spec });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    expect(Object.keys(res.body).sort()).toEqual(['key', 'key_spec', 'tenant_created']);
    expect(res.body.tenant_created).toBe(tenant);
    expect(res.body.key).toMatch(/^[0-9a-f-]{36}$/);
    const admin = await svc.apiKey('admin', tenant);
    const pub = await callAction(svc.app, admin, 'get_public_key', { tenant_id: tenant });
    expect(pub.status).toBe(200);
    expect(pub.body).toMatchObject({
      key_id: res.body.key,
      key_spec: spec,
      key_usage: 'SIGN_VERIFY',
      tenant_id: tenant,
      current: true,
    });
    const key = createPublicKey(pub.body.public_key_pem as string);
    expect(key.asymmetricKeyType).toBe(type);
    if (type === 'rsa') expect(key.asymmetricKeyDetails?.modulusLength).toBe(size);
    else expect(key.asymmetricKeyDetails?.namedCurve).toBe(size);
    expect(pub.body.public_key_pem).toMatch(/^-----BEGIN PUBLIC KEY-----\n/);
  });

  it('answers 400 unsupported_key_spec for a key spec that is not in the contract, and creates nothing', async () => {
    const res = await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'u-ed', key_spec: 'ED25519' });
    expect(res.status).toBe(400);
    expect(res.body.error).toMatch(/invalid_request|unsupported_key_spec/);
    expect(await svc.store.tenants.get('u-ed')).toBeUndefined();
  });

  it('answers 409 tenant_exists for an existing tenant and keeps its key', async () => {
    const first = await callAction(svc.app, svc.operator, 'create_tenant', {
      tenant_id: 'dup',
      key_spec: 'ECC_NIST_P256',
    });
    expect(first.status).toBe(201);
    const again = await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'dup', key_spec: 'RSA_2048' });
    expect(again.status).toBe(409);
    expect(again.body.error).toBe('tenant_exists');
    expect((await svc.store.tenants.get('dup'))?.currentKeyId).toBe(first.body.key);
  });

  it('lets exactly one of two racing creations win, with one key version', async () => {
    const [a, b] = await Promise.all([
      callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'race', key_spec: 'ECC_NIST_P256' }),
      callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'race', key_spec: 'ECC_NIST_P256' }),
    ]);
    expect([a.status, b.status].sort()).toEqual([201, 409]);
    expect(await svc.store.tenants.listKeys('race')).toHaveLength(1);
  });

  it('requires key_spec and a valid tenant id', async () => {
    const missing = await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'nokeyspec' });
    expect(missing.status).toBe(400);
    expect(missing.body.reason).toBe('body.key_spec is required');
    const bad = await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: '../etc', key_spec: 'RSA_2048' });
    expect(bad.status).toBe(400);
    expect(bad.body.reason).toContain('body.tenant_id');
  });
});

describe('rotate_key and key versions', () => {
  it('makes a new version current, keeps the old ones readable and signs with the new one', async () => {
    const created = await callAction(svc.app, svc.operator, 'create_tenant', {
      tenant_id: 'rot',
      key_spec: 'RSA_2048',
    });
    const admin = await svc.apiKey('admin', 'rot');
    const signer = await svc.apiKey('signer', 'rot');
    const oldPub = await callAction(svc.app, admin, 'get_public_key', { tenant_id: 'rot' });

    const rotated = await callAction(svc.app, admin, 'rotate_key', { tenant_id: 'rot' });
    expect(rotated.status, JSON.stringify(rotated.body)).toBe(200);
    expect(rotated.body.key_spec).toBe('RSA_2048');
    const keys = rotated.body.keys as Array<Record<string, unknown>>;
    expect(keys.map((k) => [k.version, k.current])).toEqual([
      [1, false],
      [2, true],
    ]);
    expect(keys[0]?.key_id).toBe(created.body.key);
    expect(keys[1]?.key_id).toBe(rotated.body.key_id);

    // A rotation may change the spec.
    const toEc = await callAction(svc.app, admin, 'rotate_key', { tenant_id: 'rot', key_spec: 'ECC_NIST_P384' });
    expect(toEc.status).toBe(200);
    expect((toEc.body.keys as unknown[]).length).toBe(3);

    const current = await callAction(svc.app, signer, 'get_public_key', { tenant_id: 'rot' });
    expect(current.body).toMatchObject({ key_id: toEc.body.key_id, key_spec: 'ECC_NIST_P384', current: true });
    const old = await callAction(svc.app, signer, 'get_public_key', { tenant_id: 'rot', key_id: created.body.key });
    expect(old.body).toMatchObject({
      key_id: created.body.key,
      current: false,
      public_key_pem: oldPub.body.public_key_pem,
    });

    const message = Buffer.from('after rotation');
    const signed = await callAction(svc.app, signer, 'sign', {
      tenant_id: 'rot',
      algorithm: 'ECDSA_SHA_384',
      hash: digestOf('ECDSA_SHA_384', message).toString('base64'),
    });
    expect(signed.body.key_id).toBe(toEc.body.key_id);
    const sig = Buffer.from(signed.body.signature as string, 'base64');
    expect(verifyWithNode('ECDSA_SHA_384', current.body.public_key_pem as string, message, sig)).toBe(true);
  });

  it('answers 404 for unknown tenants and key versions', async () => {
    const admin = await svc.apiKey('admin', 'ghost');
    const tenant = await callAction(svc.app, admin, 'get_public_key', { tenant_id: 'ghost' });
    expect(tenant.status).toBe(404);
    expect(tenant.body.error).toBe('tenant_not_found');
    const rotate = await callAction(svc.app, admin, 'rotate_key', { tenant_id: 'ghost' });
    expect(rotate.body.error).toBe('tenant_not_found');
    await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'has-key', key_spec: 'ECC_NIST_P256' });
    const a2 = await svc.apiKey('admin', 'has-key');
    const key = await callAction(svc.app, a2, 'get_public_key', { tenant_id: 'has-key', key_id: 'nope' });
    expect(key.status).toBe(404);
    expect(key.body.error).toBe('key_not_found');
  });

  it('does not let a tenant read another tenant key version by id', async () => {
    const a = await callAction(svc.app, svc.operator, 'create_tenant', {
      tenant_id: 'iso-a',
      key_spec: 'ECC_NIST_P256',
    });
    await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'iso-b', key_spec: 'ECC_NIST_P256' });
    const adminB = await svc.apiKey('admin', 'iso-b');
    const res = await callAction(svc.app, adminB, 'get_public_key', { tenant_id: 'iso-b', key_id: a.body.key });
    expect(res.status).toBe(404);
  });
});
