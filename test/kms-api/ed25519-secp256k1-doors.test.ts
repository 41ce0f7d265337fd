// The KMS and Vault doors for ECC_NIST_EDWARDS25519 and ECC_SECG_P256K1, as AWS and Vault define them, through real
// clients: boto3 (DescribeKey's SigningAlgorithms in AWS's order, GetPublicKey, Sign and Verify: pure Ed25519 over a
// RAW message, Ed25519ph over a DIGEST, secp256k1's ECDSA_SHA_256), the JS SDK v3 (one pure Ed25519 RAW sign), and
// hvac (Vault transit `ed25519` keys: sign and verify the message itself). Every signature is checked independently
// of the service: node:crypto for pure Ed25519 and secp256k1, @noble/curves' ed25519ph for Ed25519ph. Every bad
// request has the door's own error and signs nothing; a pure Ed25519 request the policy would hold is refused (the
// message is not kept to be signed on approval: docs/kms-api.md).

import { createHash, createPublicKey, verify } from 'node:crypto';
import { KMSClient, SignCommand } from '@aws-sdk/client-kms';
import { ed25519ph } from '@noble/curves/ed25519.js';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAwsApiKey } from '../../src/auth/aws-credentials/aws-credentials.js';
import type { PolicyEngine, PolicyInput } from '../../src/policy/policy.js';
import { type Boto3Outcome, botocoreMissing, runBoto3Kms } from '../helpers/botocore.js';
import { hvacMissing, runHvac } from '../helpers/hvac.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

const boto3Missing = botocoreMissing();
const hvacIsMissing = hvacMissing();

const TENANTS = {
  ed: 'ECC_NIST_EDWARDS25519',
  k1: 'ECC_SECG_P256K1',
  'ed-held': 'ECC_NIST_EDWARDS25519',
} as const;

/** Tenant ed-held waits for a person's decision; the others are allowed. */
const policy: PolicyEngine = {
  async evaluate(input: PolicyInput) {
    if (input.tenantId === 'ed-held') {
      return { outcome: 'pending_approval', rule: 'two-person', reason: 'needs a second person' };
    }
    return { outcome: 'allow', rule: 'default', reason: 'allowed' };
  },
};

let svc: TestService;
let endpoint: string;
const pems: Record<string, string> = {};

beforeAll(async () => {
  svc = await startTestService({ policy, kmsApi: { enabled: true, heldWaitMs: 500, vaultMount: 'transit' } });
  const admin = await svc.apiKey('admin', null);
  for (const [tenant, spec] of Object.entries(TENANTS)) {
    const made = await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: tenant, key_spec: spec });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    pems[tenant] = (await callAction(svc.app, admin, 'get_public_key', { tenant_id: tenant })).body
      .public_key_pem as string;
  }
  endpoint = await svc.app.listen({ host: '127.0.0.1', port: 0 });
}, 120_000);
afterAll(async () => svc?.close());

async function signedEntries(): Promise<number> {
  const rows = await svc.run<{ n: number }>(sql`SELECT count(*) AS n FROM audit_log WHERE outcome = 'signed'`);
  return Number(rows[0]?.n);
}

/** The 32-byte Ed25519 public key A of a PEM SPKI. */
function rawEd25519(pem: string): Buffer {
  return Buffer.from(createPublicKey(pem).export({ format: 'jwk' }).x as string, 'base64url');
}

function answerOf(outcome: Boto3Outcome | undefined): Record<string, unknown> {
  if (!outcome?.ok) throw new Error(`the call failed: ${JSON.stringify(outcome)}`);
  return outcome.answer;
}

function errorOf(outcome: Boto3Outcome | undefined): { code: string; message: string } {
  if (!outcome || outcome.ok) throw new Error(`the call did not fail: ${JSON.stringify(outcome)}`);
  return outcome;
}

const sha = (alg: string, data: Buffer) => createHash(alg).update(data).digest();
const b64 = (data: Buffer) => data.toString('base64');

