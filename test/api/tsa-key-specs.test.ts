// TSA keys of the two newer key specs, decided by what RFC 3161 clients verify (docs/tsa.md#key-specs), tried with
// OpenSSL 3.0's `ts -verify`:
// - secp256k1 (ECC_SECG_P256K1) is ECDSA in CMS as on the NIST curves: a TSA identity made by `signbridge tsa init`
//   grants tokens that `openssl ts -verify` accepts against /tsa/chain.pem.
// - Ed25519 (ECC_NIST_EDWARDS25519) is refused by `tsa init`, naming why: an RFC 8419 token (SignerInfo with
//   digestAlgorithm SHA-512, signatureAlgorithm id-Ed25519, pure Ed25519 over the signed attributes), built here
//   over the same TSTInfo, is one OpenSSL 3.0 cannot verify. Should a later OpenSSL verify it, that test fails, and
//   the refusal is to be revisited.
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash, randomBytes, sign, X509Certificate } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  Attribute,
  CertificateChoices,
  CertificateSet,
  ContentInfo,
  DigestAlgorithmIdentifiers,
  EncapsulatedContent,
  EncapsulatedContentInfo,
  IssuerAndSerialNumber,
  SignedData,
  SignerIdentifier,
  SignerInfo,
  SignerInfos,
} from '@peculiar/asn1-cms';
import { AsnConvert, OctetString } from '@peculiar/asn1-schema';
import { TimeStampResp } from '@peculiar/asn1-tsp';
import { AlgorithmIdentifier, Certificate } from '@peculiar/asn1-x509';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ClockTrust } from '../../src/tsa/clock-trust.js';
import { signingCertificateV2 } from '../../src/tsa/ess-signing-certificate.js';
import { DEFAULT_TSA_POLICY } from '../../src/tsa/tsa-settings.js';
import { runCli } from '../helpers/cli.js';
import { makeTempDir, startTestService, type TestService } from '../helpers/service.js';

let svc: TestService;
let work: string;

beforeAll(async () => {
  svc = await startTestService({
    tsa: {
      clock: new ClockTrust({ check: 'none', maxOffsetMs: 500, intervalMs: 60_000 }),
      access: 'anonymous',
      allowNetworks: [],
      limit: { max: 1000, windowMs: 60_000 },
      policy: DEFAULT_TSA_POLICY,
      acceptedPolicies: [],
      accuracy: { seconds: 1 },
      tsaName: true,
    },
  });
  work = makeTempDir('sb-tsa-specs-');
  writeFileSync(join(work, 'artifact.bin'), randomBytes(1000));
}, 120_000);
afterAll(async () => svc?.close());

const openssl = (args: string[]) => spawnSync('openssl', args, { cwd: work, encoding: 'utf8' });

/** A query from `openssl ts -query` (SHA-256, asking for the certificate), posted to the service's /tsa. */
async function timestamp(name: string): Promise<Buffer> {
  execFileSync('openssl', ['ts', '-query', '-data', 'artifact.bin', '-sha256', '-cert', '-out', `${name}.tsq`], {
    cwd: work,
  });
  const res = await svc.app.inject({
    method: 'POST',
    url: '/tsa',
    payload: readFileSync(join(work, `${name}.tsq`)),
    headers: { 'content-type': 'application/timestamp-query' },
    remoteAddress: '192.0.2.10',
  });
  expect(res.statusCode).toBe(200);
  writeFileSync(join(work, `${name}.tsr`), res.rawPayload);
  return res.rawPayload;
}

const tsVerify = (name: string, chain: string) =>
  openssl(['ts', '-verify', '-in', `${name}.tsr`, '-queryfile', `${name}.tsq`, '-CAfile', chain]);

describe('a secp256k1 TSA key', () => {
  it('tsa init makes it; its tokens are ecdsa-with-SHA256 that openssl ts -verify accepts', async () => {
    const made = runCli([
      'tsa',
      'init',
      ...svc.storeArgs,
      '--key-spec',
      'ECC_SECG_P256K1',
      '--self-signed',
      '--subject',
      'CN=secp256k1 TSA, O=signbridge tests',
    ]);
    expect(made.code, made.stderr).toBe(0);
    const chain = await svc.app.inject({ method: 'GET', url: '/tsa/chain.pem' });
    expect(chain.statusCode).toBe(200);
    writeFileSync(join(work, 'k1-chain.pem'), chain.body);
    expect(new X509Certificate(chain.body).publicKey.asymmetricKeyDetails?.namedCurve).toBe('secp256k1');

    await timestamp('k1');
    const verified = tsVerify('k1', 'k1-chain.pem');
    expect(verified.stdout + verified.stderr).toContain('Verification: OK');
    const token = openssl(['ts', '-reply', '-in', 'k1.tsr', '-token_out', '-out', 'k1.tok']);
    expect(token.status, token.stderr).toBe(0);
    const printed = openssl(['cms', '-cmsout', '-print', '-inform', 'DER', '-in', 'k1.tok']).stdout;
    expect(printed).toMatch(/signatureAlgorithm:\s+algorithm: ecdsa-with-SHA256/);
  });
});

