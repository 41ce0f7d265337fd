// Time-stamp replies (RFC 3161 §2.4.2, `application/timestamp-reply`): a granted one carrying a token (TSTInfo in
// CMS SignedData, signed by the TSA key through a SignDigest callback), or a rejection with its failure bit.
import { createHash } from 'node:crypto';
import {
  Attribute,
  CertificateChoices,
  CertificateSet,
  CMSVersion,
  DigestAlgorithmIdentifiers,
  EncapsulatedContent,
  EncapsulatedContentInfo,
  IssuerAndSerialNumber,
  id_contentType,
  id_messageDigest,
  id_signedData,
  id_signingTime,
  SignedData,
  SignerIdentifier,
  SignerInfo,
  SignerInfos,
  SigningTime,
} from '@peculiar/asn1-cms';
import { AsnConvert, OctetString } from '@peculiar/asn1-schema';
import {
  Accuracy,
  id_ct_tstInfo,
  MessageImprint,
  PKIFailureInfo,
  PKIFreeText,
  PKIStatus,
  PKIStatusInfo,
  TimeStampResp,
  TimeStampToken,
  TSTInfo,
} from '@peculiar/asn1-tsp';
import { AlgorithmIdentifier, Certificate, GeneralName } from '@peculiar/asn1-x509';
import { readChildren, TAG, tlv } from '../crypto/der.js';
import { encodeObjectIdentifier } from '../crypto/object-identifier.js';
import { ID_AA_SIGNING_CERTIFICATE_V2, signingCertificateV2 } from './ess-signing-certificate.js';
import { PKI_FAILURE_BITS, type PkiFailure, type TimeStampRequest } from './timestamp-request.js';
import {
  cmsSignatureAlgorithmId,
  digestAlgorithmId,
  hashOf,
  type SignDigest,
  signChecked,
  type TsaSigningAlgorithm,
} from './tsa-algorithms.js';

/** The content-type attribute's value: OBJECT IDENTIFIER id-ct-TSTInfo (1.2.840.113549.1.9.16.1.4), DER. */
const TST_INFO_OID_DER = Buffer.from('060b2a864886f70d0109100104', 'hex');

/** The TSA's signing identity: its certificate, the chain above it, and its key behind a callback. */
export interface TsaIdentity {
  /** The TSA certificate, DER (critical EKU id-kp-timeStamping only: tsa-certificate.ts). */
  certificate: Buffer;
  /** Certificates above it (issuing CA first), DER; they go into a token with the TSA certificate when certReq asks. */
  chain?: readonly Buffer[];
  /** Match the algorithm that signed the TSA certificate (CA/B Code Signing BRs §6.8). */
  algorithm: TsaSigningAlgorithm;
  sign: SignDigest;
}

/** RFC 3161 Accuracy: how far genTime may be from UTC; millis and micros are 1..999. */
export interface TsaAccuracy {
  seconds?: number;
  millis?: number;
  micros?: number;
}

export interface GrantOptions {
  request: TimeStampRequest;
  /** The policy parseTimeStampRequest chose (the requested one, or the default). */
  policy: string;
  /** Unique per TSA across every instance (docs/tsa-design.md); positive, at most 160 bits (RFC 3161 §2.4.2). */
  serialNumber: bigint;
  /** The time to state; whole seconds unless the accuracy is finer than a second. */
  genTime: Date;
  accuracy?: TsaAccuracy;
  /** Name the TSA in the token (tsa [0]: the certificate's subject). */
  tsaName?: boolean;
  /** Add a signing-time attribute (RFC 3161 does not need one; genTime is the time that counts). */
  signingTime?: boolean;
}

/** A caller's mistake in GrantOptions or TsaIdentity (not a client's: those are refusals in the request parser). */
export class TsaConfigurationError extends Error {}

/** DER INTEGER contents of a positive bigint. */
function positiveIntegerBytes(value: bigint): Buffer {
  let hex = value.toString(16);
  if (hex.length % 2) hex = `0${hex}`;
  const bytes = Buffer.from(hex, 'hex');
  return (bytes[0] as number) & 0x80 ? Buffer.concat([Buffer.from([0]), bytes]) : bytes;
}

