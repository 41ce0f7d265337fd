// Certificates and requests for keys that sign in the service: built by src/cli/certs/x509-builder.ts, signed by
// SoftHSM keys through POST /v1/sign, and checked by OpenSSL (a separate implementation from the builder's).
import { execFileSync, spawnSync } from 'node:child_process';
import { createPublicKey, X509Certificate } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  certificateAlgorithm,
  createCsr,
  createSelfSigned,
  type RemoteKey,
  UnsupportedKeyError,
} from '../../src/cli/certs/x509-builder.js';
import { EC_FIELD_BYTES, type KeySpec, keyInfo } from '../../src/crypto/algorithms.js';
import { derStructureProblem, ecdsaDerToRaw } from '../../src/crypto/der.js';
import { parseSubject, SubjectError } from '../../src/crypto/subject-name.js';
import { callAction, makeTempDir, startTestService, type TestService } from '../helpers/service.js';

let service: TestService;
const keys = new Map<KeySpec, RemoteKey>();
const dir = makeTempDir('sb-x509-');
const SPECS: KeySpec[] = ['RSA_2048', 'ECC_NIST_P256', 'ECC_NIST_P384', 'ECC_NIST_P521'];

beforeAll(async () => {
  service = await startTestService();
  for (const spec of SPECS) {
    const tenant = `x509-${spec.toLowerCase().replaceAll('_', '-')}`;
    const created = await callAction(service.app, service.operator, 'create_tenant', {
      tenant_id: tenant,
      key_spec: spec,
    });
    expect(created.status).toBe(201);
    const signer = await service.apiKey('signer', tenant);
    const pub = await callAction(service.app, signer, 'get_public_key', { tenant_id: tenant });
    keys.set(spec, {
      keySpec: spec,
      spki: createPublicKey(pub.body.public_key_pem as string).export({ type: 'spki', format: 'der' }),
      async sign(algorithm, digest) {
        const res = await callAction(service.app, signer, 'sign', {
          tenant_id: tenant,
          algorithm,
          hash: digest.toString('base64'),
        });
        if (res.status !== 200) throw new Error(JSON.stringify(res.body));
        const der = Buffer.from(res.body.signature as string, 'base64');
        const info = keyInfo(spec);
        return info.family === 'ec' ? ecdsaDerToRaw(der, EC_FIELD_BYTES[info.curve]) : der;
      },
    });
  }
});
afterAll(async () => {
  await service?.close();
});

const openssl = (args: string[]) => spawnSync('openssl', args, { encoding: 'utf8' });

describe('parseSubject', () => {
  it('reads the OpenSSL form most significant first and the RFC 4514 form most significant last', () => {
    const a = parseSubject('/C=DE/O=Example GmbH/CN=Release signing');
    const b = parseSubject('CN=Release signing, O=Example GmbH, C=DE');
    expect(Buffer.from(a.toArrayBuffer()).equals(Buffer.from(b.toArrayBuffer()))).toBe(true);
    expect(a.toJSON()).toEqual([{ C: ['DE'] }, { O: ['Example GmbH'] }, { CN: ['Release signing'] }]);
  });
  it('keeps an escaped separator inside a value', () => {
    expect(parseSubject('/CN=a\\/b/O=x, y').toJSON()).toEqual([{ CN: ['a/b'] }, { O: ['x, y'] }]);
  });
  it('takes another case where it is unambiguous, the older one-letter names, and + in both forms', () => {
    const der = (text: string) => Buffer.from(parseSubject(text).toArrayBuffer()).toString('hex');
    expect(der('/cn=x/EMAILADDRESS=a@b.c')).toBe(der('/CN=x/emailAddress=a@b.c'));
    expect(der('/E=a@b.c/G=Jane/T=Signer')).toBe(der('/emailAddress=a@b.c/givenName=Jane/title=Signer'));
    expect(der('CN=a\\, b+UID=u, O=x')).toBe(der('/O=x/UID=u+CN=a, b'));
    expect(() => parseSubject('/Uid=x')).toThrow(/ambiguous.*UID is userId, uid uniqueIdentifier/);
    expect(() => parseSubject('/sha256=x')).toThrow(/unknown attribute type "sha256"/);
  });
  it('writes a NumericString value (countryCode3n) as a DER NumericString, tag 0x12', () => {
    const der = Buffer.from(parseSubject('/countryCode3n=276/CN=x').toArrayBuffer());
    expect(derStructureProblem(der)).toBeUndefined();
    expect(der.toString('hex')).toContain('06035504631203323736'); // 2.5.4.99, NumericString "276"
  });
  it.each(['', '   ', '/CN', '/=x', 'CN='])('refuses %j with a SubjectError', (text) => {
    expect(() => parseSubject(text)).toThrow(SubjectError);
  });
});

