// Checks a signature against what the service signs: a SHA-2 digest (RSA, ECDSA), ML-DSA's μ or SM2's e. Node's
// verify hashes a message itself and has no "verify this digest", so RSA is checked on the recovered encoding
// (RFC 8017: EMSA-PKCS1-v1_5, and EMSA-PSS with any salt length, as Vault's verify accepts, or only the hash's
// length, as KMS signs and verifies), ECDSA with @noble/curves. Used where a caller hands in the digest, not the
// file (Vault transit's verify, KMS's Verify).
import { createHash, createPublicKey, constants as cryptoConstants, publicDecrypt } from 'node:crypto';
import { p256, p384, p521 } from '@noble/curves/nist.js';
import { secp256k1 } from '@noble/curves/secp256k1.js';
import smCrypto from 'sm-crypto';
import { algorithmInfo, DIGEST_LENGTH, type HashName, keyInfo, type SigningAlgorithm } from './algorithms.js';
import { verifyEd25519phDigest } from './ed25519ph.js';
import { DIGEST_INFO_PREFIX } from './encoding.js';
import { mlDsaPublicKey, type PublicKeyOf, sm2PublicPoint } from './file-representative.js';
import { verifyMlDsa } from './ml-dsa-verify.js';

const CURVES = { 'P-256': p256, 'P-384': p384, 'P-521': p521, secp256k1 } as const;

export interface DigestVerifyOptions {
  /**
   * PSS salts accepted: any length (Vault's verify with salt_length auto; the default), only the hash's length
   * (KMS's), or exactly this many bytes (Vault's salt_length as a number).
   */
  pssSaltLength?: 'any' | 'hash' | number;
}

/** True when `signature` is `key`'s signature with `algorithm` of `representative` (digest, μ or e). */
export function verifyDigestSignature(
  key: PublicKeyOf,
  algorithm: SigningAlgorithm,
  representative: Buffer,
  signature: Buffer,
  options: DigestVerifyOptions = {},
): boolean {
  const info = keyInfo(key.keySpec);
  if (info.family === 'ml-dsa') return verifyMlDsa(info.level, mlDsaPublicKey(key), { mu: representative }, signature);
  if (info.family === 'sm2') {
    return smCrypto.sm2.doVerifySignature(
      Array.from(representative),
      signature.toString('hex'),
      sm2PublicPoint(key).toString('hex'),
      { hash: false, der: true },
    );
  }
  const alg = algorithmInfo(algorithm);
  if (info.family === 'ed25519') {
    // Only Ed25519ph has a digest to check; pure Ed25519 is verified over the message (verify-signature.ts).
    return alg.padding === 'ed25519ph' && verifyEd25519ph(key.publicKeyPem, representative, signature);
  }
  if (alg.family === 'ml-dsa' || alg.family === 'sm2' || alg.family === 'ed25519') return false;
  const hash = alg.hash as HashName;
  if (representative.length !== DIGEST_LENGTH[hash]) return false;
  if (info.family === 'ec') return verifyEcdsa(key.publicKeyPem, info.curve, representative, signature);
  const encoded = recoverEncoding(key.publicKeyPem, signature);
  if (!encoded) return false;
  if (alg.padding === 'pss') {
    const asked = options.pssSaltLength;
    const saltLength = asked === 'hash' ? DIGEST_LENGTH[hash] : asked === 'any' ? undefined : asked;
    return pssMatches(encoded.em, encoded.emBits, hash, representative, saltLength);
  }
  const expected = Buffer.concat([DIGEST_INFO_PREFIX[hash], representative]);
  return pkcs1Matches(encoded.em, expected);
}

function verifyEcdsa(pem: string, curve: keyof typeof CURVES, digest: Buffer, der: Buffer): boolean {
  const jwk = createPublicKey(pem).export({ format: 'jwk' });
  const point = Buffer.concat([
    Buffer.from([4]),
    Buffer.from(jwk.x ?? '', 'base64url'),
    Buffer.from(jwk.y ?? '', 'base64url'),
  ]);
  try {
    return CURVES[curve].verify(der, digest, point, { prehash: false, lowS: false, format: 'der' });
  } catch {
    return false; // not DER at all
  }
}

/** Ed25519ph over the SHA-512 digest of the message (ed25519ph.ts). */
function verifyEd25519ph(pem: string, digest: Buffer, signature: Buffer): boolean {
  const publicKey = Buffer.from(createPublicKey(pem).export({ format: 'jwk' }).x ?? '', 'base64url');
  return verifyEd25519phDigest(publicKey, digest, signature);
}

/** s^e mod n as the modulus' bytes, and the encoded message's bit length (modBits - 1). */
function recoverEncoding(pem: string, signature: Buffer): { em: Buffer; emBits: number } | undefined {
  const key = createPublicKey(pem);
  const modBits = key.asymmetricKeyDetails?.modulusLength ?? 0;
  if (signature.length !== Math.ceil(modBits / 8)) return undefined;
  try {
    return { em: publicDecrypt({ key, padding: cryptoConstants.RSA_NO_PADDING }, signature), emBits: modBits - 1 };
  } catch {
    return undefined; // the signature is not below the modulus
  }
}

/** EMSA-PKCS1-v1_5: 00 01 FF..FF 00 DigestInfo. */
function pkcs1Matches(em: Buffer, digestInfo: Buffer): boolean {
  const padLength = em.length - digestInfo.length - 3;
  if (padLength < 8) return false;
  const expected = Buffer.concat([Buffer.from([0, 1]), Buffer.alloc(padLength, 0xff), Buffer.from([0]), digestInfo]);
  return expected.equals(em);
}

function mgf1(hash: HashName, seed: Buffer, length: number): Buffer {
  const out: Buffer[] = [];
  for (let counter = 0; out.length * DIGEST_LENGTH[hash] < length; counter++) {
    const c = Buffer.alloc(4);
    c.writeUInt32BE(counter);
    out.push(createHash(hash).update(seed).update(c).digest());
  }
  return Buffer.concat(out).subarray(0, length);
}

/**
 * EMSA-PSS-VERIFY (RFC 8017 section 9.1.2), MGF1 with the same hash; the salt length read from the encoding, which
 * must be `saltLength` when one is given.
 */
function pssMatches(recovered: Buffer, emBits: number, hash: HashName, digest: Buffer, saltLength?: number): boolean {
  const emLen = Math.ceil(emBits / 8);
  const extra = recovered.length - emLen;
  if (extra < 0 || recovered.subarray(0, extra).some((b) => b !== 0)) return false;
  const em = recovered.subarray(extra);
  const hLen = DIGEST_LENGTH[hash];
  if (emLen < hLen + 2 || em[emLen - 1] !== 0xbc) return false;
  const maskedDb = em.subarray(0, emLen - hLen - 1);
  const h = em.subarray(emLen - hLen - 1, emLen - 1);
  const topBits = 8 * emLen - emBits;
  const topMask = 0xff >> topBits;
  if (((maskedDb[0] ?? 0) & ~topMask & 0xff) !== 0) return false;
  const mask = mgf1(hash, h, maskedDb.length);
  const db = Buffer.from(maskedDb.map((b, i) => b ^ (mask[i] ?? 0)));
  db[0] = (db[0] ?? 0) & topMask;
  const one = db.findIndex((b) => b !== 0);
  if (one < 0 || db[one] !== 1) return false;
  const salt = db.subarray(one + 1);
  if (saltLength !== undefined && salt.length !== saltLength) return false;
  const hPrime = createHash(hash).update(Buffer.alloc(8)).update(digest).update(salt).digest();
  return hPrime.equals(h);
}
