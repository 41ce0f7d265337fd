// Key import on the embedded default: material wrapped by a client (Node here; openssl in key-import-docs.test.ts,
// the CLI in key-import-cli.test.ts), imported into SoftHSM (RSA, EC: unwrapped inside the token) or the software
// key store (ML-DSA, SM2), signed through the service and verified with the original public key.
import pkcs11js from 'pkcs11js';
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
  wrapWithOpenssl,
} from '../helpers/key-import.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

let svc: TestService;
const clock = Date.now();
const now = () => new Date(clock);
beforeAll(async () => {
  svc = await startTestService({ now });
});
afterAll(async () => svc?.close());

let tenants = 0;
const tenant = () => newTenant(svc, `import-${++tenants}`);

const params = (
  admin: string,
  tenantId: string,
  spec: KeySpec,
  wrappingAlgorithm: WrappingAlgorithm,
  wrappingKeySpec: WrappingKeySpec,
  extra: Record<string, unknown> = {},
) => importParams(svc.app, admin, tenantId, spec, wrappingAlgorithm, wrappingKeySpec, extra);
const importKey = (admin: string, tenantId: string, body: Record<string, unknown>) =>
  importKeyMaterial(svc.app, admin, tenantId, body);

/** get_import_params, wrap, import_key: the whole exchange for `m`. */
async function exchange(
  t: { id: string; admin: string },
  m: Material,
  alg: WrappingAlgorithm,
  wks: WrappingKeySpec,
  extra: Record<string, unknown> = {},
  wrap: typeof wrapKeyMaterial = wrapKeyMaterial,
) {
  const p = await params(t.admin, t.id, m.spec, alg, wks);
  expect(p.status, JSON.stringify(p.body)).toBe(200);
  const blob = wrap(Buffer.from(p.body.public_key as string, 'base64'), alg, m.pkcs8);
  const imported = await importKey(t.admin, t.id, {
    kms_key_id: p.body.kms_key_id,
    import_token: p.body.import_token,
    encrypted_key_material: blob.toString('base64'),
    ...extra,
  });
  return { params: p, imported, blob };
}

// Every wrapping algorithm x wrapping key spec AWS allows, each with material it may carry; together every kind
// of material (RSA 2048/3072/4096, the three NIST curves, ML-DSA in each RFC 9881 form, SM2, Ed25519, secp256k1).
const MATRIX: Array<[WrappingAlgorithm, WrappingKeySpec, KeySpec, 'PKCS#8' | 'seed' | 'expanded' | 'both']> = [
  ['RSA_AES_KEY_WRAP_SHA_256', 'RSA_2048', 'RSA_2048', 'PKCS#8'],
  ['RSA_AES_KEY_WRAP_SHA_256', 'RSA_3072', 'ECC_NIST_P384', 'PKCS#8'],
  ['RSA_AES_KEY_WRAP_SHA_256', 'RSA_4096', 'RSA_4096', 'PKCS#8'],
  ['RSA_AES_KEY_WRAP_SHA_256', 'RSA_2048', 'ML_DSA_65', 'both'],
  ['RSA_AES_KEY_WRAP_SHA_256', 'RSA_2048', 'SM2', 'PKCS#8'],
  ['RSA_AES_KEY_WRAP_SHA_1', 'RSA_2048', 'ECC_NIST_P521', 'PKCS#8'],
  ['RSA_AES_KEY_WRAP_SHA_1', 'RSA_3072', 'RSA_3072', 'PKCS#8'],
  ['RSA_AES_KEY_WRAP_SHA_1', 'RSA_4096', 'ML_DSA_65', 'expanded'],
  ['RSAES_OAEP_SHA_256', 'RSA_2048', 'ECC_NIST_P256', 'PKCS#8'],
  ['RSAES_OAEP_SHA_256', 'RSA_3072', 'ECC_NIST_P521', 'PKCS#8'],
  ['RSAES_OAEP_SHA_256', 'RSA_4096', 'SM2', 'PKCS#8'],
  ['RSAES_OAEP_SHA_1', 'RSA_2048', 'SM2', 'PKCS#8'],
  ['RSAES_OAEP_SHA_1', 'RSA_3072', 'ML_DSA_65', 'seed'],
  ['RSAES_OAEP_SHA_1', 'RSA_4096', 'ECC_NIST_P384', 'PKCS#8'],
  ['RSAES_OAEP_SHA_1', 'RSA_2048', 'ECC_NIST_P256', 'PKCS#8'],
  ['RSAES_OAEP_SHA_256', 'RSA_2048', 'ECC_NIST_EDWARDS25519', 'PKCS#8'],
  ['RSA_AES_KEY_WRAP_SHA_256', 'RSA_2048', 'ECC_SECG_P256K1', 'PKCS#8'],
];

