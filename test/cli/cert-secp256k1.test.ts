// `signbridge cert self-signed` and `cert csr` for a secp256k1 (ECC_SECG_P256K1) key: Node's WebCrypto knows no
// secp256k1, @peculiar/x509 does, so the builder (src/cli/certs/x509-builder.ts) hands the library the key's SPKI
// as it is and checks signatures with node:crypto. The key is a SoftHSM key of the service signing through
// POST /v1/sign, as the daemon's would; OpenSSL, a separate implementation, verifies what was built.
import { spawnSync } from 'node:child_process';
import { createPublicKey, X509Certificate } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { certificateAlgorithm, createCsr, createSelfSigned, type RemoteKey } from '../../src/cli/certs/x509-builder.js';
import { ecdsaDerToRaw } from '../../src/crypto/der.js';
import { parseSubject } from '../../src/crypto/subject-name.js';
import { callAction, makeTempDir, startTestService, type TestService } from '../helpers/service.js';

let service: TestService;
let key: RemoteKey;
/** How many digests the key signed: each build signs once. */
let signed = 0;
const dir = makeTempDir('sb-cert-k1-');

beforeAll(async () => {
  service = await startTestService();
  const created = await callAction(service.app, service.operator, 'create_tenant', {
    tenant_id: 'cert-k1',
    key_spec: 'ECC_SECG_P256K1',
  });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  const signer = await service.apiKey('signer', 'cert-k1');
  const pub = await callAction(service.app, signer, 'get_public_key', { tenant_id: 'cert-k1' });
  key = {
    keySpec: 'ECC_SECG_P256K1',
    spki: createPublicKey(pub.body.public_key_pem as string).export({ type: 'spki', format: 'der' }),
    async sign(algorithm, digest) {
      const res = await callAction(service.app, signer, 'sign', {
        tenant_id: 'cert-k1',
        algorithm,
        hash: digest.toString('base64'),
      });
      if (res.status !== 200) throw new Error(JSON.stringify(res.body));
      signed += 1;
      return ecdsaDerToRaw(Buffer.from(res.body.signature as string, 'base64'), 32);
    },
  };
}, 120_000);
afterAll(async () => {
  await service?.close();
});

const openssl = (args: string[]) => spawnSync('openssl', args, { encoding: 'utf8' });

describe('certificates for a secp256k1 key', () => {
  it('signs with ECDSA_SHA_256 by default, as KMS pairs the curve', () => {
    expect(certificateAlgorithm('ECC_SECG_P256K1').algorithm).toBe('ECDSA_SHA_256');
  });

  it('self-signed: the key on secp256k1, ecdsa-with-SHA256, verified by openssl x509 -verify', async () => {
    const before = signed;
    const cert = await createSelfSigned(key, { subject: parseSubject('/O=Example/CN=k1 signing'), days: 30 });
    expect(signed).toBe(before + 1);
    const path = join(dir, 'k1.pem');
    writeFileSync(path, cert.toString('pem'));
    const node = new X509Certificate(cert.toString('pem'));
    expect(node.publicKey.asymmetricKeyDetails?.namedCurve).toBe('secp256k1');
    expect(node.publicKey.export({ type: 'spki', format: 'der' }).equals(key.spki)).toBe(true);
    const text = openssl(['x509', '-in', path, '-noout', '-text']).stdout;
    expect(text).toContain('ecdsa-with-SHA256');
    expect(text).toMatch(/ASN1 OID: secp256k1/);
    expect(text).toContain('Code Signing');
    // The key identifiers are computed from the SPKI the library was handed: subject and authority agree.
    expect(text).toMatch(/Subject Key Identifier:\s+([0-9A-F:]+)[\s\S]*Authority Key Identifier:\s+(keyid:)?\1/);
    // `openssl x509 -verify` is OpenSSL 3.2's; 3.0 checks a self-signed certificate's signature with `verify`.
    const verified = openssl(['verify', '-CAfile', path, path]);
    expect(verified.stdout, verified.stderr).toContain(': OK');
  });

  it('csr: a PKCS#10 request that openssl req -verify accepts, with the key and the code-signing request', async () => {
    const csr = await createCsr(key, { subject: parseSubject('/O=Example/CN=k1 request') });
    const path = join(dir, 'k1.csr');
    writeFileSync(path, csr.toString('pem'));
    const checked = openssl(['req', '-in', path, '-verify', '-noout', '-pubkey']);
    expect(checked.stderr + checked.stdout).toMatch(/verify OK/);
    const pub = createPublicKey(checked.stdout);
    expect(pub.export({ type: 'spki', format: 'der' }).equals(key.spki)).toBe(true);
    const text = openssl(['req', '-in', path, '-noout', '-text']).stdout;
    expect(text).toContain('ecdsa-with-SHA256');
    expect(text).toContain('Code Signing');
  });

  it('a signature that does not verify with the key is refused, nothing returned', async () => {
    const wrong: RemoteKey = { ...key, sign: async () => Buffer.alloc(64, 1) };
    await expect(createCsr(wrong, { subject: parseSubject('/CN=x') })).rejects.toThrow(/does not verify/);
    await expect(createSelfSigned(wrong, { subject: parseSubject('/CN=x'), days: 1 })).rejects.toThrow(
      /does not verify/,
    );
  });
});
