// Key import into AWS KMS at the key-store level (AwsKmsKeyStore.prepareImport / importKeyMaterial), on the KMS
// double: a key awaiting material, the client's blob passed through untouched and opened by "KMS" for real, the
// key then signing what verifies with the original public key; and AWS's refusals under our error codes. moto has
// no import (HTTP 500), so it is not used here. The service-level get_import_params / import_key build on this.
import {
  constants,
  createCipheriv,
  createPublicKey,
  generateKeyPairSync,
  type KeyObject,
  publicEncrypt,
  randomBytes,
} from 'node:crypto';
import { ml_dsa65 } from '@noble/post-quantum/ml-dsa.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { KeySpec, SigningAlgorithm } from '../../src/crypto/algorithms.js';
import { mlDsaSpkiDer, toPem } from '../../src/crypto/spki.js';
import { ApiError } from '../../src/errors.js';
import { AwsKmsKeyStore } from '../../src/keys/aws-kms/aws-kms-key-store.js';
import type { WrappingAlgorithm, WrappingKeySpec } from '../../src/keys/key-store.js';
import { signingInput, spkiDer, verifiesIndependently } from '../helpers/independent-verify.js';
import { type KmsDouble, startKmsDouble } from '../helpers/kms-double/kms-double.js';

const message = Buffer.from('signed with imported key material\n');
const HOUR = 3_600_000;

/** What a client does with get_import_params' answer (NOTES-NEXT-FEATURES §1.4, the Node route). */
function wrap(algorithm: WrappingAlgorithm, wrappingPublicKey: Buffer, pkcs8: Buffer): Buffer {
  const key = createPublicKey({ key: wrappingPublicKey, format: 'der', type: 'spki' });
  const oaepHash = algorithm.endsWith('SHA_256') ? 'sha256' : 'sha1';
  const oaep = (data: Buffer) => publicEncrypt({ key, padding: constants.RSA_PKCS1_OAEP_PADDING, oaepHash }, data);
  if (algorithm.startsWith('RSAES_OAEP')) return oaep(pkcs8);
  const aes = randomBytes(32);
  const kwp = createCipheriv('id-aes256-wrap-pad', aes, Buffer.from('A65959A6', 'hex'));
  return Buffer.concat([oaep(aes), kwp.update(pkcs8), kwp.final()]);
}

interface Material {
  pkcs8: Buffer;
  publicKeyPem: string;
}

function nodeMaterial(type: 'rsa' | 'ec', options: object): Material {
  const { privateKey, publicKey } = generateKeyPairSync(type as 'rsa', options as { modulusLength: number });
  return {
    pkcs8: (privateKey as KeyObject).export({ type: 'pkcs8', format: 'der' }),
    publicKeyPem: (publicKey as KeyObject).export({ type: 'spki', format: 'pem' }).toString(),
  };
}

/** RFC 9881 seed-only PKCS#8 for ML-DSA-65: SEQUENCE { 0, { id-ml-dsa-65 }, OCTET STRING { [0] seed } }. */
function mlDsa65Material(): Material {
  const seed = randomBytes(32);
  const pkcs8 = Buffer.concat([Buffer.from('3034020100300b060960864801650304031204228020', 'hex'), seed]);
  const { publicKey } = ml_dsa65.keygen(seed);
  return { pkcs8, publicKeyPem: toPem(mlDsaSpkiDer('ML_DSA_65', Buffer.from(publicKey))) };
}

const CASES: Array<{
  spec: KeySpec;
  algorithm: SigningAlgorithm;
  wrapping: WrappingAlgorithm;
  wrappingKeySpec: WrappingKeySpec;
  material: () => Material;
}> = [
  {
    spec: 'RSA_2048',
    algorithm: 'RSASSA_PSS_SHA_256',
    wrapping: 'RSA_AES_KEY_WRAP_SHA_256',
    wrappingKeySpec: 'RSA_3072',
    material: () => nodeMaterial('rsa', { modulusLength: 2048 }),
  },
  {
    spec: 'ECC_NIST_P256',
    algorithm: 'ECDSA_SHA_256',
    wrapping: 'RSAES_OAEP_SHA_256',
    wrappingKeySpec: 'RSA_2048',
    material: () => nodeMaterial('ec', { namedCurve: 'P-256' }),
  },
  {
    spec: 'ECC_NIST_P521',
    algorithm: 'ECDSA_SHA_512',
    wrapping: 'RSA_AES_KEY_WRAP_SHA_1',
    wrappingKeySpec: 'RSA_2048',
    material: () => nodeMaterial('ec', { namedCurve: 'P-521' }),
  },
  {
    spec: 'SM2',
    algorithm: 'SM2DSA',
    wrapping: 'RSAES_OAEP_SHA_1',
    wrappingKeySpec: 'RSA_2048',
    material: () => nodeMaterial('ec', { namedCurve: 'SM2' }),
  },
  {
    spec: 'ML_DSA_65',
    algorithm: 'ML_DSA_SHAKE_256',
    wrapping: 'RSA_AES_KEY_WRAP_SHA_256',
    wrappingKeySpec: 'RSA_2048',
    material: mlDsa65Material,
  },
];

