// One suite of key-store tests, run against every key store signbridge has and every stand-in for AWS KMS:
// - the embedded default: SoftHSM (RSA, EC) with the software key store it seals (ML-DSA, SM2);
// - AwsKmsKeyStore against the KMS double (test/helpers/kms-double/), which behaves as KMS documents: everything;
// - AwsKmsKeyStore against moto_server, only for what moto does like KMS: creating RSA and EC keys, their public
//   keys, aliases, NotFound for an unknown key. moto's deviations (it hashes a DIGEST again, uses the
//   maximum PSS salt, has no import and no ML-DSA, makes an RSA key for SM2, lets disabled keys sign) are not KMS
//   behaviour, so no test here asserts them and moto's signatures are never checked.

import { createPublicKey } from 'node:crypto';
import { rmSync } from 'node:fs';
import { DescribeKeyCommand, KMSClient, ListAliasesCommand, VerifyCommand } from '@aws-sdk/client-kms';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  EC_OPENSSL_CURVE,
  KEY_SPECS,
  type KeySpec,
  keyInfo,
  type SigningAlgorithm,
} from '../../src/crypto/algorithms.js';
import { parseMlDsaSpki, parseSm2Spki } from '../../src/crypto/spki.js';
import { ApiError } from '../../src/errors.js';
import { AwsKmsKeyStore } from '../../src/keys/aws-kms/aws-kms-key-store.js';
import { KeyStores } from '../../src/keys/key-store.js';
import { Pkcs11KeyStore } from '../../src/keys/pkcs11/pkcs11-key-store.js';
import { embeddedSoftHsmOptions } from '../../src/keys/pkcs11/softhsm.js';
import { SoftwareKeyStore } from '../../src/keys/software/software-key-store.js';
import { signingInput, spkiDer, tampered, verifiesIndependently } from '../helpers/independent-verify.js';
import { type KmsDouble, startKmsDouble } from '../helpers/kms-double/kms-double.js';
import { startMoto } from '../helpers/moto.js';
import { makeTempDir } from '../helpers/service.js';

const CREDENTIALS = { accessKeyId: 'test', secretAccessKey: 'test' };
const message = Buffer.from('an artifact, signed by every key store\n');
const RSA_EC = KEY_SPECS.filter((s) => ['rsa', 'ec'].includes(keyInfo(s).family));

interface Backend {
  name: string;
  specs: readonly KeySpec[];
  /** Signatures are checked (not on moto: it hashes a DIGEST again). */
  signs: boolean;
  /** Is a KMS stand-in reachable with the SDK at `url`. */
  kms: boolean;
  open(): Promise<{ stores: KeyStores; url?: string; close(): Promise<void> }>;
}

const backends: Backend[] = [
  {
    name: 'SoftHSM + software key store',
    specs: KEY_SPECS,
    signs: true,
    kms: false,
    async open() {
      const dir = makeTempDir('sb-keystores-');
      const token = Pkcs11KeyStore.open(embeddedSoftHsmOptions(dir));
      const stores = new KeyStores([token, new SoftwareKeyStore(token, token.description)]);
      return {
        stores,
        async close() {
          await stores.close();
          rmSync(dir, { recursive: true, force: true });
        },
      };
    },
  },
  {
    name: 'AWS KMS (the KMS double)',
    specs: KEY_SPECS,
    signs: true,
    kms: true,
    async open() {
      const double = await startKmsDouble();
      // The double makes an RSA-4096 key in seconds on a loaded machine: 20 s an attempt.
      const stores = new KeyStores([kmsStore(double.url, { requestTimeoutMs: 20_000 })]);
      return {
        stores,
        url: double.url,
        async close() {
          await stores.close();
          await double.close();
        },
      };
    },
  },
  {
    name: 'AWS KMS (moto, what it does like KMS)',
    specs: RSA_EC,
    signs: false,
    kms: true,
    async open() {
      const moto = await startMoto();
      const stores = new KeyStores([kmsStore(moto.url, { requestTimeoutMs: 20_000 })]);
      return {
        stores,
        url: moto.url,
        async close() {
          await stores.close();
          await moto.stop();
        },
      };
    },
  },
];

function kmsStore(endpoint: string, extra: Partial<ConstructorParameters<typeof AwsKmsKeyStore>[0]> = {}) {
  return new AwsKmsKeyStore({ endpoint, region: 'us-east-1', credentials: CREDENTIALS, ...extra });
}