describe.skipIf(boto3Missing)("boto3's kms client", () => {
  it('describes both specs as AWS does and hands out their public keys', async () => {
    const who = await boto3Who('ed');
    const out = await runBoto3Kms(endpoint, [
      { name: 'ed', ...who, op: 'describe_key', params: { KeyId: 'alias/ed' } },
      { name: 'k1', ...who, op: 'describe_key', params: { KeyId: 'alias/k1' } },
      { name: 'ed public', ...who, op: 'get_public_key', params: { KeyId: 'alias/ed' } },
    ]);
    // k1 belongs to another tenant: this key may not describe it.
    expect(errorOf(out.k1).code).toBe('NotFoundException');
    expect(answerOf(out.ed).KeyMetadata).toMatchObject({
      KeySpec: 'ECC_NIST_EDWARDS25519',
      SigningAlgorithms: ['ED25519_SHA_512', 'ED25519_PH_SHA_512'],
      KeyUsage: 'SIGN_VERIFY',
    });
    const pub = answerOf(out['ed public']);
    expect(pub).toMatchObject({
      KeySpec: 'ECC_NIST_EDWARDS25519',
      SigningAlgorithms: ['ED25519_SHA_512', 'ED25519_PH_SHA_512'],
    });
    const spki = createPublicKey({ key: Buffer.from(pub.PublicKey as string, 'base64'), format: 'der', type: 'spki' });
    expect(spki.asymmetricKeyType).toBe('ed25519');
    expect(rawEd25519(spki.export({ format: 'pem', type: 'spki' }) as string)).toEqual(rawEd25519(pems.ed as string));

    const k1 = await boto3Who('k1');
    const k1Out = await runBoto3Kms(endpoint, [
      { name: 'k1', ...k1, op: 'describe_key', params: { KeyId: 'alias/k1' } },
      { name: 'k1 public', ...k1, op: 'get_public_key', params: { KeyId: 'alias/k1' } },
    ]);
    expect(answerOf(k1Out.k1).KeyMetadata).toMatchObject({
      KeySpec: 'ECC_SECG_P256K1',
      SigningAlgorithms: ['ECDSA_SHA_256'],
    });
    const k1Key = createPublicKey({
      key: Buffer.from(answerOf(k1Out['k1 public']).PublicKey as string, 'base64'),
      format: 'der',
      type: 'spki',
    });
    expect(k1Key.asymmetricKeyDetails?.namedCurve).toBe('secp256k1');
  });

  it('signs pure Ed25519 over a RAW message and Ed25519ph over its SHA-512 DIGEST; Verify takes both', async () => {
    const who = await boto3Who('ed');
    const message = Buffer.from('a release of 2026, signed with Ed25519');
    const sign = (algorithm: string, type: string, input: Buffer) => ({
      ...who,
      op: 'sign',
      params: { KeyId: 'alias/ed', Message: b64(input), MessageType: type, SigningAlgorithm: algorithm },
    });
    const before = await signedEntries();
    const out = await runBoto3Kms(endpoint, [
      { name: 'pure', ...sign('ED25519_SHA_512', 'RAW', message) },
      { name: 'ph', ...sign('ED25519_PH_SHA_512', 'DIGEST', sha('sha512', message)) },
    ]);
    const pure = Buffer.from(answerOf(out.pure).Signature as string, 'base64');
    const ph = Buffer.from(answerOf(out.ph).Signature as string, 'base64');
    expect(answerOf(out.pure).SigningAlgorithm).toBe('ED25519_SHA_512');
    const key = createPublicKey(pems.ed as string);
    expect(verify(null, message, key, pure)).toBe(true);
    expect(verify(null, Buffer.from('another message'), key, pure)).toBe(false);
    expect(ed25519ph.verify(ph, message, rawEd25519(pems.ed as string))).toBe(true);
    expect(await signedEntries()).toBe(before + 2);

    // The `signed` entry of the pure signature names the message's SHA-512, never the message.
    // Read through the store: on SQLite a signature's row holds its details packed (migration 0032).
    const details = (await svc.store.audit.read(0, 1_000_000))
      .filter((e) => e.outcome === 'signed' && e.tenantId === 'ed')
      .map((e) => e.details);
    expect(details.some((d) => d.hash === b64(sha('sha512', message)))).toBe(true);
    expect(JSON.stringify(details)).not.toContain(b64(message));

    const verifyCall = (name: string, algorithm: string, type: string, input: Buffer, signature: Buffer) => ({
      name,
      ...who,
      op: 'verify',
      params: {
        KeyId: 'alias/ed',
        Message: b64(input),
        MessageType: type,
        SigningAlgorithm: algorithm,
        Signature: b64(signature),
      },
    });
    const checks = await runBoto3Kms(endpoint, [
      verifyCall('pure', 'ED25519_SHA_512', 'RAW', message, pure),
      verifyCall('ph', 'ED25519_PH_SHA_512', 'DIGEST', sha('sha512', message), ph),
      verifyCall('pure, other message', 'ED25519_SHA_512', 'RAW', Buffer.from('other'), pure),
    ]);
    expect(answerOf(checks.pure)).toMatchObject({ SignatureValid: true, SigningAlgorithm: 'ED25519_SHA_512' });
    expect(answerOf(checks.ph)).toMatchObject({ SignatureValid: true, SigningAlgorithm: 'ED25519_PH_SHA_512' });
    expect(errorOf(checks['pure, other message']).code).toBe('KMSInvalidSignatureException');
  });

  it('signs secp256k1 with ECDSA_SHA_256 over a DIGEST and a RAW message, checked by node:crypto', async () => {
    const who = await boto3Who('k1');
    const message = Buffer.from('a blockchain transaction');
    const sign = (type: string, input: Buffer) => ({
      ...who,
      op: 'sign',
      params: { KeyId: 'alias/k1', Message: b64(input), MessageType: type, SigningAlgorithm: 'ECDSA_SHA_256' },
    });
    const out = await runBoto3Kms(endpoint, [
      { name: 'digest', ...sign('DIGEST', sha('sha256', message)) },
      { name: 'raw', ...sign('RAW', message) },
    ]);
    const key = createPublicKey(pems.k1 as string);
    for (const name of ['digest', 'raw']) {
      const signature = Buffer.from(answerOf(out[name]).Signature as string, 'base64');
      expect(verify('sha256', message, key, signature), name).toBe(true);
    }
  });

  it('refuses what AWS refuses, under its error names, and signs nothing', async () => {
    const ed = await boto3Who('ed');
    const k1 = await boto3Who('k1');
    const message = Buffer.from('not to be signed');
    const sign = (
      who: Awaited<ReturnType<typeof boto3Who>>,
      keyId: string,
      algorithm: string,
      type: string,
      input: Buffer,
    ) => ({
      ...who,
      op: 'sign',
      params: { KeyId: keyId, Message: b64(input), MessageType: type, SigningAlgorithm: algorithm },
    });
    const before = await signedEntries();
    const out = await runBoto3Kms(endpoint, [
      { name: 'pure with DIGEST', ...sign(ed, 'alias/ed', 'ED25519_SHA_512', 'DIGEST', sha('sha512', message)) },
      { name: 'ph with RAW', ...sign(ed, 'alias/ed', 'ED25519_PH_SHA_512', 'RAW', message) },
      { name: 'ph short digest', ...sign(ed, 'alias/ed', 'ED25519_PH_SHA_512', 'DIGEST', sha('sha256', message)) },
      { name: 'raw past 4096', ...sign(ed, 'alias/ed', 'ED25519_SHA_512', 'RAW', Buffer.alloc(4097, 1)) },
      { name: 'ecdsa on ed', ...sign(ed, 'alias/ed', 'ECDSA_SHA_256', 'DIGEST', sha('sha256', message)) },
      { name: 'ed on k1', ...sign(k1, 'alias/k1', 'ED25519_SHA_512', 'RAW', message) },
      { name: 'k1 sha384', ...sign(k1, 'alias/k1', 'ECDSA_SHA_384', 'DIGEST', sha('sha384', message)) },
    ]);
    expect(errorOf(out['pure with DIGEST'])).toMatchObject({
      code: 'ValidationException',
      message: expect.stringContaining('ED25519_SHA_512 signing algorithm requires MessageType RAW'),
    });
    expect(errorOf(out['ph with RAW'])).toMatchObject({
      code: 'ValidationException',
      message: expect.stringContaining('ED25519_PH_SHA_512 signing algorithm requires MessageType DIGEST'),
    });
    expect(errorOf(out['ph short digest'])).toMatchObject({
      code: 'ValidationException',
      message: expect.stringContaining('needs 64 bytes, got 32'),
    });
    // botocore itself does not check the blob's length: the service refuses it.
    expect(errorOf(out['raw past 4096']).code).toBe('ValidationException');
    expect(errorOf(out['ecdsa on ed']).code).toBe('InvalidKeyUsageException');
    expect(errorOf(out['ed on k1']).code).toBe('InvalidKeyUsageException');
    expect(errorOf(out['k1 sha384']).code).toBe('InvalidKeyUsageException');
    expect(await signedEntries()).toBe(before);
  });

  it('refuses a pure Ed25519 request the policy would hold (its message is not kept), and signs nothing', async () => {
    const who = await boto3Who('ed-held');
    const message = Buffer.from('needs a second person');
    const before = await signedEntries();
    const out = await runBoto3Kms(endpoint, [
      {
        name: 'held pure',
        ...who,
        op: 'sign',
        params: {
          KeyId: 'alias/ed-held',
          Message: b64(message),
          MessageType: 'RAW',
          SigningAlgorithm: 'ED25519_SHA_512',
        },
      },
    ]);
    expect(errorOf(out['held pure'])).toMatchObject({
      code: 'AccessDeniedException',
      message: expect.stringContaining('cannot be held'),
    });
    const pending = await svc.run<{ n: number }>(
      sql`SELECT count(*) AS n FROM pending_requests WHERE tenant_id = 'ed-held'`,
    );
    expect(Number(pending[0]?.n)).toBe(0);
    expect(await signedEntries()).toBe(before);
  });
});

