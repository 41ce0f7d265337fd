// Checks a signature over what the key store signed (a digest, ML-DSA's μ, SM2's e) rather than over a message: what
// KMS's Verify with MessageType DIGEST or EXTERNAL_MU asks. node:crypto verifies only messages it hashes itself, so
// RSA is checked on the recovered encoded message (PKCS#1 v1.5's DigestInfo, EMSA-PSS-VERIFY of RFC 8017 §9.1.2
// with a salt as long as the hash, as KMS signs), ECDSA with noble (prehash off), ML-DSA and SM2 as
// verify-signature.ts does.

import { createHash, createPublicKey, constants as cryptoConstants, type KeyObject, publicDecrypt } from 'node:crypto';
import { p256, p384, p521 } from '@noble/curves/nist.js';
import smCrypto from 'sm-crypto';
import { algorithmInfo, DIGEST_LENGTH, type HashName, keyInfo, type SigningAlgorithm } from './algorithms.js';
import { DIGEST_INFO_PREFIX } from './encoding.js';
import { mlDsaPublicKey, type PublicKeyOf, sm2PublicPoint } from './file-representative.js';
import { verifyMlDsa } from './ml-dsa-verify.js';

const NOBLE = { 'P-256': p256, 'P-384': p384, 'P-521': p521 } as const;

export function verifyRepresentative(
  key: PublicKeyOf,
  algorithm: SigningAlgorithm,
  representative: Buffer,
  signature: Buffer,
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
  if (alg.family !== info.family) return false;
  const publicKey = createPublicKey(key.publicKeyPem);
  if (info.family === 'ec') {
    const jwk = publicKey.export({ format: 'jwk' });
    const point = Buffer.concat([
      Buffer.from([4]),
      Buffer.from(jwk.x as string, 'base64url'),
      Buffer.from(jwk.y as string, 'base64url'),
    ]);
    try {
      return NOBLE[info.curve].verify(signature, representative, point, { prehash: false, lowS: false, format: 'der' });
    } catch {
      return false; // not DER, or a point noble refuses
    }
  }
  return alg.padding === 'pss'
    ? verifyPss(publicKey, alg.hash, representative, signature)
    : verifyPkcs1(publicKey, alg.hash, representative, signature);
}

function encodedMessage(publicKey: KeyObject, signature: Buffer, padding: number): Buffer | undefined {
  try {
    return publicDecrypt({ key: publicKey, padding }, signature);
  } catch {
    return undefined; // wrong length, or a value the padding refuses
  }
}

function verifyPkcs1(publicKey: KeyObject, hash: HashName, digest: Buffer, signature: Buffer): boolean {
  const recovered = encodedMessage(publicKey, signature, cryptoConstants.RSA_PKCS1_PADDING);
  return recovered?.equals(Buffer.concat([DIGEST_INFO_PREFIX[hash], digest])) ?? false;
}

function mgf1(hash: HashName, seed: Buffer, length: number): Buffer {
  const blocks: Buffer[] = [];
  for (let counter = 0; blocks.length * DIGEST_LENGTH[hash] < length; counter++) {
    const c = Buffer.alloc(4);
    c.writeUInt32BE(counter);
    blocks.push(createHash(hash).update(seed).update(c).digest());
  }
  return Buffer.concat(blocks).subarray(0, length);
}

/** EMSA-PSS-VERIFY (RFC 8017 §9.1.2), sLen = hLen. */
function verifyPss(publicKey: KeyObject, hash: HashName, mHash: Buffer, signature: Buffer): boolean {
  const raw = encodedMessage(publicKey, signature, cryptoConstants.RSA_NO_PADDING);
  const modBits = publicKey.asymmetricKeyDetails?.modulusLength;
  if (!raw || modBits === undefined || mHash.length !== DIGEST_LENGTH[hash]) return false;
  const emBits = modBits - 1;
  const emLen = Math.ceil(emBits / 8);
  // RSAVP1's output has k bytes; EM is its last emLen (the first is 0 when emBits is a multiple of 8).
  if (raw.length > emLen && raw[0] !== 0) return false;
  const em = raw.subarray(raw.length - emLen);
  const hLen = DIGEST_LENGTH[hash];
  const sLen = hLen;
  if (emLen < hLen + sLen + 2 || em[emLen - 1] !== 0xbc) return false;
  const maskedDb = em.subarray(0, emLen - hLen - 1);
  const h = em.subarray(emLen - hLen - 1, emLen - 1);
  const unusedBits = 8 * emLen - emBits;
  const topMask = 0xff >> unusedBits;
  if (((maskedDb[0] as number) & ~topMask & 0xff) !== 0) return false;
  const db = Buffer.from(maskedDb);
  const mask = mgf1(hash, h, db.length);
  for (let i = 0; i < db.length; i++) db[i] = (db[i] as number) ^ (mask[i] as number);
  db[0] = (db[0] as number) & topMask;
  const padLength = emLen - hLen - sLen - 2;
  for (let i = 0; i < padLength; i++) if (db[i] !== 0) return false;
  if (db[padLength] !== 0x01) return false;
  const salt = db.subarray(db.length - sLen);
  const hPrime = createHash(hash).update(Buffer.alloc(8)).update(mHash).update(salt).digest();
  return hPrime.equals(h);
}
