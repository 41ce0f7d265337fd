// The AWS SDK for JavaScript (@aws-sdk/client-kms, the SDK every Node script uses) pointed at signbridge: an ML-DSA-65
// key signed with MessageType EXTERNAL_MU (μ computed here, from FIPS 204's definition, not by the service) and RAW,
// each signature verified with @noble/post-quantum over the message itself; GetPublicKey's SPKI gives the key.

import { DescribeKeyCommand, GetPublicKeyCommand, KMSClient, SignCommand } from '@aws-sdk/client-kms';
import { shake256 } from '@noble/hashes/sha3.js';
import { ml_dsa65 } from '@noble/post-quantum/ml-dsa.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAwsApiKey } from '../../src/auth/aws-credentials/aws-credentials.js';
import { parseMlDsaSpki } from '../../src/crypto/spki.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

let svc: TestService;
let kms: KMSClient;

beforeAll(async () => {
  svc = await startTestService();
  expect(
    (await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'pq', key_spec: 'ML_DSA_65' })).status,
  ).toBe(201);
  const made = await createAwsApiKey(svc.store, svc.keyStore, 'signer', 'pq', 'sdk');
  const endpoint = await svc.app.listen({ host: '127.0.0.1', port: 0 });
  kms = new KMSClient({
    endpoint,
    region: 'ap-northeast-1',
    credentials: { accessKeyId: made.accessKeyId, secretAccessKey: made.secretAccessKey },
    maxAttempts: 1,
  });
});
afterAll(async () => {
  kms?.destroy();
  await svc?.close();
});

/** μ = SHAKE256(SHAKE256(pk, 64) || 0x00 || 0x00 || M, 64): pure ML-DSA with an empty context (FIPS 204 §5.2). */
function externalMu(publicKey: Uint8Array, message: Uint8Array): Uint8Array {
  const tr = shake256(publicKey, { dkLen: 64 });
  return shake256(new Uint8Array([...tr, 0, 0, ...message]), { dkLen: 64 });
}

describe('@aws-sdk/client-kms with an ML-DSA key', () => {
  it('describes the key as ML_DSA_65 with ML_DSA_SHAKE_256, and signs EXTERNAL_MU and RAW messages', async () => {
    const described = await kms.send(new DescribeKeyCommand({ KeyId: 'alias/pq' }));
    expect(described.KeyMetadata).toMatchObject({ KeySpec: 'ML_DSA_65', SigningAlgorithms: ['ML_DSA_SHAKE_256'] });
    const spki = await kms.send(new GetPublicKeyCommand({ KeyId: 'alias/pq' }));
    const parsed = parseMlDsaSpki(Buffer.from(spki.PublicKey!));
    expect(parsed?.spec).toBe('ML_DSA_65');
    const publicKey = parsed!.publicKey;

    const message = new TextEncoder().encode('a container image manifest');
    const viaMu = await kms.send(
      new SignCommand({
        KeyId: 'alias/pq',
        Message: externalMu(publicKey, message),
        MessageType: 'EXTERNAL_MU',
        SigningAlgorithm: 'ML_DSA_SHAKE_256',
      }),
    );
    expect(viaMu.SigningAlgorithm).toBe('ML_DSA_SHAKE_256');
    expect(ml_dsa65.verify(viaMu.Signature!, message, publicKey)).toBe(true);

    const raw = await kms.send(
      new SignCommand({
        KeyId: 'alias/pq',
        Message: message,
        MessageType: 'RAW',
        SigningAlgorithm: 'ML_DSA_SHAKE_256',
      }),
    );
    expect(ml_dsa65.verify(raw.Signature!, message, publicKey)).toBe(true);
    expect(ml_dsa65.verify(raw.Signature!, new TextEncoder().encode('another manifest'), publicKey)).toBe(false);
  });

  it('refuses DIGEST for an ML-DSA key and a μ of the wrong length, as KMS does', async () => {
    const digest = new Uint8Array(32);
    await expect(
      kms.send(
        new SignCommand({
          KeyId: 'alias/pq',
          Message: digest,
          MessageType: 'DIGEST',
          SigningAlgorithm: 'ML_DSA_SHAKE_256',
        }),
      ),
    ).rejects.toMatchObject({ name: 'ValidationException', $metadata: { httpStatusCode: 400 } });
    await expect(
      kms.send(
        new SignCommand({
          KeyId: 'alias/pq',
          Message: digest,
          MessageType: 'EXTERNAL_MU',
          SigningAlgorithm: 'ML_DSA_SHAKE_256',
        }),
      ),
    ).rejects.toMatchObject({ name: 'ValidationException' });
  });
});