async function boto3Who(tenant: string) {
  const key = await createAwsApiKey(svc.store, svc.keyStore, 'signer', tenant, 'ed25519-doors');
  return { access_key: key.accessKeyId, secret_key: key.secretAccessKey, region: 'eu-central-1' };
}

describe('@aws-sdk/client-kms with an Ed25519 key', () => {
  it('signs a RAW message with ED25519_SHA_512, checked by node:crypto', async () => {
    const made = await createAwsApiKey(svc.store, svc.keyStore, 'signer', 'ed', 'ed25519-doors-sdk');
    const kms = new KMSClient({
      endpoint,
      region: 'eu-central-1',
      credentials: { accessKeyId: made.accessKeyId, secretAccessKey: made.secretAccessKey },
      maxAttempts: 1,
    });
    try {
      const message = new TextEncoder().encode('signed by the JS SDK');
      const signed = await kms.send(
        new SignCommand({
          KeyId: 'alias/ed',
          Message: message,
          MessageType: 'RAW',
          SigningAlgorithm: 'ED25519_SHA_512',
        }),
      );
      expect(signed.SigningAlgorithm).toBe('ED25519_SHA_512');
      const signature = Buffer.from(signed.Signature as Uint8Array);
      expect(signature.length).toBe(64);
      expect(verify(null, message, createPublicKey(pems.ed as string), signature)).toBe(true);
    } finally {
      kms.destroy();
    }
  });
});

