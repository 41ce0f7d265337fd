// A key store that imports by itself (AWS KMS: GetParametersForImport, ImportKeyMaterial) gets the client's blob
// and its own import token untouched: the service checks AWS's rules first, keeps the key awaiting material and
// records the result, but neither makes a wrapping key nor opens the material.
//
// The stand-in below does what KMS documents for those two calls, with real cryptography (node:crypto): a fresh
// RSA wrapping key and an opaque token per call, RSA_AES_KEY_WRAP / RSAES_OAEP unwrapped on its side. It is no AWS
// KMS test double (that is the KMS key store's own suite); it only stands where such a key store plugs in.
import {
  constants,
  createDecipheriv,
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  type KeyObject,
  privateDecrypt,
  randomBytes,
  randomUUID,
} from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { KeySpec } from '../../src/crypto/algorithms.js';
import { wrapKeyMaterial } from '../../src/keys/import/client-wrap.js';
import type {
  CreatedKey,
  ImportParameters,
  KeyMaterialImport,
  KeyStore,
  WrappingAlgorithm,
} from '../../src/keys/key-store.js';
import { KeyStores } from '../../src/keys/key-store.js';
import { importKeyMaterial, importParams, material } from '../helpers/key-import.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

class ImportingKeyStore implements KeyStore {
  readonly kind = 'aws-kms' as const;
  readonly description = 'a key store that imports by itself';
  readonly issued = new Map<string, { token: Buffer; wrapping: KeyObject; algorithm: WrappingAlgorithm }>();
  readonly received: KeyMaterialImport[] = [];

  supports(spec: KeySpec): boolean {
    return spec.startsWith('RSA') || spec.startsWith('ECC');
  }
  async createKey(): Promise<CreatedKey> {
    const pair = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    return {
      keyRef: `kms:${randomUUID()}`,
      publicKeyPem: pair.publicKey.export({ type: 'spki', format: 'pem' }).toString(),
    };
  }
  async prepareImport(
    _spec: KeySpec,
    _label: string,
    algorithm: WrappingAlgorithm,
    wrappingKeySpec: string,
    keyRef?: string,
  ): Promise<ImportParameters> {
    const ref = keyRef ?? `kms:${randomUUID()}`;
    const pair = generateKeyPairSync('rsa', { modulusLength: Number(wrappingKeySpec.slice(4)) });
    const token = randomBytes(48);
    this.issued.set(ref, { token, wrapping: pair.privateKey, algorithm });
    return {
      keyRef: ref,
      importToken: token,
      wrappingPublicKey: pair.publicKey.export({ type: 'spki', format: 'der' }),
      validTo: new Date(Date.now() + 86_400_000),
    };
  }
  async importKeyMaterial(request: KeyMaterialImport): Promise<CreatedKey> {
    this.received.push(request);
    const issued = this.issued.get(request.keyRef);
    if (!issued?.token.equals(request.importToken)) throw new Error('not the token of this key');
    const oaepHash = issued.algorithm.endsWith('SHA_1') ? 'sha1' : 'sha256';
    const open = (data: Buffer) =>
      privateDecrypt({ key: issued.wrapping, padding: constants.RSA_PKCS1_OAEP_PADDING, oaepHash }, data);
    const blob = request.encryptedKeyMaterial;
    let pkcs8: Buffer;
    if (issued.algorithm.startsWith('RSA_AES')) {
      const size = (issued.wrapping.asymmetricKeyDetails?.modulusLength ?? 0) / 8;
      const d = createDecipheriv('id-aes256-wrap-pad', open(blob.subarray(0, size)), Buffer.from('A65959A6', 'hex'));
      pkcs8 = Buffer.concat([d.update(blob.subarray(size)), d.final()]);
    } else {
      pkcs8 = open(blob);
    }
    const key = createPrivateKey({ key: pkcs8, format: 'der', type: 'pkcs8' });
    return {
      keyRef: request.keyRef,
      publicKeyPem: createPublicKey(key).export({ type: 'spki', format: 'pem' }).toString(),
    };
  }
  async sign(): Promise<Buffer> {
    throw new Error('not used here');
  }
  async destroyKey(): Promise<void> {}
  async ping(): Promise<void> {}
  async close(): Promise<void> {}
}

let svc: TestService;
const kms = new ImportingKeyStore();
beforeAll(async () => {
  // The importing store is the only one, as AWS KMS can be when configured.
  svc = await startTestService({ keyStore: new KeyStores([kms]) });
});
afterAll(async () => svc?.close());

describe('key import on a key store that imports by itself', () => {
  it('passes the blob and the token through, and records the key it answers with', async () => {
    const made = await callAction(svc.app, svc.operator, 'create_tenant', {
      tenant_id: 'kms',
      key_spec: 'ECC_NIST_P256',
    });
    expect(made.status).toBe(201);
    const admin = await svc.apiKey('admin', 'kms');
    // AWS's rules are the service's: refused before the key store is asked.
    const refused = await importParams(svc.app, admin, 'kms', 'RSA_2048', 'RSAES_OAEP_SHA_256', 'RSA_2048');
    expect(refused.body.error).toBe('wrapping_algorithm_not_allowed');
    expect(kms.issued.size).toBe(0);

    const m = material('RSA_2048');
    const p = await importParams(svc.app, admin, 'kms', 'RSA_2048', 'RSA_AES_KEY_WRAP_SHA_256', 'RSA_2048');
    expect(p.status, JSON.stringify(p.body)).toBe(200);
    const [keyRef, issued] = [...kms.issued.entries()][0] as [string, { token: Buffer }];
    expect(Buffer.from(p.body.import_token as string, 'base64').equals(issued.token)).toBe(true);
    const blob = wrapKeyMaterial(
      Buffer.from(p.body.public_key as string, 'base64'),
      'RSA_AES_KEY_WRAP_SHA_256',
      m.pkcs8,
    );
    const validTo = Math.floor(Date.now() / 1000) + 3600;
    const imported = await importKeyMaterial(svc.app, admin, 'kms', {
      kms_key_id: p.body.kms_key_id,
      import_token: p.body.import_token,
      encrypted_key_material: blob.toString('base64'),
      expiration_model: 'KEY_MATERIAL_EXPIRES',
      valid_to: validTo,
    });
    expect(imported.status, JSON.stringify(imported.body)).toBe(200);
    const [received] = kms.received;
    expect(received?.keyRef).toBe(keyRef);
    expect(received?.encryptedKeyMaterial.equals(blob)).toBe(true);
    expect(received?.expiration).toEqual({ model: 'KEY_MATERIAL_EXPIRES', validTo: new Date(validTo * 1000) });
    const key = await svc.store.tenants.getKey('kms', p.body.kms_key_id as string);
    expect(key).toMatchObject({ keyRef, keyStore: 'aws-kms', origin: 'imported', publicKeyPem: m.publicKeyPem });
  });
});