async function rejection(promise: Promise<unknown>): Promise<ApiError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err, 'expected an ApiError').toBeInstanceOf(ApiError);
  return err as ApiError;
}

/** A fresh double and store per describe: tests move the double's clock. */
function withDouble() {
  const ctx = {} as { double: KmsDouble; store: AwsKmsKeyStore };
  beforeAll(async () => {
    ctx.double = await startKmsDouble();
    ctx.store = new AwsKmsKeyStore({
      endpoint: ctx.double.url,
      region: 'us-east-1',
      credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
      // The double makes an RSA wrapping key per request, seconds on a loaded machine: 20 s an attempt.
      requestTimeoutMs: 20_000,
    });
  });
  afterAll(async () => {
    await ctx.store?.close();
    await ctx.double?.close();
  });
  return ctx;
}

describe('import into AWS KMS', () => {
  const ctx = withDouble();

  it.each(CASES)('$spec material wrapped with $wrapping under $wrappingKeySpec imports and signs', async (c) => {
    const material = c.material();
    const params = await ctx.store.prepareImport(c.spec, `imports/${c.spec}`, c.wrapping, c.wrappingKeySpec);
    expect(ctx.double.key(params.keyRef).state).toBe('PendingImport');
    expect(params.validTo.getTime() - Date.now()).toBeGreaterThan(23 * HOUR);
    const hash = signingInput(material.publicKeyPem, c.algorithm, message);
    // Before the import the key cannot sign: 409 naming the state.
    const pending = await rejection(ctx.store.sign(params.keyRef, c.spec, c.algorithm, hash));
    expect(pending.code).toBe('key_not_usable');
    expect(pending.message).toMatch(/pending import/);
    const imported = await ctx.store.importKeyMaterial({
      keyRef: params.keyRef,
      spec: c.spec,
      importToken: params.importToken,
      encryptedKeyMaterial: wrap(c.wrapping, params.wrappingPublicKey, material.pkcs8),
      expiration: { model: 'KEY_MATERIAL_DOES_NOT_EXPIRE' },
    });
    expect(imported.keyRef).toBe(params.keyRef);
    expect(spkiDer(imported.publicKeyPem).equals(spkiDer(material.publicKeyPem))).toBe(true);
    const signature = await ctx.store.sign(params.keyRef, c.spec, c.algorithm, hash);
    expect(verifiesIndependently(c.spec, material.publicKeyPem, c.algorithm, message, signature)).toBe(true);
  });

  it("AWS's refusals: a foreign token, a tampered blob, other material on reimport", async () => {
    const material = nodeMaterial('ec', { namedCurve: 'P-384' });
    const a = await ctx.store.prepareImport('ECC_NIST_P384', 'refusals/a', 'RSAES_OAEP_SHA_256', 'RSA_3072');
    const b = await ctx.store.prepareImport('ECC_NIST_P384', 'refusals/b', 'RSAES_OAEP_SHA_256', 'RSA_3072');
    const request = (params: typeof a, blob: Buffer) => ({
      keyRef: params.keyRef,
      spec: 'ECC_NIST_P384' as const,
      importToken: params.importToken,
      encryptedKeyMaterial: blob,
      expiration: { model: 'KEY_MATERIAL_DOES_NOT_EXPIRE' as const },
    });
    const foreign = await rejection(
      ctx.store.importKeyMaterial({
        ...request(a, wrap('RSAES_OAEP_SHA_256', b.wrappingPublicKey, material.pkcs8)),
        importToken: b.importToken,
      }),
    );
    expect(foreign.code).toBe('invalid_import_token');
    const blob = wrap('RSAES_OAEP_SHA_256', a.wrappingPublicKey, material.pkcs8);
    blob.writeUInt8(blob.readUInt8(10) ^ 0x40, 10);
    expect((await rejection(ctx.store.importKeyMaterial(request(a, blob)))).code).toBe('invalid_ciphertext');
    // Material of another key spec is not this key's material.
    const p256 = nodeMaterial('ec', { namedCurve: 'P-256' });
    const wrongSpec = wrap('RSAES_OAEP_SHA_256', a.wrappingPublicKey, p256.pkcs8);
    expect((await rejection(ctx.store.importKeyMaterial(request(a, wrongSpec)))).code).toBe('incorrect_key_material');
    await ctx.store.importKeyMaterial(request(a, wrap('RSAES_OAEP_SHA_256', a.wrappingPublicKey, material.pkcs8)));
    // A reimport (new parameters for the same key) must bring the same material.
    const again = await ctx.store.prepareImport(
      'ECC_NIST_P384',
      'refusals/a',
      'RSA_AES_KEY_WRAP_SHA_1',
      'RSA_2048',
      a.keyRef,
    );
    expect(again.keyRef).toBe(a.keyRef);
    const other = nodeMaterial('ec', { namedCurve: 'P-384' });
    const different = wrap('RSA_AES_KEY_WRAP_SHA_1', again.wrappingPublicKey, other.pkcs8);
    const refused = await rejection(ctx.store.importKeyMaterial(request(again, different)));
    expect(refused.code).toBe('incorrect_key_material');
    expect(refused.statusCode).toBe(400);
  });

  it('import parameters for a key made in KMS (not EXTERNAL) are refused with 409, not a 500', async () => {
    const made = await ctx.store.createKey('ECC_NIST_P256', 'generated/k1');
    const err = await rejection(
      ctx.store.prepareImport('ECC_NIST_P256', 'generated/k1', 'RSAES_OAEP_SHA_256', 'RSA_2048', made.keyRef),
    );
    expect(err.code).toBe('key_not_usable');
  });
});