/** The public key is a key of `spec`: RSA size, EC curve, ML-DSA level, SM2 curve. */
function publicKeyIs(spec: KeySpec, pem: string): boolean {
  const info = keyInfo(spec);
  if (info.family === 'ml-dsa') return parseMlDsaSpki(spkiDer(pem))?.spec === spec;
  if (info.family === 'sm2') return parseSm2Spki(spkiDer(pem)) !== undefined;
  const details = createPublicKey(pem).asymmetricKeyDetails;
  if (info.family === 'rsa') return details?.modulusLength === info.bits;
  if (info.family === 'ed25519') return createPublicKey(pem).asymmetricKeyType === 'ed25519';
  return details?.namedCurve === EC_OPENSSL_CURVE[info.curve];
}

/** Algorithms worth signing with per key spec: for EC also a digest of another length than the curve's. */
function algorithmsToTry(spec: KeySpec): SigningAlgorithm[] {
  const info = keyInfo(spec);
  if (info.family === 'rsa') return ['RSASSA_PKCS1_V1_5_SHA_256', 'RSASSA_PSS_SHA_384', 'RSASSA_PSS_SHA_512'];
  if (info.family === 'ec') return ['ECDSA_SHA_256', 'ECDSA_SHA_384', 'ECDSA_SHA_512'];
  if (info.family === 'ml-dsa') return ['ML_DSA_SHAKE_256'];
  // Pure Ed25519 signs the message, which a key store's digest path never carries.
  if (info.family === 'ed25519') return ['ED25519_PH_SHA_512'];
  return ['SM2DSA'];
}

async function rejection(promise: Promise<unknown>): Promise<ApiError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err, 'expected a rejection').toBeInstanceOf(ApiError);
  return err as ApiError;
}

describe.each(backends)('$name', (backend) => {
  let opened: Awaited<ReturnType<Backend['open']>>;
  let sdk: KMSClient | undefined;
  beforeAll(async () => {
    opened = await backend.open();
    if (backend.kms) sdk = new KMSClient({ endpoint: opened.url, region: 'us-east-1', credentials: CREDENTIALS });
  });
  afterAll(async () => {
    sdk?.destroy();
    await opened?.close();
  });

  it('is ready', async () => {
    await expect(opened.stores.ping()).resolves.toBeUndefined();
  });

  describe.each(backend.specs.map((s) => [s]))('%s', (spec) => {
    it('creates a key whose public key is of the spec, and it signs what verifies independently', async () => {
      const store = opened.stores.forNewKey(spec);
      const made = await store.createKey(spec, `conformance-${spec.toLowerCase().replaceAll('_', '-')}/k1`);
      expect(made.keyRef).not.toBe('');
      expect(publicKeyIs(spec, made.publicKeyPem), made.publicKeyPem).toBe(true);
      if (!backend.signs) return;
      for (const algorithm of algorithmsToTry(spec)) {
        const hash = signingInput(made.publicKeyPem, algorithm, message);
        const signature = await store.sign(made.keyRef, spec, algorithm, hash);
        expect(verifiesIndependently(spec, made.publicKeyPem, algorithm, message, signature), algorithm).toBe(true);
        expect(verifiesIndependently(spec, made.publicKeyPem, algorithm, message, tampered(signature))).toBe(false);
      }
    });
  });

  // moto answers ScheduleKeyDeletion with a key ARN with an HTTP 500 (KMS takes an ARN), and signs with a key
  // pending deletion: deletion is checked on the KMS double only.
  it.runIf(backend.signs)('a destroyed key is gone for signing', async () => {
    const spec: KeySpec = 'ECC_NIST_P256';
    const store = opened.stores.forNewKey(spec);
    const made = await store.createKey(spec, 'conformance-destroy/k1');
    await store.destroyKey(made.keyRef);
    if (backend.kms) {
      const described = await sdk?.send(new DescribeKeyCommand({ KeyId: made.keyRef }));
      expect(described?.KeyMetadata?.KeyState).toBe('PendingDeletion');
      const aliases = await sdk?.send(new ListAliasesCommand({ KeyId: made.keyRef }));
      expect(aliases?.Aliases ?? []).toEqual([]);
    }
    const hash = signingInput(made.publicKeyPem, 'ECDSA_SHA_256', message);
    const err = await rejection(store.sign(made.keyRef, spec, 'ECDSA_SHA_256', hash));
    expect(err.statusCode).toBeLessThan(500);
  });

  it.runIf(backend.kms)('the tenant alias follows the newest key; the older key keeps its own reference', async () => {
    const store = opened.stores.forNewKey('RSA_2048') as AwsKmsKeyStore;
    const first = await store.createKey('RSA_2048', 'acme.prod/k1');
    const second = await store.createKey('RSA_2048', 'acme.prod/k2');
    const aliasName = 'alias/signbridge/acme/prod';
    expect(store.aliasFor('acme.prod')).toBe(aliasName);
    const aliases = await sdk?.send(new ListAliasesCommand({}));
    const alias = aliases?.Aliases?.find((a) => a.AliasName === aliasName);
    expect(alias?.TargetKeyId && second.keyRef.endsWith(alias.TargetKeyId)).toBe(true);
    expect(first.keyRef).not.toBe(second.keyRef);
    expect(first.keyRef).toMatch(/^arn:aws:kms:/);
    // The key is tagged with its tenant and key id.
    const described = await sdk?.send(new DescribeKeyCommand({ KeyId: first.keyRef }));
    expect(described?.KeyMetadata?.Description).toBe('signbridge acme.prod/k1');
    expect(described?.KeyMetadata?.KeyUsage).toBe('SIGN_VERIFY');
    if (!backend.signs) return;
    const hash = signingInput(first.publicKeyPem, 'RSASSA_PSS_SHA_256', message);
    const signature = await store.sign(first.keyRef, 'RSA_2048', 'RSASSA_PSS_SHA_256', hash);
    expect(verifiesIndependently('RSA_2048', first.publicKeyPem, 'RSASSA_PSS_SHA_256', message, signature)).toBe(true);
  });

  it.runIf(backend.kms)('a key KMS does not know is 409 key_not_usable, not a 500', async () => {
    const store = opened.stores.forNewKey('ECC_NIST_P256');
    const unknown = 'arn:aws:kms:us-east-1:123456789012:key/00000000-0000-4000-8000-000000000000';
    const err = await rejection(store.sign(unknown, 'ECC_NIST_P256', 'ECDSA_SHA_256', Buffer.alloc(32, 1)));
    expect(err.code).toBe('key_not_usable');
    expect(err.message).toContain(unknown);
  });
});

