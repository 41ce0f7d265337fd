// Every refusal of key import, each a 400 with its own code before anything changes (the key stays awaiting
// material and a correct import afterwards still works), plus reimport and the expiry of imported material on a
// clock the test controls.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { KeySpec } from '../../src/crypto/algorithms.js';
import { wrapKeyMaterial } from '../../src/keys/import/client-wrap.js';
import type { WrappingAlgorithm, WrappingKeySpec } from '../../src/keys/key-store.js';
import {
  importKeyMaterial,
  importParams,
  type Material,
  material,
  mlDsaMaterial,
  newTenant,
  signWithTenant,
  verifiesWithOriginal,
} from '../helpers/key-import.js';
import { startTestService, type TestService } from '../helpers/service.js';

let svc: TestService;
let clock = Date.parse('2026-11-23T12:00:00Z');
const now = () => new Date(clock);
beforeAll(async () => {
  svc = await startTestService({ now });
});
afterAll(async () => svc?.close());

let tenants = 0;
const tenant = () => newTenant(svc, `refuse-${++tenants}`);

interface Issued {
  kmsKeyId: string;
  token: string;
  publicKey: Buffer;
}

async function issue(
  t: { id: string; admin: string },
  spec: KeySpec,
  alg: WrappingAlgorithm,
  wks: WrappingKeySpec = 'RSA_2048',
  extra: Record<string, unknown> = {},
): Promise<Issued> {
  const p = await importParams(svc.app, t.admin, t.id, spec, alg, wks, extra);
  expect(p.status, JSON.stringify(p.body)).toBe(200);
  return {
    kmsKeyId: p.body.kms_key_id as string,
    token: p.body.import_token as string,
    publicKey: Buffer.from(p.body.public_key as string, 'base64'),
  };
}

function send(t: { id: string; admin: string }, issued: Issued, blob: Buffer, extra: Record<string, unknown> = {}) {
  return importKeyMaterial(svc.app, t.admin, t.id, {
    kms_key_id: issued.kmsKeyId,
    import_token: issued.token,
    encrypted_key_material: blob.toString('base64'),
    ...extra,
  });
}

/** Still awaiting material: the row and its wrapping key are there, and the tenant's current key did not change. */
async function stillAwaiting(t: { id: string }, issued: Issued, currentBefore: string) {
  const row = await svc.store.keyImports.get(t.id, issued.kmsKeyId);
  expect(row?.wrappingKeyRef).toMatch(/^pkcs11:id=/);
  expect(await svc.store.tenants.getKey(t.id, issued.kmsKeyId)).toBeUndefined();
  expect((await svc.store.tenants.currentKey(t.id))?.id).toBe(currentBefore);
}

async function currentKeyId(t: { id: string }): Promise<string> {
  return (await svc.store.tenants.currentKey(t.id))?.id as string;
}

describe('get_import_params refuses what AWS KMS refuses, and makes nothing', () => {
  it.each([
    ['RSA_2048', 'RSAES_OAEP_SHA_256', 'RSA_4096', /RSA_AES_KEY_WRAP/],
    ['RSA_3072', 'RSAES_OAEP_SHA_1', 'RSA_4096', /RSA_AES_KEY_WRAP/],
    ['ECC_NIST_P521', 'RSAES_OAEP_SHA_256', 'RSA_2048', /RSA_2048/],
    ['ECC_NIST_P521', 'RSAES_OAEP_SHA_1', 'RSA_2048', /RSA_2048/],
  ] as const)('%s with %s under %s', async (spec, alg, wks, reason) => {
    const t = await tenant();
    const before = (await svc.store.keyImports.listExpired('9999')).length;
    const res = await importParams(svc.app, t.admin, t.id, spec, alg, wks);
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('wrapping_algorithm_not_allowed');
    expect(res.body.reason).toMatch(reason);
    expect((await svc.store.keyImports.listExpired('9999')).length).toBe(before);
  });

  it.each(['RSAES_PKCS1_V1_5', 'SM2PKE'])('does not accept %s', async (alg) => {
    const t = await tenant();
    const res = await importParams(svc.app, t.admin, t.id, 'ECC_NIST_P256', alg, 'RSA_2048');
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('invalid_request');
    expect(res.body.reason).toMatch(/wrapping_algorithm/);
  });

  it('needs an existing tenant and its admin', async () => {
    const ghost = await svc.apiKey('admin', 'ghost');
    const res = await importParams(svc.app, ghost, 'ghost', 'ECC_NIST_P256', 'RSAES_OAEP_SHA_1', 'RSA_2048');
    expect(res.status).toBe(404);
    expect(res.body.error).toBe('tenant_not_found');
    const t = await tenant();
    const bySigner = await importParams(svc.app, t.signer, t.id, 'ECC_NIST_P256', 'RSAES_OAEP_SHA_1', 'RSA_2048');
    expect(bySigner.status).toBe(403);
  });
});

