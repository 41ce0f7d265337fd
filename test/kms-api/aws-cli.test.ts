// The AWS CLI (Debian's awscli) pointed at signbridge with --endpoint-url, as a build script would use it: a key made
// by `signbridge admin api-key create --format aws` in a credentials profile; list-keys, describe-key,
// get-public-key, sign (DIGEST and RAW; RSA PKCS#1 v1.5 and PSS, P-256) and verify. Every signature is checked with
// node:crypto against the public key the service holds, not against the service's own answer.

import { createHash, createPublicKey, constants as cryptoConstants, verify as cryptoVerify } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AwsProfile, credentialsFile, runAws } from '../helpers/aws-cli.js';
import { botocoreMissing } from '../helpers/botocore.js';
import { runCliAsync } from '../helpers/cli.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

const missing = botocoreMissing();
let svc: TestService;
let endpoint: string;
let profile: AwsProfile;
const publicPem: Record<string, string> = {};

async function publicKeyOf(tenant: string): Promise<string> {
  const admin = await svc.apiKey('admin', tenant);
  const res = await callAction(svc.app, admin, 'get_public_key', { tenant_id: tenant });
  return res.body.public_key_pem as string;
}

beforeAll(async () => {
  if (missing) return;
  svc = await startTestService();
  for (const [tenant, spec] of [
    ['rsa-team', 'RSA_2048'],
    ['ec-team', 'ECC_NIST_P256'],
  ] as const) {
    const made = await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: tenant, key_spec: spec });
    expect(made.status).toBe(201);
    publicPem[tenant] = await publicKeyOf(tenant);
  }
  endpoint = await svc.app.listen({ host: '127.0.0.1', port: 0 });
  // The admin command runs as its own process against the service's data dir and token, as an operator would.
  const made = await runCliAsync([
    'admin',
    'api-key',
    'create',
    '--role',
    'signer',
    '--tenant',
    'rsa-team',
    '--format',
    'aws',
    '--profile',
    'builds',
    ...svc.storeArgs,
  ]);
  expect(made.code, made.stderr).toBe(0);
  expect(made.stdout).toMatch(/^\[builds\]\naws_access_key_id = SBAK[0-9A-F]{16}\naws_secret_access_key = \S{40}\n$/);
  profile = { credentialsFile: credentialsFile(svc.dataDir, made.stdout), profile: 'builds' };
});
afterAll(async () => svc?.close());

function digestFile(bytes: Buffer): string {
  const path = join(svc.dataDir, `in-${Math.random().toString(36).slice(2)}.bin`);
  writeFileSync(path, bytes);
  return `fileb://${path}`;
}

