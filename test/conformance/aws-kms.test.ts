// The AWS KMS door's conformance: every client of it that can be installed here, pointed at one signbridge service,
// one `describe` a client: the AWS CLI (Debian's awscli, with --endpoint-url, as a build script would use it, with a
// key made by `signbridge admin api-key create --format aws` in a credentials profile), boto3 (Debian's
// python3-boto3, test/fixtures/kms-api/boto3_kms.py), the AWS SDK for JavaScript (@aws-sdk/client-kms), and the
// Go SDK (aws-sdk-go-v2) as cosign's own signer drives it (sigstore's kms/aws, test/fixtures/sigstore-go). Each
// makes the round trip (find the key, get its public key, sign, and check the signature with node:crypto or
// @noble/post-quantum against the key signbridge holds, never against the service's own answer) and meets the
// errors a client reads: not found, access refused, bad input, each under KMS's error name. The refusals in depth
// are test/kms-api/kms-refusals.test.ts's.

import { createHash, createPublicKey, constants as cryptoConstants, verify as cryptoVerify } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DescribeKeyCommand, GetPublicKeyCommand, KMSClient, SignCommand } from '@aws-sdk/client-kms';
import { shake256 } from '@noble/hashes/sha3.js';
import { ml_dsa65 } from '@noble/post-quantum/ml-dsa.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAwsApiKey } from '../../src/auth/aws-credentials/aws-credentials.js';
import { sharedCredentialsSection } from '../../src/auth/aws-credentials/credential-format.js';
import { parseMlDsaSpki } from '../../src/crypto/spki.js';
import { type AwsProfile, credentialsFile, runAws } from '../helpers/aws-cli.js';
import { type Boto3Outcome, botocoreMissing, runBoto3Kms } from '../helpers/botocore.js';
import { runCliAsync } from '../helpers/cli.js';
import { selfSignedCert } from '../helpers/local-servers.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';
import { runSigstoreGo, sigstoreGoMissing } from '../helpers/sigstore-go.js';
import { startTlsTunnel, type TlsTunnel } from '../helpers/tls-tunnel.js';

const missing = botocoreMissing();
const sigstoreMissing = sigstoreGoMissing();
/** Each client signs with tenants of its own, so that its audit entries and keys are its own. */
const TENANTS = {
  'rsa-team': 'RSA_2048',
  'ec-team': 'ECC_NIST_P256',
  'boto-ec': 'ECC_NIST_P256',
  pq: 'ML_DSA_65',
  'cosign-rsa': 'RSA_2048',
  'cosign-ec': 'ECC_NIST_P256',
} as const;

let svc: TestService;
let endpoint: string;
const publicPem: Record<string, string> = {};

beforeAll(async () => {
  svc = await startTestService();
  for (const [tenant, spec] of Object.entries(TENANTS)) {
    const made = await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: tenant, key_spec: spec });
    expect(made.status).toBe(201);
    const admin = await svc.apiKey('admin', tenant);
    publicPem[tenant] = (await callAction(svc.app, admin, 'get_public_key', { tenant_id: tenant })).body
      .public_key_pem as string;
  }
  endpoint = await svc.app.listen({ host: '127.0.0.1', port: 0 });
});
afterAll(async () => svc?.close());

/** An AWS-format signer key of `tenant`, made in-process (the CLI's own path is its first test's). */
async function awsKeyOf(tenant: string): Promise<{ accessKeyId: string; secretAccessKey: string }> {
  return createAwsApiKey(svc.store, svc.keyStore, 'signer', tenant, 'conformance');
}

function digestFile(bytes: Buffer): string {
  const path = join(svc.dataDir, `in-${Math.random().toString(36).slice(2)}.bin`);
  writeFileSync(path, bytes);
  return `fileb://${path}`;
}

/** `aws kms sign` or `verify` arguments: key, message type, algorithm, the message (and signature) as files. */
function kmsArgs(
  op: 'sign' | 'verify',
  keyId: string,
  type: string,
  alg: string,
  message: Buffer,
  signature?: Buffer,
): string[] {
  const signatureArgs = signature ? ['--signature', digestFile(signature)] : [];
  const common = ['--key-id', keyId, '--message-type', type, '--signing-algorithm', alg];
  return ['kms', op, ...common, '--message', digestFile(message), ...signatureArgs];
}