describe('import_key refusals change nothing', () => {
  it.each([
    ['ECC_NIST_P256', 'RSAES_OAEP_SHA_1', 'ECC_NIST_P384', /found ECC_NIST_P384/],
    ['ECC_NIST_P256', 'RSA_AES_KEY_WRAP_SHA_1', 'SM2', /found no RSA or EC private key/],
    ['ECC_NIST_P384', 'RSA_AES_KEY_WRAP_SHA_256', 'RSA_2048', /found RSA_2048/],
    ['RSA_2048', 'RSA_AES_KEY_WRAP_SHA_1', 'RSA_3072', /found RSA_3072/],
    ['ECC_NIST_P256', 'RSAES_OAEP_SHA_256', 'ECC_NIST_P384', /found ECC_NIST_P384/],
    ['ML_DSA_65', 'RSA_AES_KEY_WRAP_SHA_256', 'ML_DSA_44', /found ML_DSA_44/],
    ['SM2', 'RSAES_OAEP_SHA_1', 'ECC_NIST_P256', /found ECC_NIST_P256/],
  ] as const)('a %s key given %s-wrapped %s material: invalid_key_material', async (spec, alg, other, reason) => {
    const t = await tenant();
    const before = await currentKeyId(t);
    const issued = await issue(t, spec, alg);
    const wrong = other.startsWith('ML_DSA') ? mlDsaMaterial(other) : material(other);
    const res = await send(t, issued, wrapKeyMaterial(issued.publicKey, alg, wrong.pkcs8));
    expect(res.status, JSON.stringify(res.body)).toBe(400);
    expect(res.body.error).toBe('invalid_key_material');
    expect(res.body.reason).toMatch(reason);
    await stillAwaiting(t, issued, before);
    // The same parameters still take the right material.
    const right = spec.startsWith('ML_DSA') ? mlDsaMaterial(spec) : material(spec);
    const ok = await send(t, issued, wrapKeyMaterial(issued.publicKey, alg, right.pkcs8));
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
  });

  it.each([
    ['ECC_NIST_P256', 'RSA_AES_KEY_WRAP_SHA_1', 'the AES key wrap'],
    ['ECC_NIST_P256', 'RSA_AES_KEY_WRAP_SHA_1', 'the RSA block'],
    ['RSA_2048', 'RSA_AES_KEY_WRAP_SHA_256', 'the AES key wrap'],
    ['RSA_2048', 'RSA_AES_KEY_WRAP_SHA_256', 'the RSA block'],
    ['ECC_NIST_P256', 'RSAES_OAEP_SHA_1', 'the RSA block'],
    ['ECC_NIST_P256', 'RSAES_OAEP_SHA_256', 'the RSA block'],
    ['SM2', 'RSA_AES_KEY_WRAP_SHA_256', 'the AES key wrap'],
    ['ML_DSA_65', 'RSAES_OAEP_SHA_1', 'the RSA block'],
  ] as const)('%s, %s, a byte flipped in %s: invalid_ciphertext', async (spec, alg, where) => {
    const t = await tenant();
    const before = await currentKeyId(t);
    const issued = await issue(t, spec, alg);
    const m: Material = spec.startsWith('ML_DSA') ? mlDsaMaterial(spec) : material(spec);
    const blob = wrapKeyMaterial(issued.publicKey, alg, m.pkcs8);
    const tampered = Buffer.from(blob);
    const at = where === 'the RSA block' ? 100 : blob.length - 5;
    tampered[at] = (tampered[at] as number) ^ 0x40;
    const res = await send(t, issued, tampered);
    expect(res.status, JSON.stringify(res.body)).toBe(400);
    expect(res.body.error).toBe('invalid_ciphertext');
    await stillAwaiting(t, issued, before);
    expect((await send(t, issued, blob)).status).toBe(200);
  });

  it('a forged, altered, foreign or superseded token: invalid_import_token', async () => {
    const a = await tenant();
    const b = await tenant();
    const m = material('ECC_NIST_P256');
    const forA = await issue(a, 'ECC_NIST_P256', 'RSAES_OAEP_SHA_1');
    const forB = await issue(b, 'ECC_NIST_P256', 'RSAES_OAEP_SHA_1');
    const blobB = wrapKeyMaterial(forB.publicKey, 'RSAES_OAEP_SHA_1', m.pkcs8);
    const altered = Buffer.from(forB.token, 'base64');
    altered[20] = (altered[20] as number) ^ 1;
    const cases: Array<[string, Record<string, unknown>]> = [
      ['forged', { import_token: Buffer.alloc(120, 7).toString('base64') }],
      ['altered', { import_token: altered.toString('base64') }],
      ["tenant a's token", { import_token: forA.token }],
    ];
    const faultsBefore = svc.keyStore.faults.seen;
    for (const [what, body] of cases) {
      const res = await send(b, forB, blobB, body);
      expect(res.status, what).toBe(400);
      expect(res.body.error, what).toBe('invalid_import_token');
    }
    // SoftHSM answers a failed GCM tag with CKR_GENERAL_ERROR: not taken for a token fault (no re-open, no 503).
    expect(svc.keyStore.faults.seen).toBe(faultsBefore);
    // Another key of the same tenant.
    const second = await issue(b, 'ECC_NIST_P256', 'RSAES_OAEP_SHA_1');
    const crossed = await send(b, second, blobB, { import_token: forB.token });
    expect(crossed.body.error).toBe('invalid_import_token');
    expect(crossed.body.reason).toMatch(/another key/);
    // New parameters for the same key replace the old ones.
    const renewed = await issue(b, 'ECC_NIST_P256', 'RSAES_OAEP_SHA_1', 'RSA_2048', { kms_key_id: forB.kmsKeyId });
    expect(renewed.kmsKeyId).toBe(forB.kmsKeyId);
    const old = await send(b, forB, blobB);
    expect(old.body.error).toBe('invalid_import_token');
    const ok = await send(b, renewed, wrapKeyMaterial(renewed.publicKey, 'RSAES_OAEP_SHA_1', m.pkcs8));
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    // A token used once does not work again.
    const again = await send(b, renewed, wrapKeyMaterial(renewed.publicKey, 'RSAES_OAEP_SHA_1', m.pkcs8));
    expect(again.body.error).toBe('invalid_import_token');
  });

  it('an expired token: expired_import_token; the sweep removes its wrapping key; new parameters work', async () => {
    const t = await tenant();
    const before = await currentKeyId(t);
    const m = material('ECC_NIST_P384');
    const issued = await issue(t, 'ECC_NIST_P384', 'RSA_AES_KEY_WRAP_SHA_256');
    const blob = wrapKeyMaterial(issued.publicKey, 'RSA_AES_KEY_WRAP_SHA_256', m.pkcs8);
    clock += 24 * 3600 * 1000;
    const res = await send(t, issued, blob);
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('expired_import_token');
    const row = await svc.store.keyImports.get(t.id, issued.kmsKeyId);
    expect(row?.wrappingKeyRef).toBeNull();
    expect((await svc.store.tenants.currentKey(t.id))?.id).toBe(before);
    const renewed = await issue(t, 'ECC_NIST_P384', 'RSAES_OAEP_SHA_256', 'RSA_3072', { kms_key_id: issued.kmsKeyId });
    const ok = await send(t, renewed, wrapKeyMaterial(renewed.publicKey, 'RSAES_OAEP_SHA_256', m.pkcs8));
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
  });

  it('valid_to: required with KEY_MATERIAL_EXPIRES, at most 365 days, refused without it', async () => {
    const t = await tenant();
    const m = material('ECC_NIST_P256');
    const issued = await issue(t, 'ECC_NIST_P256', 'RSAES_OAEP_SHA_1');
    const blob = wrapKeyMaterial(issued.publicKey, 'RSAES_OAEP_SHA_1', m.pkcs8);
    const s = Math.floor(clock / 1000);
    for (const extra of [
      { expiration_model: 'KEY_MATERIAL_EXPIRES' },
      { expiration_model: 'KEY_MATERIAL_EXPIRES', valid_to: s + 366 * 86_400 },
      { expiration_model: 'KEY_MATERIAL_EXPIRES', valid_to: s - 1 },
      { expiration_model: 'KEY_MATERIAL_DOES_NOT_EXPIRE', valid_to: s + 3600 },
    ]) {
      const res = await send(t, issued, blob, extra);
      expect(res.status, JSON.stringify(extra)).toBe(400);
      expect(res.body.error).toBe('invalid_request');
      expect(res.body.reason).toMatch(/valid_to/);
    }
    expect(await svc.store.tenants.getKey(t.id, issued.kmsKeyId)).toBeUndefined();
  });
});