describe('certificateAlgorithm', () => {
  it('pairs EC keys with their curve hash unless asked for another SHA-2, and refuses PSS', () => {
    expect(certificateAlgorithm('ECC_NIST_P384').algorithm).toBe('ECDSA_SHA_384');
    expect(certificateAlgorithm('ECC_NIST_P256', { hash: 'sha512' })).toMatchObject({
      algorithm: 'ECDSA_SHA_512',
      web: { name: 'ECDSA', hash: 'SHA-512', namedCurve: 'P-256' },
    });
    expect(() => certificateAlgorithm('ECC_NIST_P256', { pss: true })).toThrow(/RSA keys only/);
    expect(certificateAlgorithm('RSA_2048', { hash: 'sha384', pss: true }).algorithm).toBe('RSASSA_PSS_SHA_384');
  });

  it.each([
    'ML_DSA_44',
    'ML_DSA_65',
    'ML_DSA_87',
    'SM2',
  ] as KeySpec[])('refuses a %s key with the reason, before anything is signed', async (spec) => {
    let signed = 0;
    const key: RemoteKey = {
      keySpec: spec,
      spki: Buffer.alloc(0),
      async sign() {
        signed++;
        return Buffer.alloc(0);
      },
    };
    const reason = new RegExp(`certificates for ${spec} keys are not supported: .*signbridge sign`);
    expect(() => certificateAlgorithm(spec)).toThrow(UnsupportedKeyError);
    await expect(createCsr(key, { subject: parseSubject('/CN=pq') })).rejects.toThrow(reason);
    await expect(createSelfSigned(key, { subject: parseSubject('/CN=pq'), days: 1 })).rejects.toThrow(reason);
    expect(signed).toBe(0);
  });
});

it('a P-384 key makes a request signed with SHA-256 when asked, which OpenSSL verifies', async () => {
  const key = keys.get('ECC_NIST_P384') as RemoteKey;
  const csr = await createCsr(key, { subject: parseSubject('/CN=p384 sha256'), hash: 'sha256' });
  const file = join(dir, 'p384-sha256.csr');
  writeFileSync(file, csr.toString('pem'));
  const res = openssl(['req', '-in', file, '-verify', '-noout', '-text']);
  expect(res.stderr + res.stdout).toMatch(/verify OK/);
  expect(res.stdout).toContain('ecdsa-with-SHA256');
});

describe.each(SPECS)('%s', (spec) => {
  it('makes a PKCS#10 request that OpenSSL verifies, with the key and the subject asked for', async () => {
    const key = keys.get(spec) as RemoteKey;
    const csr = await createCsr(key, { subject: parseSubject('/O=Example/CN=signbridge test') });
    const file = join(dir, `${spec}.csr`);
    writeFileSync(file, csr.toString('pem'));
    const res = openssl(['req', '-in', file, '-verify', '-noout', '-subject', '-nameopt', 'RFC2253']);
    expect(res.stderr + res.stdout).toMatch(/verify OK|Certificate request self-signature verify OK/);
    expect(res.stdout).toContain('subject=CN=signbridge test,O=Example');
    const pub = execFileSync('openssl', ['req', '-in', file, '-pubkey', '-noout'], { encoding: 'utf8' });
    expect(createPublicKey(pub).export({ type: 'spki', format: 'der' }).equals(key.spki)).toBe(true);
  });

  it('makes a self-signed code-signing certificate that OpenSSL verifies against itself', async () => {
    const key = keys.get(spec) as RemoteKey;
    const cert = await createSelfSigned(key, { subject: parseSubject('/CN=self signed'), days: 30 });
    const file = join(dir, `${spec}.pem`);
    writeFileSync(file, cert.toString('pem'));
    // OpenSSL 3.0 has no code-signing purpose to check; the extended key usage is checked below instead.
    const verified = openssl(['verify', '-CAfile', file, file]);
    expect(verified.stdout + verified.stderr).toContain(': OK');
    const node = new X509Certificate(Buffer.from(cert.rawData));
    expect(node.publicKey.export({ type: 'spki', format: 'der' }).equals(key.spki)).toBe(true);
    expect(node.keyUsage).toContain('1.3.6.1.5.5.7.3.3');
    const days = (Date.parse(node.validTo) - Date.parse(node.validFrom)) / 86_400_000;
    expect(Math.round(days)).toBe(30);
  });
});

it('signs RSA certificates with PSS when asked, and OpenSSL verifies them', async () => {
  const key = keys.get('RSA_2048') as RemoteKey;
  const cert = await createSelfSigned(key, { subject: parseSubject('/CN=pss'), days: 1, pss: true, hash: 'sha384' });
  const file = join(dir, 'pss.pem');
  writeFileSync(file, cert.toString('pem'));
  const text = execFileSync('openssl', ['x509', '-in', file, '-noout', '-text'], { encoding: 'utf8' });
  expect(text).toContain('rsassaPss');
  expect(text).toMatch(/Hash Algorithm: sha384/);
  expect(openssl(['verify', '-CAfile', file, file]).stdout).toContain(': OK');
});

it('writes nothing when the remote signature does not verify with the key, and refuses a bad --days', async () => {
  const p256 = keys.get('ECC_NIST_P256') as RemoteKey;
  const garbage: RemoteKey = { ...p256, sign: async (a, d) => Buffer.alloc((await p256.sign(a, d)).length, 1) };
  await expect(createSelfSigned(garbage, { subject: parseSubject('/CN=x'), days: 1 })).rejects.toThrow(
    /does not verify/,
  );
  await expect(createCsr(garbage, { subject: parseSubject('/CN=x') })).rejects.toThrow(/does not verify/);
  // A remote key that answers with another key's signature: caught the same way.
  const p384 = keys.get('ECC_NIST_P384') as RemoteKey;
  const otherKey: RemoteKey = { ...p384, spki: p256.spki, keySpec: 'ECC_NIST_P384' };
  await expect(createCsr(otherKey, { subject: parseSubject('/CN=x') })).rejects.toThrow();
  await expect(createSelfSigned(p256, { subject: parseSubject('/CN=x'), days: 0 })).rejects.toThrow(/--days/);
});