/** The Accuracy field, or undefined when it would say nothing (all parts zero or absent). */
function accuracyField(accuracy: TsaAccuracy): Accuracy | undefined {
  const { seconds, millis, micros } = accuracy;
  if (seconds !== undefined && (!Number.isInteger(seconds) || seconds < 0)) {
    throw new TsaConfigurationError(`accuracy.seconds must be a whole number ≥ 0, got ${seconds}`);
  }
  for (const [name, v] of [
    ['millis', millis],
    ['micros', micros],
  ] as const) {
    if (v !== undefined && (!Number.isInteger(v) || v < 1 || v > 999)) {
      throw new TsaConfigurationError(`accuracy.${name} must be 1..999, got ${v}`);
    }
  }
  // Zero seconds are left out rather than encoded (asn1-tsp's Accuracy would otherwise write seconds 0).
  if (!seconds && millis === undefined && micros === undefined) return undefined;
  return new Accuracy({ seconds: seconds || undefined, millis, micros } as Partial<Accuracy>);
}

/** Sub-second genTime only when the stated accuracy is finer than a second (a fraction would otherwise be noise). */
function genTimeFor(time: Date, accuracy: TsaAccuracy | undefined): Date {
  const subSecond = accuracy !== undefined && !accuracy.seconds && (accuracy.millis ?? accuracy.micros) !== undefined;
  const ms = time.getTime();
  return new Date(subSecond ? ms : ms - (((ms % 1000) + 1000) % 1000));
}

function attribute(type: string, valueDer: ArrayBuffer | Buffer): Attribute {
  return new Attribute({ attrType: type, attrValues: [new Uint8Array(valueDer).slice().buffer] });
}

/** DER SET OF: elements in ascending order of their encodings (X.690 §11.6). */
function sortForSet<T>(items: T[]): T[] {
  const encoded = items.map((item) => ({ item, der: Buffer.from(AsnConvert.serialize(item)) }));
  encoded.sort((a, b) => Buffer.compare(a.der, b.der));
  return encoded.map((e) => e.item);
}

function statusInfo(status: PKIStatus, failInfo?: PkiFailure, statusString?: string): PKIStatusInfo {
  const info = new PKIStatusInfo({ status });
  // SignServer found that a statusString on a granted reply trips some OpenJDK jarsigner versions; only
  // rejections carry one.
  if (statusString !== undefined) info.statusString = new PKIFreeText([statusString]);
  // asn1-tsp's PKIFailureInfoFlags are off by one bit (all but badAlg), so the bit is set by its RFC number;
  // BitString.fromNumber puts value bit n at named bit n and trims the unused bits as DER wants.
  if (failInfo !== undefined) info.failInfo = new PKIFailureInfo(2 ** PKI_FAILURE_BITS[failInfo]);
  return info;
}

/** A rejection reply: status rejection, the failure bit, and (optionally) a sentence saying why. */
export function buildRejectionResponse(failInfo: PkiFailure, statusString?: string): Buffer {
  const resp = new TimeStampResp({ status: statusInfo(PKIStatus.rejection, failInfo, statusString) });
  return Buffer.from(AsnConvert.serialize(resp));
}

/** The TSTInfo DER a token will carry. */
export function buildTstInfo(options: GrantOptions, tsaCertificate: Certificate): Buffer {
  const { request, serialNumber } = options;
  if (serialNumber <= 0n || serialNumber >= 1n << 160n) {
    throw new TsaConfigurationError('serialNumber must be positive and at most 160 bits (RFC 3161 §2.4.2)');
  }
  if (Number.isNaN(options.genTime.getTime())) throw new TsaConfigurationError('genTime is not a valid date');
  const tst = new TSTInfo({
    version: 1,
    policy: options.policy,
    messageImprint: new MessageImprint({
      // Copied as sent, parameters included: RFC 3161 says it MUST be the same value as in the query.
      hashAlgorithm: new AlgorithmIdentifier({ algorithm: request.imprint.hashAlgorithm }),
      hashedMessage: new OctetString(request.imprint.hashedMessage),
    }),
    serialNumber: new Uint8Array(positiveIntegerBytes(serialNumber)).buffer,
    genTime: genTimeFor(options.genTime, options.accuracy),
    ordering: false,
  });
  const accuracy = options.accuracy && accuracyField(options.accuracy);
  if (accuracy) tst.accuracy = accuracy;
  if (request.nonce) tst.nonce = new Uint8Array(request.nonce).slice().buffer;
  if (options.tsaName) tst.tsa = new GeneralName({ directoryName: tsaCertificate.tbsCertificate.subject });
  return withPolicy(Buffer.from(AsnConvert.serialize(tst)), options.policy);
}