describe('reimport and expiry', () => {
  it.each([
    ['ECC_NIST_P256', 'RSAES_OAEP_SHA_1'],
    ['RSA_2048', 'RSA_AES_KEY_WRAP_SHA_256'],
    ['ML_DSA_65', 'RSAES_OAEP_SHA_256'],
    ['SM2', 'RSA_AES_KEY_WRAP_SHA_1'],
  ] as const)('%s: expired material gives key_not_usable; other material is refused; the same material makes it usable again', async (spec, alg) => {
    const t = await tenant();
    const m = spec.startsWith('ML_DSA') ? mlDsaMaterial(spec) : material(spec);
    const issued = await issue(t, spec, alg);
    const validTo = Math.floor(clock / 1000) + 3600;
    const res = await send(t, issued, wrapKeyMaterial(issued.publicKey, alg, m.pkcs8), {
      expiration_model: 'KEY_MATERIAL_EXPIRES',
      valid_to: validTo,
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toMatchObject({ material_expires_at: validTo, reimport: false, current: true });
    expect((await signWithTenant(svc.app, t.signer, t.id, spec, m.publicKeyPem)).status).toBe(200);

    clock = validTo * 1000;
    const expired = await signWithTenant(svc.app, t.signer, t.id, spec, m.publicKeyPem);
    expect(expired.status).toBe(409);
    expect(expired.body.error).toBe('key_not_usable');
    expect(expired.body.reason).toMatch(/expired at .*import the same material again/);

    // Other material for this key: refused, and the key stays as it was.
    const other = spec.startsWith('ML_DSA') ? mlDsaMaterial(spec) : material(spec);
    const again = await issue(t, spec, alg, 'RSA_3072', { kms_key_id: issued.kmsKeyId });
    const refused = await send(t, again, wrapKeyMaterial(again.publicKey, alg, other.pkcs8));
    expect(refused.status, JSON.stringify(refused.body)).toBe(400);
    expect(refused.body.error).toBe('incorrect_key_material');
    expect((await svc.store.tenants.getKey(t.id, issued.kmsKeyId))?.materialExpiresAt).not.toBeNull();

    // The same material, now without expiry: usable again, same key version.
    const same = await issue(t, spec, alg, 'RSA_2048', { kms_key_id: issued.kmsKeyId });
    const restored = await send(t, same, wrapKeyMaterial(same.publicKey, alg, m.pkcs8));
    expect(restored.status, JSON.stringify(restored.body)).toBe(200);
    expect(restored.body).toMatchObject({ imported: issued.kmsKeyId, reimport: true, version: 2 });
    expect(restored.body.material_expires_at).toBeUndefined();
    const signed = await signWithTenant(svc.app, t.signer, t.id, spec, m.publicKeyPem);
    expect(signed.status, JSON.stringify(signed.body)).toBe(200);
    expect(verifiesWithOriginal(spec, m.publicKeyPem, signed.signature)).toBe(true);
    expect(await svc.store.tenants.listKeys(t.id)).toHaveLength(2);
  });

  it('a generated key takes no material', async () => {
    const t = await tenant();
    const res = await importParams(svc.app, t.admin, t.id, 'ECC_NIST_P256', 'RSAES_OAEP_SHA_1', 'RSA_2048', {
      kms_key_id: await currentKeyId(t),
    });
    expect(res.status).toBe(400);
    expect(res.body.reason).toMatch(/only an imported key/);
  });
});
