// The TSA's certificate: self-signed for trials, or a PKCS#10 request for the organisation's CA. RFC 3161 §2.3 wants
// the extended key usage id-kp-timeStamping as the only purpose and critical; OpenSSL refuses to sign or verify
// tokens otherwise ("invalid signer certificate purpose"), and the CA/B Code Signing BRs §7.1.2.3 say the same.
// Both are signed through the same SignDigest callback as the tokens, so the key never leaves its key store.
import { createHash, randomBytes } from 'node:crypto';
import { Attributes, CertificationRequest, CertificationRequestInfo } from '@peculiar/asn1-csr';
import { AsnConvert, OctetString } from '@peculiar/asn1-schema';
import {
  Attribute,
  AuthorityKeyIdentifier,
  BasicConstraints,
  Certificate,
  ExtendedKeyUsage,
  Extension,
  Extensions,
  id_ce_authorityKeyIdentifier,
  id_ce_basicConstraints,
  id_ce_extKeyUsage,
  id_ce_keyUsage,
  id_ce_subjectKeyIdentifier,
  id_kp_timeStamping,
  KeyIdentifier,
  KeyUsage,
  KeyUsageFlags,
  Name,
  SubjectKeyIdentifier,
  SubjectPublicKeyInfo,
  TBSCertificate,
  Validity,
  Version,
} from '@peculiar/asn1-x509';
import { parseSubject } from '../crypto/subject-name.js';
import {
  certificateSignatureAlgorithmId,
  type SignDigest,
  signChecked,
  type TsaSigningAlgorithm,
} from './tsa-algorithms.js';

/** PKCS#9 extensionRequest: the extensions a CSR asks the CA to put in the certificate. */
const ID_EXTENSION_REQUEST = '1.2.840.113549.1.9.14';

/** The TSA key as this module needs it: its public half and a way to sign a digest with it. */
export interface TsaKey {
  /** SubjectPublicKeyInfo, DER. */
  spki: Buffer;
  /** RSA PKCS#1 v1.5 or ECDSA; the tokens should later be signed with the same one. */
  algorithm: TsaSigningAlgorithm;
  sign: SignDigest;
}

export interface TsaCertificateOptions {
  /** `/CN=Example TSA/O=Example` or `CN=Example TSA, O=Example` (src/crypto/subject-name.ts). */
  subject: string;
  /** Validity in days; the CA/B BRs cap a TSA certificate at 135 months, its key's use at 15. */
  days: number;
  notBefore?: Date;
}

function extension(id: string, critical: boolean, value: unknown): Extension {
  return new Extension({ extnID: id, critical, extnValue: new OctetString(AsnConvert.serialize(value)) });
}

/** RFC 5280 §4.2.1.2 method 1: SHA-1 of the subjectPublicKey bits (an identifier, not a security property). */
function keyIdentifier(spki: Buffer): Buffer {
  const info = AsnConvert.parse(spki, SubjectPublicKeyInfo);
  return createHash('sha1').update(Buffer.from(info.subjectPublicKey)).digest();
}

/** The extensions a TSA certificate carries and a TSA CSR asks for. */
export function tsaExtensions(spki: Buffer): Extension[] {
  return [
    extension(id_ce_basicConstraints, true, new BasicConstraints({ cA: false })),
    extension(id_ce_keyUsage, true, new KeyUsage(KeyUsageFlags.digitalSignature)),
    extension(id_ce_extKeyUsage, true, new ExtendedKeyUsage([id_kp_timeStamping])),
    extension(id_ce_subjectKeyIdentifier, false, new SubjectKeyIdentifier(keyIdentifier(spki))),
  ];
}

function subjectName(subject: string): Name {
  return AsnConvert.parse(parseSubject(subject).toArrayBuffer(), Name);
}

/** A positive 128-bit serial number (RFC 5280 allows up to 20 octets; CA/B wants ≥ 64 random bits). */
function randomSerial(): ArrayBuffer {
  const bytes = randomBytes(16);
  bytes[0] = ((bytes[0] as number) & 0x7f) | 0x40;
  return new Uint8Array(bytes).buffer;
}