describe('import end to end, every wrapping algorithm and wrapping key spec', () => {
  it.each(MATRIX)('%s under %s carries %s material (%s)', async (alg, wks, spec, form) => {
    const t = await tenant();
    const m = form !== 'PKCS#8' ? mlDsaMaterial(spec, form) : material(spec);
    const { params: p, imported } = await exchange(t, m, alg, wks);
    expect(Number(p.body.parameters_valid_to)).toBe(Math.floor(clock / 1000) + 86_400);
    expect(imported.status, JSON.stringify(imported.body)).toBe(200);
    expect(imported.body).toMatchObject({ imported: p.body.kms_key_id, key_spec: spec, current: true, version: 2 });

    // The imported key is the tenant's current key; its public key is the original one.
    const pub = await callAction(svc.app, t.admin, 'get_public_key', { tenant_id: t.id });
    expect(pub.body.key_id).toBe(p.body.kms_key_id);
    expect(pub.body.public_key_pem).toBe(m.publicKeyPem.replace(/\r/g, ''));
    const signed = await signWithTenant(svc.app, t.signer, t.id, spec, m.publicKeyPem);
    expect(signed.status, JSON.stringify(signed.body)).toBe(200);
    expect(verifiesWithOriginal(spec, m.publicKeyPem, signed.signature)).toBe(true);

    const [key] = (await svc.store.tenants.listKeys(t.id)).filter((k) => k.id === p.body.kms_key_id);
    expect(key?.origin).toBe('imported');
    const software = spec.startsWith('ML_DSA') || spec === 'SM2' || spec === 'ECC_NIST_EDWARDS25519';
    expect(key?.keyStore).toBe(software ? 'software' : 'pkcs11');
  });
});

// The same exchange with the material wrapped by the openssl CLI (docs/keys.md's commands), for every kind of
// material; the cheaper wrapping key specs, since the matrix above covers RSA_4096.
const OPENSSL: Array<[WrappingAlgorithm, WrappingKeySpec, KeySpec]> = [
  ['RSA_AES_KEY_WRAP_SHA_256', 'RSA_2048', 'RSA_3072'],
  ['RSA_AES_KEY_WRAP_SHA_1', 'RSA_2048', 'RSA_4096'],
  ['RSA_AES_KEY_WRAP_SHA_256', 'RSA_3072', 'ECC_NIST_P521'],
  ['RSAES_OAEP_SHA_1', 'RSA_2048', 'ECC_NIST_P384'],
  ['RSAES_OAEP_SHA_256', 'RSA_2048', 'ECC_NIST_P256'],
  ['RSA_AES_KEY_WRAP_SHA_256', 'RSA_2048', 'ML_DSA_65'],
  ['RSAES_OAEP_SHA_256', 'RSA_2048', 'SM2'],
  ['RSAES_OAEP_SHA_1', 'RSA_2048', 'ECC_NIST_EDWARDS25519'],
  ['RSAES_OAEP_SHA_256', 'RSA_2048', 'ECC_SECG_P256K1'],
];

describe('import end to end, material wrapped by openssl', () => {
  it.each(OPENSSL)('%s under %s carries %s material', async (alg, wks, spec) => {
    const t = await tenant();
    const m = material(spec);
    const { imported } = await exchange(t, m, alg, wks, {}, wrapWithOpenssl);
    expect(imported.status, JSON.stringify(imported.body)).toBe(200);
    const signed = await signWithTenant(svc.app, t.signer, t.id, spec, m.publicKeyPem);
    expect(signed.status, JSON.stringify(signed.body)).toBe(200);
    expect(verifiesWithOriginal(spec, m.publicKeyPem, signed.signature)).toBe(true);
  });
});

describe('the imported private key in the token', () => {
  it('is a token object, sensitive, never extractable, and the wrapping key is gone after the import', async () => {
    const t = await tenant();
    const m = material('RSA_2048');
    const { params: p, imported } = await exchange(t, m, 'RSA_AES_KEY_WRAP_SHA_1', 'RSA_2048');
    expect(imported.status).toBe(200);
    const key = await svc.store.tenants.getKey(t.id, p.body.kms_key_id as string);
    const id = Buffer.from((key?.keyRef ?? '').replace('pkcs11:id=', ''), 'hex');
    const attrs = await svc.keyStore.inSession((session) => {
      const lib = session.lib;
      lib.C_FindObjectsInit(session.handle, [{ type: pkcs11js.CKA_ID, value: id }]);
      const handles = lib.C_FindObjects(session.handle, 10);
      lib.C_FindObjectsFinal(session.handle);
      return handles.map((h) =>
        lib
          .C_GetAttributeValue(session.handle, h, [
            { type: pkcs11js.CKA_CLASS },
            { type: pkcs11js.CKA_TOKEN },
            { type: pkcs11js.CKA_SENSITIVE },
            { type: pkcs11js.CKA_EXTRACTABLE },
          ])
          .map((a) => (a.value as Buffer)[0]),
      );
    });
    expect(attrs).toEqual([[pkcs11js.CKO_PRIVATE_KEY, 1, 1, 0]]);
    const row = await svc.store.keyImports.get(t.id, p.body.kms_key_id as string);
    expect(row).toBeUndefined();
    const wrappingLeft = await svc.keyStore.inSession(
      (session) => session.find({ label: `signbridge-wrapping/${p.body.kms_key_id}` }).length,
    );
    expect(wrappingLeft).toBe(0);
    // Both steps are in the audit log, naming the key and how it came.
    const audit = (await svc.store.audit.recent(t.id, 10)).map((e) => [e.action, e.outcome, e.details.key_id]);
    expect(audit).toContainEqual(['get_import_params', 'issued', p.body.kms_key_id]);
    expect(audit).toContainEqual(['import_key', 'imported', p.body.kms_key_id]);
  });
});
