// cosign's own AWS KMS signer (sigstore's kms.Get + SignMessage, Debian's golang-github-sigstore-sigstore-dev 1.4.0,
// built by scripts/build-sigstore-probe.sh) against the KMS double behind a TLS front with a test CA: what the client
// sends and insists on, so that signbridge's KMS front door can be held to it. Signatures are checked with
// node:crypto against the double's own GetPublicKey answer.
import { constants, createHash, createPublicKey, verify } from 'node:crypto';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  CreateAliasCommand,
  CreateKeyCommand,
  DescribeKeyCommand,
  GetPublicKeyCommand,
  KMSClient,
  type KeySpec as KmsKeySpec,
} from '@aws-sdk/client-kms';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type KmsDouble, startKmsDouble } from '../helpers/kms-double/kms-double.js';
import { type LocalServer, selfSignedCert, startServer } from '../helpers/local-servers.js';
import { makeTempDir } from '../helpers/service.js';
import { runSigstoreGo, sigstoreGoMissing } from '../helpers/sigstore-go.js';
import { startTlsTunnel, type TlsTunnel } from '../helpers/tls-tunnel.js';

const missing = sigstoreGoMissing();
const message = Buffer.from('a container image digest, as cosign signs it\n');
// STS's answer to AssumeRoleWithWebIdentity, as the service model shapes it (the double has no STS).
const STS_ANSWER =
  '<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><AssumeRoleWithWebIdentityResult>' +
  '<Credentials><AccessKeyId>ASIATEMPORARYPROBE</AccessKeyId><SecretAccessKey>temporary-secret</SecretAccessKey>' +
  `<SessionToken>session-token-of-the-job</SessionToken><Expiration>${new Date(Date.now() + 3_600_000).toISOString()}` +
  '</Expiration></Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>';
const credentials = { AWS_ACCESS_KEY_ID: 'AKIDSIGSTOREPROBE', AWS_SECRET_ACCESS_KEY: 'probe-secret' };