describe.skipIf(missing)('the AWS CLI against signbridge', () => {
  it('lists the tenant key, describes it with AWS metadata, and hands out its public key', async () => {
    const list = await runAws(endpoint, profile, ['kms', 'list-keys']);
    expect(list.code, list.stderr).toBe(0);
    const keys = list.json?.Keys as { KeyId: string; KeyArn: string }[];
    expect(keys).toHaveLength(1);
    const keyId = keys[0]!.KeyId;
    expect(keys[0]!.KeyArn).toBe(`arn:aws:kms:eu-central-1:rsa-team:key/${keyId}`);

    const described = await runAws(endpoint, profile, ['kms', 'describe-key', '--key-id', 'alias/rsa-team']);
    expect(described.code, described.stderr).toBe(0);
    const meta = described.json?.KeyMetadata as Record<string, unknown>;
    expect(meta).toMatchObject({
      KeyId: keyId,
      KeySpec: 'RSA_2048',
      KeyUsage: 'SIGN_VERIFY',
      KeyState: 'Enabled',
      Enabled: true,
    });
    // cosign signs with the first: PKCS#1 v1.5 before PSS, as AWS lists them.
    expect((meta.SigningAlgorithms as string[]).slice(0, 4)).toEqual([
      'RSASSA_PKCS1_V1_5_SHA_256',
      'RSASSA_PKCS1_V1_5_SHA_384',
      'RSASSA_PKCS1_V1_5_SHA_512',
      'RSASSA_PSS_SHA_256',
    ]);

    const pub = await runAws(endpoint, profile, ['kms', 'get-public-key', '--key-id', keyId]);
    expect(pub.code, pub.stderr).toBe(0);
    const der = Buffer.from(pub.json?.PublicKey as string, 'base64');
    expect(createPublicKey({ key: der, format: 'der', type: 'spki' }).export({ type: 'spki', format: 'pem' })).toBe(
      publicPem['rsa-team'],
    );
  });

  it('signs DIGEST and RAW messages with PKCS#1 v1.5 and PSS, and verifies them', async () => {
    const message = Buffer.from('release 1.2.3 of the build');
    const cases = [
      { type: 'DIGEST', alg: 'RSASSA_PKCS1_V1_5_SHA_256', input: createHash('sha256').update(message).digest() },
      { type: 'RAW', alg: 'RSASSA_PKCS1_V1_5_SHA_384', input: message },
      { type: 'DIGEST', alg: 'RSASSA_PSS_SHA_256', input: createHash('sha256').update(message).digest() },
      { type: 'RAW', alg: 'RSASSA_PSS_SHA_512', input: message },
    ];
    for (const c of cases) {
      const signed = await runAws(endpoint, profile, [
        'kms',
        'sign',
        '--key-id',
        'alias/rsa-team',
        '--message-type',
        c.type,
        '--signing-algorithm',
        c.alg,
        '--message',
        digestFile(c.input),
      ]);
      expect(signed.code, signed.stderr).toBe(0);
      expect(signed.json?.SigningAlgorithm).toBe(c.alg);
      const signature = Buffer.from(signed.json?.Signature as string, 'base64');
      const hash = `sha${c.alg.slice(-3)}`;
      const pss = c.alg.startsWith('RSASSA_PSS');
      const key = pss
        ? {
            key: publicPem['rsa-team']!,
            padding: cryptoConstants.RSA_PKCS1_PSS_PADDING,
            saltLength: Number(hash.slice(3)) / 8,
          }
        : publicPem['rsa-team']!;
      expect(cryptoVerify(hash, message, key, signature), `${c.type} ${c.alg}`).toBe(true);

      const verified = await runAws(endpoint, profile, [
        'kms',
        'verify',
        '--key-id',
        'alias/rsa-team',
        '--message-type',
        c.type,
        '--signing-algorithm',
        c.alg,
        '--message',
        digestFile(c.input),
        '--signature',
        digestFile(signature),
      ]);
      expect(verified.code, verified.stderr).toBe(0);
      expect(verified.json?.SignatureValid).toBe(true);
    }
  });

  it('signs with a P-256 key, DER ECDSA, and refuses a signature of another message in verify', async () => {
    const ecProfile = await awsKeyFor('ec-team');
    const message = Buffer.from('kernel module');
    const signed = await runAws(endpoint, ecProfile, [
      'kms',
      'sign',
      '--key-id',
      'alias/ec-team',
      '--message-type',
      'RAW',
      '--signing-algorithm',
      'ECDSA_SHA_256',
      '--message',
      digestFile(message),
    ]);
    expect(signed.code, signed.stderr).toBe(0);
    const signature = Buffer.from(signed.json?.Signature as string, 'base64');
    expect(signature[0]).toBe(0x30); // DER SEQUENCE
    expect(cryptoVerify('sha256', message, publicPem['ec-team']!, signature)).toBe(true);

    const wrong = await runAws(endpoint, ecProfile, [
      'kms',
      'verify',
      '--key-id',
      'alias/ec-team',
      '--message-type',
      'RAW',
      '--signing-algorithm',
      'ECDSA_SHA_256',
      '--message',
      digestFile(Buffer.from('another module')),
      '--signature',
      digestFile(signature),
    ]);
    expect(wrong.code).toBe(254);
    expect(wrong.stderr).toContain('(KMSInvalidSignatureException)');
  });

  it('lists the key with its access key id, and once revoked with admin api-key revoke the CLI is refused', async () => {
    const list = await runCliAsync(['admin', 'api-key', 'list', ...svc.storeArgs]);
    expect(list.code, list.stderr).toBe(0);
    const accessKeyId = /aws_access_key_id = (\S+)/.exec(readFileSync(profile.credentialsFile, 'utf8'))?.[1] as string;
    const line = list.stdout.split('\n').find((l) => l.includes(`[aws ${accessKeyId}]`));
    expect(line, list.stdout).toBeDefined();
    const id = line!.split('\t')[0] as string;
    expect(accessKeyId).toBe(`SBAK${id.toUpperCase()}`);
    const revoked = await runCliAsync(['admin', 'api-key', 'revoke', id, ...svc.storeArgs]);
    expect(revoked.code, revoked.stderr).toBe(0);
    const refused = await runAws(endpoint, profile, ['kms', 'list-keys']);
    expect(refused.code).toBe(254);
    expect(refused.stderr).toMatch(/\(UnrecognizedClientException\) when calling the ListKeys operation/);
  });
});

/** An AWS-format signer key of `tenant`, made in-process (the CLI path is the first test's). */
async function awsKeyFor(tenant: string): Promise<AwsProfile> {
  const { createAwsApiKey } = await import('../../src/auth/aws-credentials/aws-credentials.js');
  const { sharedCredentialsSection } = await import('../../src/auth/aws-credentials/credential-format.js');
  const made = await createAwsApiKey(svc.store, svc.keyStore, 'signer', tenant, 'test');
  const section = sharedCredentialsSection(tenant, made.accessKeyId, made.secretAccessKey);
  return { credentialsFile: credentialsFile(svc.dataDir, section, `credentials-${tenant}`), profile: tenant };
}
