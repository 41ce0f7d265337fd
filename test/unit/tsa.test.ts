// The time-stamping core (src/tsa/) against the real `openssl ts` (OpenSSL 3.0): OpenSSL makes the queries, our
// parser and builder answer them, and OpenSSL verifies the replies and prints what they say. The keys are
// node:crypto keys signing digests here (RSA with the padding done by hand, ECDSA with @noble/curves), as a key
// store would: only a digest crosses the SignDigest callback.
import { spawnSync } from 'node:child_process';
import {
  constants,
  createHash,
  createPublicKey,
  generateKeyPairSync,
  type KeyObject,
  privateEncrypt,
  X509Certificate,
} from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { p256, p384 } from '@noble/curves/nist.js';
import { SignedData } from '@peculiar/asn1-cms';
import { AsnConvert } from '@peculiar/asn1-schema';
import { TimeStampResp, TSTInfo } from '@peculiar/asn1-tsp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIGEST_INFO_PREFIX } from '../../src/crypto/encoding.js';
import { ID_AA_SIGNING_CERTIFICATE_V2, SigningCertificateV2 } from '../../src/tsa/ess-signing-certificate.js';
import {
  PKI_FAILURE_BITS,
  type PkiFailure,
  parseTimeStampRequest,
  type TimeStampRequestRules,
} from '../../src/tsa/timestamp-request.js';
import {
  buildGrantedResponse,
  buildRejectionResponse,
  type GrantOptions,
  TsaConfigurationError,
  type TsaIdentity,
} from '../../src/tsa/timestamp-response.js';
import { hashOf, type SignDigest, TsaSignatureError, type TsaSigningAlgorithm } from '../../src/tsa/tsa-algorithms.js';
import { createTsaCertificate, createTsaCsr, tsaCertificateProblems } from '../../src/tsa/tsa-certificate.js';

const POLICY = '1.3.6.1.4.1.99999.1.1';
const OTHER_POLICY = '1.3.6.1.4.1.99999.1.2';
const RULES: TimeStampRequestRules = { defaultPolicy: POLICY, acceptedPolicies: [OTHER_POLICY] };

const dir = mkdtempSync(join(tmpdir(), 'sb-tsa-'));
const path = (name: string) => join(dir, name);
const DATA = path('artifact.bin');