describe('import tokens and key material expire', () => {
  const ctx = withDouble();

  it('a token past its 24 hours is expired_import_token', async () => {
    const material = nodeMaterial('ec', { namedCurve: 'P-256' });
    const params = await ctx.store.prepareImport('ECC_NIST_P256', 'late/k1', 'RSAES_OAEP_SHA_1', 'RSA_2048');
    ctx.double.advance(25 * HOUR);
    const err = await rejection(
      ctx.store.importKeyMaterial({
        keyRef: params.keyRef,
        spec: 'ECC_NIST_P256',
        importToken: params.importToken,
        encryptedKeyMaterial: wrap('RSAES_OAEP_SHA_1', params.wrappingPublicKey, material.pkcs8),
        expiration: { model: 'KEY_MATERIAL_DOES_NOT_EXPIRE' },
      }),
    );
    expect(err.code).toBe('expired_import_token');
  });

  it('material with KEY_MATERIAL_EXPIRES stops signing at ValidTo (409) until the same material is imported again', async () => {
    const material = nodeMaterial('rsa', { modulusLength: 2048 });
    const hash = signingInput(material.publicKeyPem, 'RSASSA_PKCS1_V1_5_SHA_256', message);
    const importOnce = async (keyRef?: string) => {
      const params = await ctx.store.prepareImport(
        'RSA_2048',
        'expiring/k1',
        'RSA_AES_KEY_WRAP_SHA_256',
        'RSA_2048',
        keyRef,
      );
      await ctx.store.importKeyMaterial({
        keyRef: params.keyRef,
        spec: 'RSA_2048',
        importToken: params.importToken,
        encryptedKeyMaterial: wrap('RSA_AES_KEY_WRAP_SHA_256', params.wrappingPublicKey, material.pkcs8),
        // The double's clock may have been moved: ValidTo is an hour after the double's now.
        expiration: { model: 'KEY_MATERIAL_EXPIRES', validTo: new Date(ctx.double.now() + HOUR) },
      });
      return params.keyRef;
    };
    const keyRef = await importOnce();
    const sign = () => ctx.store.sign(keyRef, 'RSA_2048', 'RSASSA_PKCS1_V1_5_SHA_256', hash);
    expect(
      verifiesIndependently('RSA_2048', material.publicKeyPem, 'RSASSA_PKCS1_V1_5_SHA_256', message, await sign()),
    ).toBe(true);
    ctx.double.advance(2 * HOUR);
    const expired = await rejection(sign());
    expect(expired.code).toBe('key_not_usable');
    expect(expired.message).toMatch(/pending import/);
    await importOnce(keyRef);
    expect(
      verifiesIndependently('RSA_2048', material.publicKeyPem, 'RSASSA_PKCS1_V1_5_SHA_256', message, await sign()),
    ).toBe(true);
  });
});
