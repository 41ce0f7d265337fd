// The ESS signing-certificate-v2 attribute (RFC 5035 §3, required in time-stamp tokens by RFC 3161 §2.4.2 as
// amended by RFC 5816): it binds the token to the TSA certificate by hash, so a verifier cannot be handed another
// certificate with the same key. OpenSSL's `ts -verify`, jarsigner and osslsigncode look for it (or the SHA-1 v1).
//
// The @peculiar family has no ESS package, so the three types are declared here. The decorators are applied as
// calls: this project compiles without `experimentalDecorators`, and asn1-schema's are legacy-style decorators.
import { createHash } from 'node:crypto';
import { AsnConvert, AsnIntegerArrayBufferConverter, AsnProp, AsnPropTypes, OctetString } from '@peculiar/asn1-schema';
import { AlgorithmIdentifier, Certificate, GeneralName, GeneralNames } from '@peculiar/asn1-x509';

/** id-aa-signingCertificateV2 */
export const ID_AA_SIGNING_CERTIFICATE_V2 = '1.2.840.113549.1.9.16.2.47';

/** IssuerSerial ::= SEQUENCE { issuer GeneralNames, serialNumber CertificateSerialNumber } */
export class IssuerSerial {
  issuer = new GeneralNames();
  serialNumber = new ArrayBuffer(0);
  constructor(params: Partial<IssuerSerial> = {}) {
    Object.assign(this, params);
  }
}
AsnProp({ type: GeneralNames })(IssuerSerial.prototype, 'issuer');
AsnProp({ type: AsnPropTypes.Integer, converter: AsnIntegerArrayBufferConverter })(
  IssuerSerial.prototype,
  'serialNumber',
);

/**
 * ESSCertIDv2 ::= SEQUENCE { hashAlgorithm AlgorithmIdentifier DEFAULT {algorithm id-sha256},
 *   certHash OCTET STRING, issuerSerial IssuerSerial OPTIONAL }
 * hashAlgorithm stays absent for SHA-256: DER leaves a default value out.
 */
export class EssCertIdV2 {
  hashAlgorithm?: AlgorithmIdentifier;
  certHash = new OctetString();
  issuerSerial?: IssuerSerial;
  constructor(params: Partial<EssCertIdV2> = {}) {
    Object.assign(this, params);
  }
}
AsnProp({ type: AlgorithmIdentifier, optional: true })(EssCertIdV2.prototype, 'hashAlgorithm');
AsnProp({ type: OctetString })(EssCertIdV2.prototype, 'certHash');
AsnProp({ type: IssuerSerial, optional: true })(EssCertIdV2.prototype, 'issuerSerial');

/** SigningCertificateV2 ::= SEQUENCE { certs SEQUENCE OF ESSCertIDv2, policies SEQUENCE OF PolicyInformation OPTIONAL } */
export class SigningCertificateV2 {
  certs: EssCertIdV2[] = [];
  constructor(params: Partial<SigningCertificateV2> = {}) {
    Object.assign(this, params);
  }
}
AsnProp({ type: EssCertIdV2, repeated: 'sequence' })(SigningCertificateV2.prototype, 'certs');

/** The attribute value for the TSA certificate: SHA-256 of its DER, with its issuer and serial number. */
export function signingCertificateV2(certificateDer: Buffer): Buffer {
  const cert = AsnConvert.parse(certificateDer, Certificate);
  const value = new SigningCertificateV2({
    certs: [
      new EssCertIdV2({
        certHash: new OctetString(createHash('sha256').update(certificateDer).digest()),
        issuerSerial: new IssuerSerial({
          issuer: new GeneralNames([new GeneralName({ directoryName: cert.tbsCertificate.issuer })]),
          serialNumber: cert.tbsCertificate.serialNumber,
        }),
      }),
    ],
  });
  return Buffer.from(AsnConvert.serialize(value));
}