/** A self-signed TSA certificate for the key, DER; its signature is checked before it is returned. */
export async function createTsaCertificate(key: TsaKey, options: TsaCertificateOptions): Promise<Buffer> {
  if (!Number.isInteger(options.days) || options.days < 1 || options.days > 4_110) {
    throw new RangeError(`days must be a whole number from 1 to 4110 (135 months), got ${options.days}`);
  }
  const name = subjectName(options.subject);
  // A minute back, so that a verifier whose clock is slightly behind does not see a certificate from the future.
  const notBefore = options.notBefore ?? new Date(Date.now() - 60_000);
  const signatureAlgorithm = certificateSignatureAlgorithmId(key.algorithm);
  const tbs = new TBSCertificate({
    version: Version.v3,
    serialNumber: randomSerial(),
    signature: signatureAlgorithm,
    issuer: name,
    validity: new Validity({ notBefore, notAfter: new Date(notBefore.getTime() + options.days * 86_400_000) }),
    subject: name,
    subjectPublicKeyInfo: AsnConvert.parse(key.spki, SubjectPublicKeyInfo),
    extensions: new Extensions([
      ...tsaExtensions(key.spki),
      extension(
        id_ce_authorityKeyIdentifier,
        false,
        new AuthorityKeyIdentifier({ keyIdentifier: new KeyIdentifier(keyIdentifier(key.spki)) }),
      ),
    ]),
  });
  const tbsDer = Buffer.from(AsnConvert.serialize(tbs));
  const signature = await signChecked(tbsDer, key.algorithm, key.sign, key.spki);
  const cert = new Certificate({
    tbsCertificate: tbs,
    signatureAlgorithm,
    signatureValue: new Uint8Array(signature).buffer,
  });
  return Buffer.from(AsnConvert.serialize(cert));
}

/** A PKCS#10 request for a TSA certificate, DER, asking for the extensions of tsaExtensions(). */
export async function createTsaCsr(key: TsaKey, options: { subject: string }): Promise<Buffer> {
  const info = new CertificationRequestInfo({
    version: 0,
    subject: subjectName(options.subject),
    subjectPKInfo: AsnConvert.parse(key.spki, SubjectPublicKeyInfo),
    attributes: new Attributes([
      new Attribute({
        type: ID_EXTENSION_REQUEST,
        values: [AsnConvert.serialize(new Extensions(tsaExtensions(key.spki)))],
      }),
    ]),
  });
  const infoDer = Buffer.from(AsnConvert.serialize(info));
  const signature = await signChecked(infoDer, key.algorithm, key.sign, key.spki);
  const csr = new CertificationRequest({
    certificationRequestInfo: info,
    signatureAlgorithm: certificateSignatureAlgorithmId(key.algorithm),
    signature: new Uint8Array(signature).buffer,
  });
  return Buffer.from(AsnConvert.serialize(csr));
}

/**
 * What keeps a certificate from serving as a TSA certificate (empty when nothing does): for `tsa cert import`, so
 * an organisation's CA issuing the wrong profile is caught at import, not by every client later.
 */
export function tsaCertificateProblems(der: Buffer): string[] {
  let cert: Certificate;
  try {
    cert = AsnConvert.parse(der, Certificate);
  } catch (err) {
    return [`not a DER certificate: ${(err as Error).message}`];
  }
  const problems: string[] = [];
  const extensions = cert.tbsCertificate.extensions ?? [];
  const eku = extensions.find((e) => e.extnID === id_ce_extKeyUsage);
  if (!eku) {
    problems.push('no extended key usage; a TSA certificate needs id-kp-timeStamping, critical');
  } else {
    const usages = AsnConvert.parse(eku.extnValue.buffer, ExtendedKeyUsage);
    if (usages.length !== 1 || usages[0] !== id_kp_timeStamping) {
      problems.push(`extended key usage is ${usages.join(', ')}; it must be id-kp-timeStamping only`);
    }
    if (!eku.critical) problems.push('the extended key usage is not critical; OpenSSL and RFC 3161 §2.3 require it');
  }
  const ku = extensions.find((e) => e.extnID === id_ce_keyUsage);
  if (ku) {
    const flags = AsnConvert.parse(ku.extnValue.buffer, KeyUsage).toNumber();
    if (!(flags & KeyUsageFlags.digitalSignature)) problems.push('the key usage lacks digitalSignature');
    if (flags & ~(KeyUsageFlags.digitalSignature | KeyUsageFlags.nonRepudiation)) {
      problems.push('the key usage allows more than digitalSignature and nonRepudiation');
    }
  }
  return problems;
}