/** Runs openssl; a string is split at spaces (the paths here have none), an array is taken as it is. */
function openssl(args: string | string[]): { status: number | null; out: string } {
  const argv = typeof args === 'string' ? args.split(' ') : args;
  const r = spawnSync('openssl', argv, { encoding: 'utf8' });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

function pem(label: string, der: Buffer): string {
  const lines = der.toString('base64').match(/.{1,64}/g) ?? [];
  return `-----BEGIN ${label}-----\n${lines.join('\n')}\n-----END ${label}-----\n`;
}

/** A digest signer over a node:crypto private key, as a key store signs: the digest in, the signature out. */
function digestSigner(key: KeyObject): SignDigest {
  return async (digest, algorithm) => {
    if (algorithm.startsWith('RSASSA_PKCS1')) {
      const block = Buffer.concat([DIGEST_INFO_PREFIX[hashOf(algorithm)], digest]);
      return privateEncrypt({ key, padding: constants.RSA_PKCS1_PADDING }, block);
    }
    const jwk = key.export({ format: 'jwk' });
    const curve = jwk.crv === 'P-384' ? p384 : p256;
    const secret = Buffer.from(jwk.d as string, 'base64url');
    return Buffer.from(curve.sign(digest, secret, { prehash: false, format: 'der' }));
  };
}

interface TestTsa {
  name: string;
  key: KeyObject;
  spki: Buffer;
  identity: TsaIdentity;
  certFile: string;
}

const tsas: Record<'rsa' | 'p256' | 'p384', TestTsa> = {} as never;

async function makeTsa(name: string, key: KeyObject, algorithm: TsaSigningAlgorithm): Promise<TestTsa> {
  const spki = createPublicKey(key).export({ format: 'der', type: 'spki' });
  const sign = digestSigner(key);
  const certificate = await createTsaCertificate(
    { spki, algorithm, sign },
    { subject: `/O=signbridge tests/CN=TSA ${name}`, days: 30 },
  );
  const certFile = path(`tsa-${name}.pem`);
  writeFileSync(certFile, pem('CERTIFICATE', certificate));
  return { name, key, spki, identity: { certificate, algorithm, sign }, certFile };
}

/** `openssl ts -query` over DATA; returns the DER. */
function query(name: string, args: string[]): Buffer {
  const file = path(`${name}.tsq`);
  const r = openssl(['ts', '-query', '-data', DATA, ...args, '-out', file]);
  expect(r.status, r.out).toBe(0);
  return readFileSync(file);
}

function grantOptions(der: Buffer, extra: Partial<GrantOptions> = {}): GrantOptions {
  const parsed = parseTimeStampRequest(der, RULES);
  if (!parsed.ok) throw new Error(`refused: ${parsed.refusal.reason}`);
  return {
    request: parsed.request,
    policy: parsed.policy,
    serialNumber: 0x1234_5678_9abc_def0_1234n,
    genTime: new Date('2026-11-26T10:20:30.456Z'),
    accuracy: { seconds: 1 },
    ...extra,
  };
}

function writeReply(name: string, der: Buffer): string {
  const file = path(`${name}.tsr`);
  writeFileSync(file, der);
  return file;
}

function replyText(file: string): string {
  const r = openssl(`ts -reply -in ${file} -text`);
  expect(r.status, r.out).toBe(0);
  return r.out;
}

/** The TSTInfo and SignedData inside a granted reply, read back with asn1-tsp. */
function tokenParts(der: Buffer): { tst: TSTInfo; signedData: SignedData } {
  const resp = AsnConvert.parse(der, TimeStampResp);
  if (!resp.timeStampToken) throw new Error('no token');
  const signedData = AsnConvert.parse(resp.timeStampToken.content, SignedData);
  const content = signedData.encapContentInfo.eContent?.single;
  if (!content) throw new Error('no eContent');
  return { tst: AsnConvert.parse(content.buffer, TSTInfo), signedData };
}

beforeAll(async () => {
  writeFileSync(DATA, 'the artifact a build signed\n');
  writeFileSync(path('other.bin'), 'another artifact\n');
  tsas.rsa = await makeTsa(
    'rsa',
    generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey,
    'RSASSA_PKCS1_V1_5_SHA_256',
  );
  tsas.p256 = await makeTsa('p256', generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey, 'ECDSA_SHA_256');
  tsas.p384 = await makeTsa('p384', generateKeyPairSync('ec', { namedCurve: 'P-384' }).privateKey, 'ECDSA_SHA_384');
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('the TSA certificate', () => {
  it.each([
    'rsa',
    'p256',
    'p384',
  ] as const)('%s: only id-kp-timeStamping, critical; OpenSSL accepts it for time stamping', (name) => {
    const text = openssl(`x509 -in ${tsas[name].certFile} -noout -text`).out;
    expect(text).toMatch(/X509v3 Extended Key Usage: critical\s+Time Stamping\s*\n/);
    expect(text).toMatch(/X509v3 Key Usage: critical\s+Digital Signature\s*\n/);
    expect(text).toMatch(/X509v3 Basic Constraints: critical\s+CA:FALSE/);
    expect(text).toContain(`Subject: O = signbridge tests, CN = TSA ${name}`);
    const check = openssl(`verify -purpose timestampsign -CAfile ${tsas[name].certFile} ${tsas[name].certFile}`);
    expect(check.out).toContain(': OK');
    expect(tsaCertificateProblems(tsas[name].identity.certificate)).toEqual([]);
  });

  it('names what keeps another certificate from serving a TSA (a non-critical or extra EKU)', () => {
    const make = (name: string, eku: string) => {
      const r = openssl(
        `req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ${path(`${name}.key`)} ` +
          `-out ${path(`${name}.pem`)} -outform DER -days 2 -subj /CN=${name} -addext extendedKeyUsage=${eku}`,
      );
      expect(r.status, r.out).toBe(0);
      return readFileSync(path(`${name}.pem`));
    };
    expect(tsaCertificateProblems(make('noncritical', 'timeStamping'))).toEqual([
      expect.stringContaining('not critical'),
    ]);
    expect(tsaCertificateProblems(make('codesign', 'critical,timeStamping,codeSigning'))).toEqual([
      expect.stringContaining('id-kp-timeStamping only'),
    ]);
    expect(tsaCertificateProblems(Buffer.from('not a certificate'))).toEqual([expect.stringContaining('not a DER')]);
  });

  it('a CSR asks for those extensions; a CA issues from it (copy_extensions) and tokens verify up to the CA', async () => {
    const tsa = tsas.p256;
    const csr = await createTsaCsr(
      { spki: tsa.spki, algorithm: 'ECDSA_SHA_256', sign: tsa.identity.sign },
      {
        subject: 'CN=TSA issued, O=signbridge tests',
      },
    );
    writeFileSync(path('tsa.csr'), pem('CERTIFICATE REQUEST', csr));
    const req = openssl(`req -in ${path('tsa.csr')} -verify -noout -text`);
    expect(req.out).toContain('verify OK');
    expect(req.out).toMatch(/Requested Extensions:[\s\S]*X509v3 Extended Key Usage: critical\s+Time Stamping/);
    expect(req.out).toContain('Subject: O = signbridge tests, CN = TSA issued');

    const root = openssl(
      `req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ${path('ca.key')} ` +
        `-out ${path('ca.pem')} -days 2 -subj /CN=signbridge-test-root`,
    );
    expect(root.status, root.out).toBe(0);
    const issue = openssl(
      `x509 -req -in ${path('tsa.csr')} -CA ${path('ca.pem')} -CAkey ${path('ca.key')} -set_serial 7 -days 2 ` +
        `-copy_extensions copy -out ${path('issued.der')} -outform DER`,
    );
    expect(issue.status, issue.out).toBe(0);
    const issued = readFileSync(path('issued.der'));
    expect(tsaCertificateProblems(issued)).toEqual([]);

    const der = query('issued', ['-sha256', '-cert']);
    const identity: TsaIdentity = { ...tsa.identity, certificate: issued };
    const reply = writeReply('issued', await buildGrantedResponse(grantOptions(der), identity));
    const ok = openssl(`ts -verify -data ${DATA} -in ${reply} -CAfile ${path('ca.pem')}`);
    expect(ok.out).toContain('Verification: OK');

    // ESSCertIDv2 binds the token to that certificate: a second one from the same CA with the same issuer, serial
    // and key (another validity) matches the SignerInfo and the signature, and is still refused.
    const twin = openssl(
      `x509 -req -in ${path('tsa.csr')} -CA ${path('ca.pem')} -CAkey ${path('ca.key')} -set_serial 7 -days 3 ` +
        `-copy_extensions copy -out ${path('twin.pem')}`,
    );
    expect(twin.status, twin.out).toBe(0);
    const bare = await buildGrantedResponse(grantOptions(query('bare', ['-sha256'])), identity);
    const bareReply = writeReply('bare', bare);
    const ca = path('ca.pem');
    const withIssued = path('issued.pem');
    writeFileSync(withIssued, pem('CERTIFICATE', issued));
    expect(openssl(`ts -verify -data ${DATA} -in ${bareReply} -CAfile ${ca} -untrusted ${withIssued}`).out).toContain(
      'Verification: OK',
    );
    const withTwin = openssl(`ts -verify -data ${DATA} -in ${bareReply} -CAfile ${ca} -untrusted ${path('twin.pem')}`);
    expect(withTwin.out).not.toContain('Verification: OK');
    expect(withTwin.out).toContain('ess cert id not found');
  });
});

describe('granted replies verified by openssl ts -verify', () => {
  it.each<['rsa' | 'p256' | 'p384', string[]]>([
    ['rsa', ['-sha256', '-cert']],
    ['rsa', ['-sha256', '-cert', '-no_nonce']],
    ['p256', ['-sha256', '-cert']],
    ['p256', ['-sha256', '-cert', '-no_nonce']],
    ['p384', ['-sha384', '-cert']],
    ['p384', ['-sha512', '-cert']],
  ])('%s %j', async (name, args) => {
    const tsa = tsas[name];
    const tag = `${name}${args.join('')}`;
    const der = query(tag, args);
    const reply = writeReply(tag, await buildGrantedResponse(grantOptions(der), tsa.identity));
    const byData = openssl(`ts -verify -data ${DATA} -in ${reply} -CAfile ${tsa.certFile}`);
    expect(byData.out).toContain('Verification: OK');
    // -queryfile also compares the nonce, the imprint and its algorithm with the query's.
    const byQuery = openssl(`ts -verify -queryfile ${path(`${tag}.tsq`)} -in ${reply} -CAfile ${tsa.certFile}`);
    expect(byQuery.out).toContain('Verification: OK');
    // The same reply does not verify another artifact, or under another TSA's certificate.
    const wrongData = openssl(`ts -verify -data ${path('other.bin')} -in ${reply} -CAfile ${tsa.certFile}`);
    expect(wrongData.out).not.toContain('Verification: OK');
    const otherTsa = name === 'rsa' ? tsas.p256 : tsas.rsa;
    const wrongCa = openssl(`ts -verify -data ${DATA} -in ${reply} -CAfile ${otherTsa.certFile}`);
    expect(wrongCa.out).not.toContain('Verification: OK');
  });

  it('openssl prints the serial, the policy, the time, the accuracy and the echoed nonce', async () => {
    const der = query('text', ['-sha256', '-cert']);
    const queryText = openssl(`ts -query -in ${path('text.tsq')} -text`).out;
    const nonce = /Nonce: (0x[0-9A-F]+)/.exec(queryText)?.[1];
    expect(nonce).toBeDefined();
    const options = grantOptions(der, { serialNumber: (1n << 100n) + 5n });
    expect(options.request.nonce).toBeDefined();
    const reply = writeReply('text', await buildGrantedResponse(options, tsas.rsa.identity));
    const text = replyText(reply);
    expect(text).toContain('Status: Granted.');
    expect(text).toContain(`Policy OID: ${POLICY}`);
    expect(text).toContain('Serial number: 0x10000000000000000000000005');
    expect(text).toContain('Time stamp: Nov 26 10:20:30 2026 GMT');
    expect(text).toContain('Accuracy: 0x01 seconds, unspecified millis, unspecified micros');
    expect(text).toContain('Ordering: no');
    expect(text).toContain(`Nonce: ${nonce}`);
    expect(text).toContain('TSA: unspecified');
    expect(text).toContain(`Hash Algorithm: sha256`);
  });

  it('with sub-second accuracy genTime carries milliseconds; tsaName names the certificate subject', async () => {
    const der = query('millis', ['-sha256', '-cert', '-tspolicy', OTHER_POLICY]);
    const options = grantOptions(der, { accuracy: { millis: 500 }, tsaName: true, signingTime: true });
    expect(options.policy).toBe(OTHER_POLICY);
    const reply = writeReply('millis', await buildGrantedResponse(options, tsas.p256.identity));
    const text = replyText(reply);
    expect(text).toContain('Time stamp: Nov 26 10:20:30.456 2026 GMT');
    expect(text).toContain('Accuracy: unspecified seconds, 0x01F4 millis, unspecified micros');
    expect(text).toContain(`Policy OID: ${OTHER_POLICY}`);
    expect(text).toContain('TSA: DirName:/O=signbridge tests/CN=TSA p256');
    expect(openssl(`ts -verify -data ${DATA} -in ${reply} -CAfile ${tsas.p256.certFile}`).out).toContain(
      'Verification: OK',
    );
  });

  it('the nonce is echoed byte for byte, and the token carries ESSCertIDv2 = SHA-256 of the TSA certificate', async () => {
    const der = query('nonce', ['-sha256', '-cert']);
    const options = grantOptions(der);
    const { tst, signedData } = tokenParts(await buildGrantedResponse(options, tsas.rsa.identity));
    expect(Buffer.from(tst.nonce ?? new ArrayBuffer(0)).equals(options.request.nonce as Buffer)).toBe(true);
    expect(options.request.nonce?.length).toBeGreaterThanOrEqual(8);
    const attrs = signedData.signerInfos[0]?.signedAttrs ?? [];
    const ess = attrs.find((a) => a.attrType === ID_AA_SIGNING_CERTIFICATE_V2);
    const value = AsnConvert.parse(ess?.attrValues[0] as ArrayBuffer, SigningCertificateV2);
    expect(value.certs[0]?.hashAlgorithm).toBeUndefined(); // SHA-256, the DEFAULT
    expect(
      Buffer.from(value.certs[0]?.certHash.buffer as ArrayBuffer).equals(
        createHash('sha256').update(tsas.rsa.identity.certificate).digest(),
      ),
    ).toBe(true);
    // DER: the signed attributes are in ascending order of their encodings.
    const encoded = attrs.map((a) => Buffer.from(AsnConvert.serialize(a)));
    expect([...encoded].sort(Buffer.compare)).toEqual(encoded);
  });

  it('without certReq the token carries no certificate; openssl then needs it from outside', async () => {
    const der = query('nocert', ['-sha256']);
    const options = grantOptions(der);
    expect(options.request.certReq).toBe(false);
    const replyDer = await buildGrantedResponse(options, tsas.p256.identity);
    expect(tokenParts(replyDer).signedData.certificates).toBeUndefined();
    const reply = writeReply('nocert', replyDer);
    const alone = openssl(`ts -verify -data ${DATA} -in ${reply} -CAfile ${tsas.p256.certFile}`);
    expect(alone.out).not.toContain('Verification: OK');
    const cert = tsas.p256.certFile;
    const withCert = openssl(`ts -verify -data ${DATA} -in ${reply} -CAfile ${cert} -untrusted ${cert}`);
    expect(withCert.out).toContain('Verification: OK');
    // With certReq the certificate is in the token.
    const withReq = await buildGrantedResponse(
      grantOptions(query('withcert', ['-sha256', '-cert'])),
      tsas.p256.identity,
    );
    const certs = tokenParts(withReq).signedData.certificates ?? [];
    expect(certs).toHaveLength(1);
    expect(Buffer.from(AsnConvert.serialize(certs[0]?.certificate)).equals(tsas.p256.identity.certificate)).toBe(true);
  });
});

describe('refused queries', () => {
  /** The PKIFailureInfo texts OpenSSL 3.0 prints (crypto/ts/ts_rsp_print.c). */
  const OPENSSL_FAILURE_TEXT: Record<PkiFailure, string> = {
    badAlg: 'unrecognized or unsupported algorithm identifier',
    badRequest: 'transaction not permitted or supported',
    badDataFormat: 'the data submitted has the wrong format',
    timeNotAvailable: "the TSA's time source is not available",
    unacceptedPolicy: 'the requested TSA policy is not supported by the TSA',
    unacceptedExtension: 'the requested extension is not supported by the TSA',
    addInfoNotAvailable: 'the additional information requested could not be understood or is not available',
    systemFailure: 'the request cannot be handled due to system failure',
  };

  function refusal(der: Buffer): { failInfo: PkiFailure; reason: string } {
    const result = parseTimeStampRequest(der, RULES);
    if (result.ok) throw new Error('the query was accepted');
    return result.refusal;
  }

  it.each(
    Object.keys(PKI_FAILURE_BITS) as PkiFailure[],
  )('a rejection with %s reads back in openssl as exactly that failure', (failInfo) => {
    const reply = writeReply(`rejected-${failInfo}`, buildRejectionResponse(failInfo, `because ${failInfo}`));
    const text = replyText(reply);
    expect(text).toContain('Status: Rejected.');
    expect(text).toContain(`because ${failInfo}`);
    const info = /Failure info:\s*\n?([^\n]*)\n/.exec(text)?.[1]?.trim();
    expect(info).toBe(OPENSSL_FAILURE_TEXT[failInfo]);
    expect(text).toContain('TST info:\nNot included.');
  });

  it('SHA-1 (openssl ts -query -sha1) is badAlg', () => {
    const r = refusal(query('sha1', ['-sha1', '-cert']));
    expect(r).toEqual({ failInfo: 'badAlg', reason: expect.stringContaining('SHA-1') });
  });

  it('an unknown hash algorithm (-sha224, -md5) is badAlg', () => {
    expect(refusal(query('sha224', ['-sha224'])).failInfo).toBe('badAlg');
    expect(refusal(query('md5', ['-md5'])).failInfo).toBe('badAlg');
  });

  it('a policy not configured (-tspolicy 1.2.3.4.5) is unacceptedPolicy; a configured one is accepted', () => {
    expect(refusal(query('policy', ['-sha256', '-tspolicy', '1.2.3.4.5']))).toEqual({
      failInfo: 'unacceptedPolicy',
      reason: expect.stringContaining('1.2.3.4.5'),
    });
    const ok = parseTimeStampRequest(query('policy-ok', ['-sha256', '-tspolicy', OTHER_POLICY]), RULES);
    expect(ok.ok && ok.policy).toBe(OTHER_POLICY);
    const dflt = parseTimeStampRequest(query('policy-none', ['-sha256']), RULES);
    expect(dflt.ok && dflt.policy).toBe(POLICY);
  });

  it('truncated, padded, empty or non-DER queries are badRequest', () => {
    const der = query('good', ['-sha256', '-cert']);
    for (let cut = 1; cut < der.length; cut++) {
      expect(refusal(der.subarray(0, cut)).failInfo, `cut at ${cut}`).toBe('badRequest');
    }
    expect(refusal(Buffer.concat([der, Buffer.from([0])])).failInfo).toBe('badRequest');
    expect(refusal(Buffer.alloc(0)).failInfo).toBe('badRequest');
    expect(refusal(Buffer.from('POST /tsa HTTP/1.1\r\n')).failInfo).toBe('badRequest');
    expect(refusal(Buffer.alloc(10_000, 0x30)).failInfo).toBe('badRequest');
    // A SEQUENCE of the wrong shape: the imprint is missing.
    expect(refusal(Buffer.from('3003020101', 'hex')).failInfo).toBe('badRequest');
    // Inner lengths that disagree with the outer one (asn1js alone would read past the imprint's announced end).
    const imprintAt = der.indexOf(Buffer.from('300d0609608648016503040201', 'hex')) - 2;
    expect(der[imprintAt]).toBe(0x30);
    for (const delta of [-6, -1, 1]) {
      const bent = Buffer.from(der);
      bent[imprintAt + 1] = (bent[imprintAt + 1] as number) + delta;
      expect(refusal(bent).failInfo, `imprint length ${delta}`).toBe('badRequest');
    }
    // BER's indefinite length is not DER.
    expect(refusal(Buffer.concat([Buffer.from([0x30, 0x80]), der.subarray(2), Buffer.from([0, 0])])).failInfo).toBe(
      'badRequest',
    );
  });

  it('version 2 and an empty nonce are badRequest, a wrong-length imprint badDataFormat, SHA-2 with parameters badAlg', () => {
    const der = query('v2', ['-sha256', '-no_nonce']);
    // 30 len 02 01 01: the version is the first element.
    expect(der.subarray(2, 5).toString('hex')).toBe('020101');
    const v2 = Buffer.from(der);
    v2[4] = 2;
    expect(refusal(v2)).toEqual({ failInfo: 'badRequest', reason: expect.stringContaining('version 2') });
    // A SHA-256 OID over a 20-byte value (OpenSSL's TSA answers this with badDataFormat too).
    const imprint = Buffer.concat([
      Buffer.from('3025300d06096086480165030402010500', 'hex'),
      Buffer.from('0414', 'hex'),
      Buffer.alloc(20, 7),
    ]);
    const short = Buffer.concat([Buffer.from([0x30, 3 + imprint.length]), Buffer.from('020101', 'hex'), imprint]);
    expect(refusal(short).failInfo).toBe('badDataFormat');
    // A SHA-256 AlgorithmIdentifier with parameters other than NULL is badAlg.
    const withParams = Buffer.from(der);
    const nullAt = withParams.indexOf(Buffer.from('06096086480165030402010500', 'hex')) + 11;
    expect(withParams.subarray(nullAt, nullAt + 2).toString('hex')).toBe('0500');
    withParams[nullAt] = 0x04; // an empty OCTET STRING instead of NULL
    expect(refusal(withParams)).toEqual({ failInfo: 'badAlg', reason: expect.stringContaining('parameters') });
    // An empty nonce INTEGER could not be echoed as DER.
    const emptyNonce = Buffer.concat([der.subarray(2), Buffer.from('0200', 'hex')]);
    expect(refusal(Buffer.concat([Buffer.from([0x30, emptyNonce.length]), emptyNonce])).failInfo).toBe('badRequest');
  });

  it('any extension, critical or not, is unacceptedExtension unless the rules accept its OID', () => {
    const base = query('ext', ['-sha256', '-no_nonce']);
    const withExtension = (critical: boolean) => {
      // [0] IMPLICIT Extensions { Extension { 1.2.3.4, critical?, OCTET STRING { 05 00 } } }
      const ext = Buffer.from(`30${critical ? '0c' : '09'}06032a0304${critical ? '0101ff' : ''}04020500`, 'hex');
      const exts = Buffer.concat([Buffer.from([0xa0, ext.length]), ext]);
      const body = Buffer.concat([base.subarray(2), exts]);
      return Buffer.concat([Buffer.from([0x30, body.length]), body]);
    };
    for (const critical of [true, false]) {
      expect(refusal(withExtension(critical))).toEqual({
        failInfo: 'unacceptedExtension',
        reason: expect.stringContaining('1.2.3.4'),
      });
    }
    const accepted = parseTimeStampRequest(withExtension(true), { ...RULES, acceptedExtensions: ['1.2.3.4'] });
    expect(accepted.ok && accepted.request.extensions).toEqual([
      { id: '1.2.3.4', critical: true, value: Buffer.from('0500', 'hex') },
    ]);
  });
});

describe('the caller', () => {
  it('gets a TsaConfigurationError for a serial out of range or an impossible accuracy; an empty accuracy is left out', async () => {
    const der = query('caller', ['-sha256']);
    const identity = tsas.p256.identity;
    for (const serialNumber of [0n, -1n, 1n << 160n]) {
      await expect(buildGrantedResponse(grantOptions(der, { serialNumber }), identity)).rejects.toThrow(
        TsaConfigurationError,
      );
    }
    await expect(
      buildGrantedResponse(grantOptions(der, { serialNumber: (1n << 160n) - 1n }), identity),
    ).resolves.toBeInstanceOf(Buffer);
    for (const accuracy of [{ millis: 1000 }, { micros: 0 }, { seconds: -1 }, { seconds: 0.5 }]) {
      await expect(buildGrantedResponse(grantOptions(der, { accuracy }), identity)).rejects.toThrow(
        TsaConfigurationError,
      );
    }
    const reply = await buildGrantedResponse(grantOptions(der, { accuracy: { seconds: 0 } }), identity);
    expect(tokenParts(reply).tst.accuracy).toBeUndefined();
    expect(replyText(writeReply('no-accuracy', reply))).toContain('Accuracy: unspecified\n');
  });
});

describe('the signing callback', () => {
  it('a signature by another key, or ECDSA as raw r||s, is caught before a token or certificate is made', async () => {
    const der = query('wrongkey', ['-sha256', '-cert']);
    const wrongKey: TsaIdentity = { ...tsas.p256.identity, sign: digestSigner(tsas.p384.key) };
    await expect(buildGrantedResponse(grantOptions(der), wrongKey)).rejects.toThrow(TsaSignatureError);
    const raw: TsaIdentity = {
      ...tsas.p256.identity,
      sign: async (digest, algorithm) => {
        const derSig = await tsas.p256.identity.sign(digest, algorithm);
        return Buffer.from(p256.Signature.fromBytes(derSig, 'der').toBytes('compact'));
      },
    };
    await expect(buildGrantedResponse(grantOptions(der), raw)).rejects.toThrow(TsaSignatureError);
    await expect(
      createTsaCertificate(
        { spki: tsas.rsa.spki, algorithm: 'ECDSA_SHA_256', sign: tsas.p256.identity.sign },
        { subject: '/CN=x', days: 1 },
      ),
    ).rejects.toThrow(TsaSignatureError);
  });

  it('the certificate verifies under node:crypto too (an implementation other than OpenSSL)', () => {
    for (const tsa of Object.values(tsas)) {
      const cert = new X509Certificate(tsa.identity.certificate);
      expect(cert.verify(cert.publicKey)).toBe(true);
      expect(cert.keyUsage).toEqual(['1.3.6.1.5.5.7.3.8']);
    }
  });
});