describe.skipIf(missing)('the AWS CLI', () => {
  let profile: AwsProfile;

  beforeAll(async () => {
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

  /** A credentials profile of `tenant` made in-process (the CLI's own path is the one above). */
  async function profileOf(tenant: string): Promise<AwsProfile> {
    const made = await awsKeyOf(tenant);
    const section = sharedCredentialsSection(tenant, made.accessKeyId, made.secretAccessKey);
    return { credentialsFile: credentialsFile(svc.dataDir, section, `credentials-${tenant}`), profile: tenant };
  }

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
      const signed = await runAws(endpoint, profile, kmsArgs('sign', 'alias/rsa-team', c.type, c.alg, c.input));
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

      const verified = await runAws(
        endpoint,
        profile,
        kmsArgs('verify', 'alias/rsa-team', c.type, c.alg, c.input, signature),
      );
      expect(verified.code, verified.stderr).toBe(0);
      expect(verified.json?.SignatureValid).toBe(true);
    }
  });

  it('signs with a P-256 key, DER ECDSA, and refuses a signature of another message in verify', async () => {
    const ecProfile = await profileOf('ec-team');
    const message = Buffer.from('kernel module');
    const signed = await runAws(endpoint, ecProfile, kmsArgs('sign', 'alias/ec-team', 'RAW', 'ECDSA_SHA_256', message));
    expect(signed.code, signed.stderr).toBe(0);
    const signature = Buffer.from(signed.json?.Signature as string, 'base64');
    expect(signature[0]).toBe(0x30); // DER SEQUENCE
    expect(cryptoVerify('sha256', message, publicPem['ec-team']!, signature)).toBe(true);

    const wrong = await runAws(
      endpoint,
      ecProfile,
      kmsArgs('verify', 'alias/ec-team', 'RAW', 'ECDSA_SHA_256', Buffer.from('another module'), signature),
    );
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

  it("answers another tenant's alias as KMS does (NotFoundException) and a digest of the wrong length (ValidationException)", async () => {
    const rsa = await profileOf('rsa-team');
    const notFound = await runAws(endpoint, rsa, ['kms', 'get-public-key', '--key-id', 'alias/ec-team']);
    expect(notFound.code).toBe(254);
    expect(notFound.stderr).toMatch(/\(NotFoundException\) when calling the GetPublicKey operation/);
    const short = await runAws(
      endpoint,
      rsa,
      kmsArgs('sign', 'alias/rsa-team', 'DIGEST', 'RSASSA_PKCS1_V1_5_SHA_256', Buffer.alloc(20)),
    );
    expect(short.code).toBe(254);
    expect(short.stderr).toMatch(/\(ValidationException\) when calling the Sign operation/);
  });
});

function answerOf(outcome: Boto3Outcome | undefined): Record<string, unknown> {
  if (!outcome?.ok) throw new Error(`the call failed: ${JSON.stringify(outcome)}`);
  return outcome.answer;
}

describe.skipIf(missing)("boto3's kms client", () => {
  it('lists, reads the public key, signs a DIGEST with P-256 and verifies; refusals carry KMS error names', async () => {
    const key = await awsKeyOf('boto-ec');
    const who = { access_key: key.accessKeyId, secret_key: key.secretAccessKey, region: 'eu-west-1' };
    const message = Buffer.from('a wheel built by CI');
    const digest = createHash('sha256').update(message).digest().toString('base64');
    const sign = (keyId: string, input = digest) => ({
      ...who,
      op: 'sign',
      params: { KeyId: keyId, Message: input, MessageType: 'DIGEST', SigningAlgorithm: 'ECDSA_SHA_256' },
    });
    const rsaKey = await svc.store.tenants.currentKey('rsa-team');
    const out = await runBoto3Kms(endpoint, [
      { name: 'list', ...who, op: 'list_keys' },
      { name: 'public key', ...who, op: 'get_public_key', params: { KeyId: 'alias/boto-ec' } },
      { name: 'sign', ...sign('alias/boto-ec') },
      { name: 'other alias', ...sign('alias/rsa-team') },
      { name: 'other key arn', ...sign(`arn:aws:kms:eu-west-1:rsa-team:key/${rsaKey!.id}`) },
      { name: 'short digest', ...sign('alias/boto-ec', Buffer.alloc(20).toString('base64')) },
    ]);
    expect(out.list).toMatchObject({ ok: true, answer: { Keys: [{ KeyId: expect.any(String) }] } });
    const spki = createPublicKey({
      key: Buffer.from(answerOf(out['public key']).PublicKey as string, 'base64'),
      format: 'der',
      type: 'spki',
    });
    expect(spki.export({ type: 'spki', format: 'pem' })).toBe(publicPem['boto-ec']);
    const signature = Buffer.from(answerOf(out.sign).Signature as string, 'base64');
    expect(cryptoVerify('sha256', message, spki, signature)).toBe(true);
    // An alias is a name in the caller's own account: another tenant's is not found; its key ARN is not the caller's.
    expect(out['other alias']).toMatchObject({ ok: false, code: 'NotFoundException', status: 400 });
    expect(out['other key arn']).toMatchObject({ ok: false, code: 'AccessDeniedException', status: 400 });
    expect(out['short digest']).toMatchObject({ ok: false, code: 'ValidationException', status: 400 });
  });
});

/** μ = SHAKE256(SHAKE256(pk, 64) || 0x00 || 0x00 || M, 64): pure ML-DSA with an empty context (FIPS 204 §5.2). */
function externalMu(publicKey: Uint8Array, message: Uint8Array): Uint8Array {
  const tr = shake256(publicKey, { dkLen: 64 });
  return shake256(new Uint8Array([...tr, 0, 0, ...message]), { dkLen: 64 });
}

describe('@aws-sdk/client-kms with an ML-DSA key', () => {
  let kms: KMSClient;
  beforeAll(async () => {
    const made = await awsKeyOf('pq');
    kms = new KMSClient({
      endpoint,
      region: 'ap-northeast-1',
      credentials: { accessKeyId: made.accessKeyId, secretAccessKey: made.secretAccessKey },
      maxAttempts: 1,
    });
  });
  afterAll(() => kms?.destroy());

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

  it("answers another tenant's alias with NotFoundException", async () => {
    await expect(kms.send(new GetPublicKeyCommand({ KeyId: 'alias/rsa-team' }))).rejects.toMatchObject({
      name: 'NotFoundException',
    });
  });
});

describe.skipIf(sigstoreMissing)(
  `the Go SDK (aws-sdk-go-v2) through cosign's awskms:// signer${sigstoreMissing ? `: ${sigstoreMissing}` : ''}`,
  () => {
    // sigstore's AWS client always speaks https to the host in the key reference: a TLS front (a stand-in for the proxy
    // a deployment puts in front) whose CA the probe trusts through SSL_CERT_FILE. It signs with an empty SigV4 region.
    let tunnel: TlsTunnel;
    let env: Record<string, string>;
    const message = Buffer.from('sha256:0a1b2c... a container image, as cosign signs it\n');

    beforeAll(async () => {
      const url = new URL(endpoint);
      const tls = selfSignedCert();
      const caFile = join(svc.dataDir, 'ca.pem');
      writeFileSync(caFile, tls.cert);
      tunnel = await startTlsTunnel(Number(url.port), tls);
      env = { SSL_CERT_FILE: caFile, AWS_REGION: 'eu-west-1' };
    });
    afterAll(async () => tunnel?.close());

    async function credentialsFor(tenant: string): Promise<Record<string, string>> {
      const made = await awsKeyOf(tenant);
      return { AWS_ACCESS_KEY_ID: made.accessKeyId, AWS_SECRET_ACCESS_KEY: made.secretAccessKey };
    }

    it('signs with a P-256 key by alias, and the audit entry records the empty region cosign signed with', async () => {
      const signed = await runSigstoreGo(`awskms://${tunnel.host}/alias/cosign-ec`, message, {
        ...env,
        ...(await credentialsFor('cosign-ec')),
      });
      expect(signed.publicKeyPem).toBe(publicPem['cosign-ec']);
      expect(cryptoVerify('sha256', message, publicPem['cosign-ec']!, signed.signature)).toBe(true);
      // Read through the store: on SQLite a signature's row holds its details packed (migration 0032).
      const [entry] = (await svc.store.audit.read(0, 1_000_000)).filter(
        (e) => e.tenantId === 'cosign-ec' && e.outcome === 'signed',
      );
      expect(entry?.details.via).toMatchObject({ api: 'aws-kms', region: '', message_type: 'DIGEST' });
    });

    it('signs with an RSA key by its key id with PKCS#1 v1.5 SHA-256, the first algorithm signbridge lists', async () => {
      const key = await svc.store.tenants.currentKey('cosign-rsa');
      const signed = await runSigstoreGo(`awskms://${tunnel.host}/${key!.id}`, message, {
        ...env,
        ...(await credentialsFor('cosign-rsa')),
      });
      expect(
        cryptoVerify(
          'sha256',
          message,
          { key: publicPem['cosign-rsa']!, padding: cryptoConstants.RSA_PKCS1_PADDING },
          signed.signature,
        ),
      ).toBe(true);
    });

    it("fails with signbridge's refusal when the alias is another tenant's (not found, as at AWS)", async () => {
      await expect(
        runSigstoreGo(`awskms://${tunnel.host}/alias/cosign-rsa`, message, {
          ...env,
          ...(await credentialsFor('cosign-ec')),
        }),
      ).rejects.toThrow(/NotFoundException/);
    });
  },
);