/** TSTInfo DER with its policy (the second field) encoded here: asn1js writes arcs above 2^53 wrongly. */
function withPolicy(tstInfo: Buffer, policy: string): Buffer {
  let policyDer: Buffer;
  try {
    policyDer = encodeObjectIdentifier(policy);
  } catch (err) {
    throw new TsaConfigurationError(`policy: ${(err as Error).message}`);
  }
  const [version, , ...rest] = readChildren(readChildren(tstInfo)[0]?.content ?? new Uint8Array());
  if (!version) throw new TsaConfigurationError('TSTInfo was not encoded');
  const element = (e: { tag: number; content: Uint8Array }) => tlv(e.tag, e.content);
  return tlv(TAG.SEQUENCE, element(version), policyDer, ...rest.map(element));
}

/**
 * A granted reply: the token is SignedData over the TSTInfo with the signed attributes content-type,
 * message-digest, signing-certificate-v2 (and signing-time if asked), signed through `identity.sign` and checked
 * against the certificate's key before it is returned. The certificates go in when the query's certReq is true.
 */
export async function buildGrantedResponse(options: GrantOptions, identity: TsaIdentity): Promise<Buffer> {
  let cert: Certificate;
  try {
    cert = AsnConvert.parse(identity.certificate, Certificate);
  } catch (err) {
    throw new TsaConfigurationError(`the TSA certificate is not a DER certificate: ${(err as Error).message}`);
  }
  const hash = hashOf(identity.algorithm);
  const tstInfo = buildTstInfo(options, cert);

  const signedAttrs = [
    attribute(id_contentType, TST_INFO_OID_DER),
    attribute(id_messageDigest, AsnConvert.serialize(new OctetString(createHash(hash).update(tstInfo).digest()))),
    attribute(ID_AA_SIGNING_CERTIFICATE_V2, signingCertificateV2(identity.certificate)),
  ];
  if (options.signingTime) {
    signedAttrs.push(attribute(id_signingTime, AsnConvert.serialize(new SigningTime(options.genTime))));
  }
  const sortedAttrs = sortForSet(signedAttrs);
  // What is signed is the DER of the attributes as a SET OF (tag 0x31), not the [0] IMPLICIT form in SignerInfo
  // (RFC 5652 §5.4); the content is the same bytes, so encode the SignerInfo once and retag its attributes.
  const signedAttrsDer = tlv(TAG.SET, ...sortedAttrs.map((a) => Buffer.from(AsnConvert.serialize(a))));
  const spki = Buffer.from(AsnConvert.serialize(cert.tbsCertificate.subjectPublicKeyInfo));
  const signature = await signChecked(signedAttrsDer, identity.algorithm, identity.sign, spki);

  const signerInfo = new SignerInfo({
    version: CMSVersion.v1,
    sid: new SignerIdentifier({
      issuerAndSerialNumber: new IssuerAndSerialNumber({
        issuer: cert.tbsCertificate.issuer,
        serialNumber: cert.tbsCertificate.serialNumber,
      }),
    }),
    digestAlgorithm: digestAlgorithmId(hash),
    signedAttrs: sortedAttrs,
    signatureAlgorithm: cmsSignatureAlgorithmId(identity.algorithm),
    signature: new OctetString(signature),
  });
  const signedData = new SignedData({
    // v3: the encapsulated content is not id-data (RFC 5652 §5.1).
    version: CMSVersion.v3,
    digestAlgorithms: new DigestAlgorithmIdentifiers([digestAlgorithmId(hash)]),
    encapContentInfo: new EncapsulatedContentInfo({
      eContentType: id_ct_tstInfo,
      eContent: new EncapsulatedContent({ single: new OctetString(tstInfo) }),
    }),
    signerInfos: new SignerInfos([signerInfo]),
  });
  if (options.request.certReq) {
    const certs = [identity.certificate, ...(identity.chain ?? [])].map(
      (der) => new CertificateChoices({ certificate: AsnConvert.parse(der, Certificate) }),
    );
    signedData.certificates = new CertificateSet(sortForSet(certs));
  }
  const token = new TimeStampToken({ contentType: id_signedData, content: AsnConvert.serialize(signedData) });
  const resp = new TimeStampResp({ status: statusInfo(PKIStatus.granted), timeStampToken: token });
  return Buffer.from(AsnConvert.serialize(resp));
}