describe('an Ed25519 TSA key', () => {
  it('tsa init refuses it, saying why, and makes nothing', () => {
    const res = runCli([
      'tsa',
      'init',
      ...svc.storeArgs,
      '--tenant',
      'ed-tsa',
      '--key-spec',
      'ECC_NIST_EDWARDS25519',
      '--self-signed',
      '--subject',
      'CN=Ed25519 TSA',
    ]);
    expect(res.code).toBe(1);
    expect(res.stderr).toContain('ECC_NIST_EDWARDS25519 cannot be a TSA key');
    expect(res.stderr).toContain('ts -verify');
    expect(runCli(['tsa', 'show', ...svc.storeArgs, '--tenant', 'ed-tsa']).stdout).not.toContain('Ed25519 TSA');
  });

  it('the evidence: an RFC 8419 Ed25519 token over the same TSTInfo does not verify with openssl ts -verify', async () => {
    execFileSync('openssl', ['genpkey', '-algorithm', 'ed25519', '-out', 'ed.key'], { cwd: work });
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-key',
        'ed.key',
        '-subj',
        '/CN=Ed25519 TSA',
        '-days',
        '2',
        '-addext',
        'extendedKeyUsage=critical,timeStamping',
        '-addext',
        'keyUsage=critical,digitalSignature',
        '-out',
        'ed.pem',
      ],
      { cwd: work, stdio: 'pipe' },
    );
    // The TSTInfo of a token the service granted for this query (the secp256k1 identity above).
    const reply = AsnConvert.parse(await timestamp('ed'), TimeStampResp);
    const granted = AsnConvert.parse(reply.timeStampToken?.content as ArrayBuffer, SignedData);
    const tstInfo = Buffer.from(granted.encapContentInfo.eContent?.single?.buffer as ArrayBuffer);
    writeFileSync(join(work, 'ed.tsr'), rfc8419Response(tstInfo, readFileSync(join(work, 'ed.pem'), 'utf8')));

    const verified = tsVerify('ed', 'ed.pem');
    expect(verified.stdout).toContain('Verification: FAILED');
    expect(verified.stderr).toContain('operation not supported for this keytype');
  });
});

const SHA512 = '2.16.840.1.101.3.4.2.3';
const ID_ED25519 = '1.3.101.112';
const ID_CT_TST_INFO = '1.2.840.113549.1.9.16.1.4';

/**
 * A granted TimeStampResp whose token is signed as RFC 8419 says for Ed25519 in CMS: digestAlgorithm SHA-512 (the
 * messageDigest attribute's), signatureAlgorithm id-Ed25519 with absent parameters, the signature pure Ed25519 over
 * the DER of the signed attributes; the attributes are the ones the service's tokens carry.
 */
function rfc8419Response(tstInfo: Buffer, certPem: string): Buffer {
  const der = new X509Certificate(certPem).raw;
  const cert = AsnConvert.parse(der, Certificate);
  const attribute = (type: string, value: ArrayBuffer | Buffer) =>
    new Attribute({ attrType: type, attrValues: [new Uint8Array(value).buffer] });
  const attributes = [
    attribute('1.2.840.113549.1.9.3', Buffer.from('060b2a864886f70d0109100104', 'hex')), // content-type TSTInfo
    attribute(
      '1.2.840.113549.1.9.4',
      AsnConvert.serialize(new OctetString(createHash('sha512').update(tstInfo).digest())),
    ),
    attribute('1.2.840.113549.1.9.16.2.47', signingCertificateV2(der)),
  ]
    .map((a) => Buffer.from(AsnConvert.serialize(a)))
    .sort(Buffer.compare);
  // Signed: the attributes as a DER SET OF (RFC 5652 §5.4).
  const body = Buffer.concat(attributes);
  const setOf = Buffer.concat([Buffer.from([0x31, 0x82, body.length >> 8, body.length & 0xff]), body]);
  const signature = sign(null, setOf, readFileSync(join(work, 'ed.key')));
  const signerInfo = new SignerInfo({
    version: 1,
    sid: new SignerIdentifier({
      issuerAndSerialNumber: new IssuerAndSerialNumber({
        issuer: cert.tbsCertificate.issuer,
        serialNumber: cert.tbsCertificate.serialNumber,
      }),
    }),
    digestAlgorithm: new AlgorithmIdentifier({ algorithm: SHA512 }),
    signedAttrs: attributes.map((a) => AsnConvert.parse(a, Attribute)),
    signatureAlgorithm: new AlgorithmIdentifier({ algorithm: ID_ED25519 }),
    signature: new OctetString(signature),
  });
  const signedData = new SignedData({
    version: 3,
    digestAlgorithms: new DigestAlgorithmIdentifiers([new AlgorithmIdentifier({ algorithm: SHA512 })]),
    encapContentInfo: new EncapsulatedContentInfo({
      eContentType: ID_CT_TST_INFO,
      eContent: new EncapsulatedContent({ single: new OctetString(tstInfo) }),
    }),
    certificates: new CertificateSet([new CertificateChoices({ certificate: cert })]),
    signerInfos: new SignerInfos([signerInfo]),
  });
  const token = new ContentInfo({ contentType: '1.2.840.113549.1.7.2', content: AsnConvert.serialize(signedData) });
  // TimeStampResp { status { granted }, timeStampToken }
  const content = Buffer.concat([Buffer.from('3003020100', 'hex'), Buffer.from(AsnConvert.serialize(token))]);
  return Buffer.concat([Buffer.from([0x30, 0x82, content.length >> 8, content.length & 0xff]), content]);
}
