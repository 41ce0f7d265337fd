// cosign's own AWS KMS signer against signbridge: the sigstore project's `kms.Get(awskms://HOST/alias/<tenant>)`
// and SignMessage (Debian's golang-github-sigstore-sigstore-dev, built offline by scripts/build-sigstore-probe.sh),
// over https through a TLS front (a stand-in for the proxy a deployment puts in front; the client trusts the test
// CA through SSL_CERT_FILE), with an AWS-format key. It signs with an empty SigV4 region, reads GetPublicKey and
// DescribeKey and signs DIGEST with the first SigningAlgorithm: PKCS#1 v1.5 SHA-256 for RSA, as against AWS.
// Signatures are checked with node:crypto against the key signbridge holds. hashivault:// is not in Debian's
// package (test/fixtures/sigstore-go/README.md); Vault transit is tested with hvac instead.

import { constants, verify } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAwsApiKey } from '../../src/auth/aws-credentials/aws-credentials.js';
import { selfSignedCert } from '../helpers/local-servers.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';
import { runSigstoreGo, sigstoreGoMissing } from '../helpers/sigstore-go.js';
import { startTlsTunnel, type TlsTunnel } from '../helpers/tls-tunnel.js';

const missing = sigstoreGoMissing();
const message = Buffer.from('sha256:0a1b2c... a container image, as cosign signs it\n');

describe.skipIf(missing)(`cosign's awskms:// signer against signbridge${missing ? `: ${missing}` : ''}`, () => {
  let svc: TestService;
  let tunnel: TlsTunnel;
  let env: Record<string, string>;
  const publicPem: Record<string, string> = {};

  beforeAll(async () => {
    svc = await startTestService();
    for (const [tenant, spec] of [
      ['cosign-rsa', 'RSA_2048'],
      ['cosign-ec', 'ECC_NIST_P256'],
    ] as const) {
      expect(
        (await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: tenant, key_spec: spec })).status,
      ).toBe(201);
      const admin = await svc.apiKey('admin', tenant);
      publicPem[tenant] = (await callAction(svc.app, admin, 'get_public_key', { tenant_id: tenant })).body
        .public_key_pem as string;
    }
    const url = new URL(await svc.app.listen({ host: '127.0.0.1', port: 0 }));
    const tls = selfSignedCert();
    const caFile = join(svc.dataDir, 'ca.pem');
    writeFileSync(caFile, tls.cert);
    tunnel = await startTlsTunnel(Number(url.port), tls);
    env = { SSL_CERT_FILE: caFile, AWS_REGION: 'eu-west-1' };
  });
  afterAll(async () => {
    await tunnel?.close();
    await svc?.close();
  });

  async function credentialsFor(tenant: string): Promise<Record<string, string>> {
    const made = await createAwsApiKey(svc.store, svc.keyStore, 'signer', tenant, 'cosign');
    return { AWS_ACCESS_KEY_ID: made.accessKeyId, AWS_SECRET_ACCESS_KEY: made.secretAccessKey };
  }

  it('signs with a P-256 key by alias, and the audit entry records the empty region cosign signed with', async () => {
    const signed = await runSigstoreGo(`awskms://${tunnel.host}/alias/cosign-ec`, message, {
      ...env,
      ...(await credentialsFor('cosign-ec')),
    });
    expect(signed.publicKeyPem).toBe(publicPem['cosign-ec']);
    expect(verify('sha256', message, publicPem['cosign-ec']!, signed.signature)).toBe(true);
    const [entry] = await svc.run<{ details: string }>(
      sql`SELECT details FROM audit_log WHERE tenant_id = 'cosign-ec' AND outcome = 'signed'`,
    );
    expect(JSON.parse(entry!.details).via).toMatchObject({ api: 'aws-kms', region: '', message_type: 'DIGEST' });
  });

  it('signs with an RSA key by its key id with PKCS#1 v1.5 SHA-256, the first algorithm signbridge lists', async () => {
    const key = await svc.store.tenants.currentKey('cosign-rsa');
    const signed = await runSigstoreGo(`awskms://${tunnel.host}/${key!.id}`, message, {
      ...env,
      ...(await credentialsFor('cosign-rsa')),
    });
    expect(
      verify(
        'sha256',
        message,
        { key: publicPem['cosign-rsa']!, padding: constants.RSA_PKCS1_PADDING },
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
});