describe.skipIf(missing)(`sigstore's awskms:// signer (cosign's code path)${missing ? `: ${missing}` : ''}`, () => {
  const dir = makeTempDir('sb-sigstore-go-');
  const caFile = join(dir, 'ca.pem');
  let double: KmsDouble;
  let front: LocalServer;
  let tunnel: TlsTunnel;
  let kms: KMSClient;
  const keyIds: Record<string, string> = {};

  async function createKey(spec: KmsKeySpec, alias: string): Promise<string> {
    const created = await kms.send(new CreateKeyCommand({ KeySpec: spec, KeyUsage: 'SIGN_VERIFY' }));
    const keyId = created.KeyMetadata!.KeyId!;
    await kms.send(new CreateAliasCommand({ AliasName: alias, TargetKeyId: keyId }));
    return keyId;
  }

  async function publicKeyOf(keyId: string): Promise<string> {
    const answer = await kms.send(new GetPublicKeyCommand({ KeyId: keyId }));
    return createPublicKey({ key: Buffer.from(answer.PublicKey!), format: 'der', type: 'spki' })
      .export({ format: 'pem', type: 'spki' })
      .toString();
  }

  const host = () => tunnel.host;
  const targets = () => front.requests.map((r) => String(r.headers['x-amz-target']));

  beforeAll(async () => {
    double = await startKmsDouble();
    const tls = selfSignedCert();
    writeFileSync(caFile, tls.cert);
    // cosign's AWS client speaks only https to the host of its key reference: a TLS tunnel, then a plain server
    // that records what arrived and hands it to the double.
    front = await startServer((req, res) => {
      const seen = front.requests.at(-1)!;
      if (seen.body.startsWith('Action=AssumeRoleWithWebIdentity&')) {
        res.writeHead(200, { 'content-type': 'text/xml' });
        res.end(STS_ANSWER);
        return;
      }
      fetch(`${double.url}${req.url}`, {
        method: 'POST',
        headers: {
          'content-type': String(req.headers['content-type']),
          'x-amz-target': String(req.headers['x-amz-target']),
        },
        body: seen.body,
      })
        .then(async (answer) => {
          res.writeHead(answer.status, { 'content-type': 'application/x-amz-json-1.1' });
          res.end(Buffer.from(await answer.arrayBuffer()));
        })
        .catch(() => res.destroy());
    });
    tunnel = await startTlsTunnel(front.port, tls);
    kms = new KMSClient({
      endpoint: double.url,
      region: 'us-east-1',
      credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    });
    keyIds.p256 = await createKey('ECC_NIST_P256', 'alias/t1');
    keyIds.rsa = await createKey('RSA_2048', 'alias/t2');
  });
  afterAll(async () => {
    kms?.destroy();
    await tunnel?.close();
    await front?.close();
    await double?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('signs a P-256 key by alias: GetPublicKey, DescribeKey, then Sign of the SHA-256 digest (MessageType DIGEST)', async () => {
    front.requests.length = 0;
    const result = await runSigstoreGo(`awskms://${host()}/alias/t1`, message, {
      ...credentials,
      AWS_REGION: 'eu-west-1',
      SSL_CERT_FILE: caFile,
    });
    const publicKeyPem = await publicKeyOf(keyIds.p256!);
    expect(result.publicKeyPem).toBe(publicKeyPem);
    expect(verify('sha256', message, publicKeyPem, result.signature)).toBe(true);
    expect(verify('sha256', Buffer.from('another message'), publicKeyPem, result.signature)).toBe(false);
    expect(result.verified).toBe(true);

    expect(targets()).toEqual(['TrentService.GetPublicKey', 'TrentService.DescribeKey', 'TrentService.Sign']);
    const sign = JSON.parse(front.requests[2]!.body) as Record<string, string>;
    expect(sign).toEqual({
      KeyId: 'alias/t1',
      Message: createHash('sha256').update(message).digest('base64'),
      MessageType: 'DIGEST',
      SigningAlgorithm: 'ECDSA_SHA_256',
    });
    for (const request of front.requests) {
      expect(request.url).toBe('/');
      expect(request.headers.host).toBe(tunnel.host); // signed: the tunnel passes it through unchanged
      expect(request.headers['content-type']).toBe('application/x-amz-json-1.1');
      // sigstore 1.4.0 resolves the endpoint itself and leaves the signing region empty, whatever AWS_REGION says:
      // the credential scope is <key id>/<date>//kms/aws4_request.
      expect(request.headers.authorization).toMatch(
        /^AWS4-HMAC-SHA256 Credential=AKIDSIGSTOREPROBE\/\d{8}\/\/kms\/aws4_request, /,
      );
    }
  });

  // AWS lists PKCS#1 v1.5 first for RSA (so cosign signs PKCS#1 v1.5 there); the double lists PSS first. Either way
  // the client takes the first, so signbridge must keep AWS's order.
  it('signs an RSA key by key id with the first algorithm DescribeKey lists', async () => {
    front.requests.length = 0;
    const result = await runSigstoreGo(`awskms://${host()}/${keyIds.rsa}`, message, {
      ...credentials,
      AWS_CA_BUNDLE: caFile,
    });
    const described = await kms.send(new DescribeKeyCommand({ KeyId: keyIds.rsa }));
    const first = described.KeyMetadata!.SigningAlgorithms![0]!;
    const sign = JSON.parse(front.requests.at(-1)!.body) as Record<string, string>;
    expect(sign.KeyId).toBe(keyIds.rsa);
    expect(sign.SigningAlgorithm).toBe(first);
    const key = createPublicKey(await publicKeyOf(keyIds.rsa!));
    const padding = first.startsWith('RSASSA_PSS')
      ? { padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: 32 }
      : { padding: constants.RSA_PKCS1_PADDING };
    expect(verify('sha256', message, { key, ...padding }, result.signature)).toBe(true);
    expect(result.verified).toBe(true);
  });

  it('takes a key ARN only with a 12-digit account: any other is refused before a request is sent', async () => {
    const arn = (account: string) => `awskms://${host()}/arn:aws:kms:us-east-1:${account}:key/${keyIds.p256}`;
    const env = { ...credentials, SSL_CERT_FILE: caFile };
    front.requests.length = 0;
    await expect(runSigstoreGo(arn('t1'), message, env)).rejects.toThrow(/kms specification should be in the format/);
    expect(front.requests).toHaveLength(0);
    // The double answers an ARN's key id whatever its account.
    const result = await runSigstoreGo(arn('123456789012'), message, env);
    expect(verify('sha256', message, await publicKeyOf(keyIds.p256!), result.signature)).toBe(true);
  });

  it('signs in with a web identity token at the same https://HOST/ (STS, unsigned form), then sends the session token', async () => {
    const tokenFile = join(dir, 'ci-token');
    writeFileSync(tokenFile, 'the.job-oidc.token');
    front.requests.length = 0;
    const result = await runSigstoreGo(`awskms://${host()}/alias/t1`, message, {
      AWS_ROLE_ARN: 'arn:aws:iam::t1:role/release',
      AWS_WEB_IDENTITY_TOKEN_FILE: tokenFile,
      SSL_CERT_FILE: caFile,
    });
    expect(verify('sha256', message, await publicKeyOf(keyIds.p256!), result.signature)).toBe(true);

    const [signIn, ...calls] = front.requests;
    expect(signIn!.url).toBe('/');
    expect(signIn!.headers['content-type']).toBe('application/x-www-form-urlencoded');
    expect(signIn!.headers.authorization).toBeUndefined();
    const form = Object.fromEntries(new URLSearchParams(signIn!.body));
    expect(form).toEqual({
      Action: 'AssumeRoleWithWebIdentity',
      Version: '2011-06-15',
      RoleArn: 'arn:aws:iam::t1:role/release',
      RoleSessionName: expect.stringMatching(/^\d+$/),
      WebIdentityToken: 'the.job-oidc.token',
    });
    expect(calls.map((r) => String(r.headers['x-amz-target']))).toEqual([
      'TrentService.GetPublicKey',
      'TrentService.DescribeKey',
      'TrentService.Sign',
    ]);
    for (const call of calls) {
      expect(call.headers['x-amz-security-token']).toBe('session-token-of-the-job');
      expect(call.headers.authorization).toMatch(
        /Credential=ASIATEMPORARYPROBE\/\d{8}\/\/kms\/aws4_request, SignedHeaders=[^,]*x-amz-security-token/,
      );
    }
  });

  it('refuses a server its CA bundle does not vouch for, and passes on KMS error types', async () => {
    front.requests.length = 0;
    const connectionsBefore = tunnel.connections;
    await expect(runSigstoreGo(`awskms://${host()}/alias/t1`, message, credentials)).rejects.toThrow(
      /x509: certificate signed by unknown authority/,
    );
    expect(front.requests).toHaveLength(0);
    expect(tunnel.connections).toBe(connectionsBefore);
    await expect(
      runSigstoreGo(`awskms://${host()}/alias/nobody`, message, { ...credentials, SSL_CERT_FILE: caFile }),
    ).rejects.toThrow(/StatusCode: 400, .*NotFoundException/);
  });
});