describe.skipIf(hvacIsMissing)('hvac with Vault transit ed25519 keys', () => {
  let url: string;
  const tokens: Record<string, string> = {};
  beforeAll(async () => {
    url = endpoint;
    for (const tenant of ['ed', 'k1']) tokens[tenant] = await svc.apiKey('signer', tenant);
  });

  it('reads the key as type ed25519, signs the message itself (pure Ed25519) and verifies it', async () => {
    const message = Buffer.from('a vault-signed artifact');
    const results = await runHvac(url, tokens.ed as string, [
      { method: 'read_key', kwargs: { name: 'ed' } },
      { method: 'sign_data', kwargs: { name: 'ed', hash_input: b64(message) } },
      // Vault ignores hash_algorithm for an ed25519 key: still the message itself.
      { method: 'sign_data', kwargs: { name: 'ed', hash_input: b64(message), hash_algorithm: 'sha2-512' } },
      {
        method: 'post',
        path: '/v1/transit/sign/ed',
        json: { batch_input: [{ input: b64(message) }, { input: b64(Buffer.from('second')) }] },
      },
    ]);
    for (const r of results) expect(r.error, JSON.stringify(r.error)).toBeUndefined();
    const [read, signed, withHash, batch] = results;
    expect(read?.ok.data.type).toBe('ed25519');
    const key = createPublicKey(pems.ed as string);
    const bytes = (s: string) => Buffer.from(s.split(':')[2] as string, 'base64');
    const signature = signed?.ok.data.signature as string;
    expect(signature).toMatch(/^vault:v1:/);
    expect(verify(null, message, key, bytes(signature))).toBe(true);
    expect(verify(null, message, key, bytes(withHash?.ok.data.signature))).toBe(true);
    const items = batch?.ok.data.batch_results as { signature: string }[];
    expect(verify(null, message, key, bytes(items[0]?.signature as string))).toBe(true);
    expect(verify(null, Buffer.from('second'), key, bytes(items[1]?.signature as string))).toBe(true);

    const checks = await runHvac(url, tokens.ed as string, [
      { method: 'verify_signed_data', kwargs: { name: 'ed', hash_input: b64(message), signature } },
      { method: 'verify_signed_data', kwargs: { name: 'ed', hash_input: b64(Buffer.from('x')), signature } },
    ]);
    expect(checks.map((c) => c.ok?.data.valid)).toEqual([true, false]);
  });

  it('refuses prehashed for ed25519 and a secp256k1 key, in Vault shape, and signs nothing', async () => {
    const before = await signedEntries();
    const message = Buffer.from('not to be signed');
    const [prehashed] = await runHvac(url, tokens.ed as string, [
      {
        method: 'sign_data',
        kwargs: { name: 'ed', hash_input: b64(sha('sha512', message)), prehashed: true },
      },
    ]);
    expect(prehashed?.error).toMatchObject({
      type: 'InvalidRequest',
      errors: [expect.stringContaining('prehashed is not supported for key type ed25519')],
    });
    const [k1] = await runHvac(url, tokens.k1 as string, [
      { method: 'sign_data', kwargs: { name: 'k1', hash_input: b64(message) } },
    ]);
    expect(k1?.error).toMatchObject({
      type: 'InvalidRequest',
      errors: [expect.stringContaining('key type ecdsa-secp256k1 does not support signing')],
    });
    const [tooLong] = await runHvac(url, tokens.ed as string, [
      { method: 'sign_data', kwargs: { name: 'ed', hash_input: b64(Buffer.alloc(4097, 2)) } },
    ]);
    expect(tooLong?.error?.type).toBe('InvalidRequest');
    expect(await signedEntries()).toBe(before);
  });
});