// Only the double: KMS behaviour moto does not have, and faults.
describe('AWS KMS key store on the KMS double: key states, faults, import', () => {
  let double: KmsDouble;
  let store: AwsKmsKeyStore;
  beforeAll(async () => {
    double = await startKmsDouble();
    // A timeout well above the double's answer times on a loaded machine: only the delay fault below exceeds it.
    store = kmsStore(double.url, { requestTimeoutMs: 2500, maxAttempts: 2, settleMs: 3000, pingTimeoutMs: 1500 });
  });
  afterAll(async () => {
    await store?.close();
    await double?.close();
  });

  it('a disabled key and a key pending deletion are 409 key_not_usable naming the state; enabled again, it signs', async () => {
    const made = await store.createKey('ECC_NIST_P384', 'states/k1');
    const hash = signingInput(made.publicKeyPem, 'ECDSA_SHA_384', message);
    double.key(made.keyRef).state = 'Disabled';
    const disabled = await rejection(store.sign(made.keyRef, 'ECC_NIST_P384', 'ECDSA_SHA_384', hash));
    expect(disabled.code).toBe('key_not_usable');
    expect(disabled.message).toMatch(/disabled/);
    double.key(made.keyRef).state = 'Enabled';
    const signature = await store.sign(made.keyRef, 'ECC_NIST_P384', 'ECDSA_SHA_384', hash);
    expect(verifiesIndependently('ECC_NIST_P384', made.publicKeyPem, 'ECDSA_SHA_384', message, signature)).toBe(true);
    await store.destroyKey(made.keyRef);
    const pending = await rejection(store.sign(made.keyRef, 'ECC_NIST_P384', 'ECDSA_SHA_384', hash));
    expect(pending.code).toBe('key_not_usable');
    expect(pending.message).toMatch(/pending deletion/);
  });

  it('no region anywhere (not configured, no AWS_REGION, no profile): /readyz fails naming it, no crash', async () => {
    const saved = process.env.AWS_REGION;
    delete process.env.AWS_REGION;
    const lost = new AwsKmsKeyStore({
      endpoint: double.url,
      credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    });
    try {
      const err = await rejection(lost.ping());
      expect(err.code).toBe('key_store_unavailable');
      expect(err.message).toMatch(/region/i);
    } finally {
      await lost.close();
      if (saved !== undefined) process.env.AWS_REGION = saved;
    }
  });

  it("the double's Verify agrees with the independent verifiers (it documents KMS's Verify too)", async () => {
    const sdk = new KMSClient({ endpoint: double.url, region: 'us-east-1', credentials: CREDENTIALS });
    try {
      for (const [spec, algorithm] of [
        ['RSA_2048', 'RSASSA_PKCS1_V1_5_SHA_512'],
        ['RSA_2048', 'RSASSA_PSS_SHA_256'],
        ['ECC_NIST_P521', 'ECDSA_SHA_512'],
        ['ML_DSA_44', 'ML_DSA_SHAKE_256'],
        ['SM2', 'SM2DSA'],
      ] as const) {
        const made = await store.createKey(spec, `verify/${spec}`);
        const hash = signingInput(made.publicKeyPem, algorithm, message);
        const signature = await store.sign(made.keyRef, spec, algorithm, hash);
        const verifyWith = (Signature: Buffer) =>
          sdk.send(
            new VerifyCommand({
              KeyId: made.keyRef,
              Message: hash,
              MessageType: spec === 'ML_DSA_44' ? 'EXTERNAL_MU' : 'DIGEST',
              Signature,
              SigningAlgorithm: algorithm,
            }),
          );
        expect((await verifyWith(signature)).SignatureValid, `${spec} ${algorithm}`).toBe(true);
        await expect(verifyWith(tampered(signature))).rejects.toMatchObject({ name: 'KMSInvalidSignatureException' });
      }
    } finally {
      sdk.destroy();
    }
  });

  it('a digest of the wrong length is refused before KMS is called', async () => {
    const made = await store.createKey('RSA_2048', 'lengths/k1');
    const before = double.calls.get('Sign') ?? 0;
    const err = await rejection(store.sign(made.keyRef, 'RSA_2048', 'RSASSA_PSS_SHA_256', Buffer.alloc(31)));
    expect(err.code).toBe('invalid_hash');
    expect(double.calls.get('Sign') ?? 0).toBe(before);
  });

  it('NotFound right after CreateKey (eventual consistency) is retried until the key is there', async () => {
    double.addFault({ op: 'GetPublicKey', kind: 'not-found', times: 2 });
    const before = double.calls.get('GetPublicKey') ?? 0;
    const made = await store.createKey('ECC_NIST_P256', 'settle/k1');
    expect(double.calls.get('GetPublicKey')).toBe(before + 3);
    expect(publicKeyIs('ECC_NIST_P256', made.publicKeyPem)).toBe(true);
  });

  describe('faults', () => {
    let keyRef: string;
    let pem: string;
    const sign = () =>
      store.sign(keyRef, 'ECC_NIST_P256', 'ECDSA_SHA_256', signingInput(pem, 'ECDSA_SHA_256', message));
    beforeAll(async () => {
      const made = await store.createKey('ECC_NIST_P256', 'faults/k1');
      keyRef = made.keyRef;
      pem = made.publicKeyPem;
    });

    it.each([
      ['throttling', 'throttle'],
      ['a 500 KMSInternalException', 'internal'],
      ['a 503', 'unavailable'],
      ['a dropped connection', 'drop'],
    ] as const)('%s once: the SDK retries and the signature comes back', async (_what, kind) => {
      double.clearFaults();
      double.addFault({ op: 'Sign', kind, times: 1 });
      const before = double.calls.get('Sign') ?? 0;
      const signature = await sign();
      expect(verifiesIndependently('ECC_NIST_P256', pem, 'ECDSA_SHA_256', message, signature)).toBe(true);
      expect(double.calls.get('Sign')).toBe(before + 2);
    });

    it.each([
      ['throttling', 'throttle', /ThrottlingException/],
      ['a 500 KMSInternalException', 'internal', /KMSInternalException|HTTP 500/],
      ['a dropped connection', 'drop', /ECONNRESET|socket hang up/],
    ] as const)('%s on every attempt: 503 key_store_unavailable; signing resumes when it ends', async (_what, kind, reason) => {
      double.clearFaults();
      double.addFault({ op: 'Sign', kind, times: -1 });
      const err = await rejection(sign());
      expect(err.code).toBe('key_store_unavailable');
      expect(err.statusCode).toBe(503);
      expect(err.message).toMatch(reason);
      double.clearFaults();
      const signature = await sign();
      expect(verifiesIndependently('ECC_NIST_P256', pem, 'ECDSA_SHA_256', message, signature)).toBe(true);
    });

    it('answers slower than the request timeout: 503, and the ping fails while KMS is that slow', async () => {
      double.clearFaults();
      double.addFault({ op: '*', kind: 'delay', ms: 4000, times: -1 });
      const err = await rejection(sign());
      expect(err.code).toBe('key_store_unavailable');
      await expect(store.ping()).rejects.toMatchObject({ code: 'key_store_unavailable' });
      double.clearFaults();
      await expect(store.ping()).resolves.toBeUndefined();
    });
  });
});
