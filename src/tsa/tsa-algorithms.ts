// The algorithms a time-stamping authority deals in: the hashes a query's imprint may use, and the signatures its
// key makes (over a digest computed here, so the key can be anywhere: a PKCS#11 token, AWS KMS, the software store).
//
// ASN.1 library: @peculiar/asn1-tsp 2.6.0 with @peculiar/asn1-cms / -x509 / -csr / -schema 2.11.1, pinned exactly.
// They are the family @peculiar/x509 (already used in src/cli/certs/) is built on, so the tree has one copy of
// asn1-schema and asn1js; they ship CommonJS and ES builds and run on Node 20 and 24 (checked on both). Two gaps are
// filled here and in the modules beside it: asn1-tsp's PKIFailureInfoFlags numbers every bit but badAlg one place too
// low (badRequest = 2 is bit 1, not bit 2), so failure bits are set by their RFC 3161 bit numbers; and the family has
// no ESS package, so SigningCertificateV2 (RFC 5035/5816) is declared in ess-signing-certificate.ts.
import { createHash, createPublicKey, verify as verifySignature } from 'node:crypto';
import { AlgorithmIdentifier } from '@peculiar/asn1-x509';
import { DIGEST_LENGTH, type HashName } from '../crypto/algorithms.js';
import { TSA_SIGNING_ALGORITHMS, type TsaSigningAlgorithm } from '../store/records/tsa-algorithms.js';

export { TSA_SIGNING_ALGORITHMS, type TsaSigningAlgorithm };

/** The digest algorithms a query's imprint may use (RFC 3161 leaves the choice to the TSA; SHA-1 is refused). */
export const IMPRINT_HASHES: Readonly<Record<string, HashName>> = {
  '2.16.840.1.101.3.4.2.1': 'sha256',
  '2.16.840.1.101.3.4.2.2': 'sha384',
  '2.16.840.1.101.3.4.2.3': 'sha512',
};
export const SHA1_OID = '1.3.14.3.2.26';
export const HASH_OID: Readonly<Record<HashName, string>> = {
  sha256: '2.16.840.1.101.3.4.2.1',
  sha384: '2.16.840.1.101.3.4.2.2',
  sha512: '2.16.840.1.101.3.4.2.3',
};

/**
 * Signs a digest with the TSA key: KeyStore.sign's contract (src/keys/key-store.ts), so a key store plugs in as
 * `(digest, algorithm) => keyStore.sign(keyRef, spec, algorithm, digest)`. RSA: the modulus-sized signature;
 * ECDSA: the X9.62 DER SEQUENCE (what the key stores return).
 */
export type SignDigest = (digest: Buffer, algorithm: TsaSigningAlgorithm) => Promise<Buffer>;

export function isTsaSigningAlgorithm(value: string): value is TsaSigningAlgorithm {
  return (TSA_SIGNING_ALGORITHMS as readonly string[]).includes(value);
}

export function hashOf(algorithm: TsaSigningAlgorithm): HashName {
  return `sha${algorithm.slice(-3)}` as HashName;
}

const RSA_WITH: Record<HashName, string> = {
  sha256: '1.2.840.113549.1.1.11',
  sha384: '1.2.840.113549.1.1.12',
  sha512: '1.2.840.113549.1.1.13',
};
const ECDSA_WITH: Record<HashName, string> = {
  sha256: '1.2.840.10045.4.3.2',
  sha384: '1.2.840.10045.4.3.3',
  sha512: '1.2.840.10045.4.3.4',
};
const RSA_ENCRYPTION = '1.2.840.113549.1.1.1';

/** The digest AlgorithmIdentifier: parameters absent (RFC 5754 §2: SHOULD be absent, MUST accept NULL). */
export function digestAlgorithmId(hash: HashName): AlgorithmIdentifier {
  return new AlgorithmIdentifier({ algorithm: HASH_OID[hash] });
}

/** The signature AlgorithmIdentifier of a certificate or a CSR: sha*WithRSAEncryption (NULL) or ecdsa-with-SHA* (absent). */
export function certificateSignatureAlgorithmId(algorithm: TsaSigningAlgorithm): AlgorithmIdentifier {
  const hash = hashOf(algorithm);
  return algorithm.startsWith('ECDSA')
    ? new AlgorithmIdentifier({ algorithm: ECDSA_WITH[hash] })
    : new AlgorithmIdentifier({ algorithm: RSA_WITH[hash], parameters: null });
}

/**
 * The signatureAlgorithm of a CMS SignerInfo: rsaEncryption for RSA, as OpenSSL's TSA writes it (RFC 5754 §3.2
 * allows it and every verifier reads it), ecdsa-with-SHA* for EC (RFC 5753 §2.1.1: ecdsa-with-SHA* is what it takes).
 */
export function cmsSignatureAlgorithmId(algorithm: TsaSigningAlgorithm): AlgorithmIdentifier {
  return algorithm.startsWith('ECDSA')
    ? new AlgorithmIdentifier({ algorithm: ECDSA_WITH[hashOf(algorithm)] })
    : new AlgorithmIdentifier({ algorithm: RSA_ENCRYPTION, parameters: null });
}

/** The key that signed does not match the public key it should (a key store handing back the wrong key, say). */
export class TsaSignatureError extends Error {}

/**
 * Hashes `data`, has the key sign the digest, and checks the signature with `spki` before anything carries it: a
 * token or certificate made with the wrong key would be handed out as valid and fail only at the customer's end.
 */
export async function signChecked(
  data: Buffer,
  algorithm: TsaSigningAlgorithm,
  sign: SignDigest,
  spki: Buffer,
): Promise<Buffer> {
  const hash = hashOf(algorithm);
  const digest = createHash(hash).update(data).digest();
  if (digest.length !== DIGEST_LENGTH[hash]) throw new Error('unreachable: digest length');
  const signature = await sign(digest, algorithm);
  const key = createPublicKey({ key: spki, format: 'der', type: 'spki' });
  const expectedType = algorithm.startsWith('ECDSA') ? 'ec' : 'rsa';
  if (key.asymmetricKeyType !== expectedType) {
    throw new TsaSignatureError(
      `${algorithm} needs an ${expectedType.toUpperCase()} key, the certificate has ${key.asymmetricKeyType}`,
    );
  }
  if (!verifySignature(hash, data, key, signature)) {
    throw new TsaSignatureError(
      `the ${algorithm} signature does not verify with the TSA certificate's public key (ECDSA signatures must be DER)`,
    );
  }
  return signature;
}
