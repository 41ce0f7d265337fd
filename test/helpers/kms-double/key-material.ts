// The KMS double's private keys and signatures, one kind per key spec. It owes nothing to the code under test (no
// imports from src/): RSA through node:crypto with the padding done here, ECDSA over a digest as given by
// @noble/curves (Node has no "sign this digest" for EC), ML-DSA over an external μ by @noble/post-quantum, SM2
// over e = SM3(Z_A || M) by sm-crypto (KMS's distinguishing ID 1234567812345678). One exception: Ed25519ph over a
// given SHA-512 digest (KMS's ED25519_PH_SHA_512 with MessageType DIGEST), which no library offers, comes from
// src/crypto/ed25519ph.ts, itself checked against RFC 8032's test vector (test/unit/ed25519ph.test.ts); the tests
// verify it independently with noble's ed25519ph over the message.
import {
  createHash,
  createPrivateKey,
  createPublicKey,
  generateKeyPair,
  type KeyObject,
  privateEncrypt,
  publicDecrypt,
  constants as RSA,
  randomBytes,
} from 'node:crypto';
import { promisify } from 'node:util';
import { ed25519 } from '@noble/curves/ed25519.js';
import { p256, p384, p521 } from '@noble/curves/nist.js';
import { secp256k1 } from '@noble/curves/secp256k1.js';
import { ml_dsa44, ml_dsa65, ml_dsa87 } from '@noble/post-quantum/ml-dsa.js';
import smCrypto from 'sm-crypto';
import { signEd25519phDigest, verifyEd25519phDigest } from '../../../src/crypto/ed25519ph.js';

export const KMS_KEY_SPECS = [
  'RSA_2048',
  'RSA_3072',
  'RSA_4096',
  'ECC_NIST_P256',
  'ECC_NIST_P384',
  'ECC_NIST_P521',
  'ML_DSA_44',
  'ML_DSA_65',
  'ML_DSA_87',
  'SM2',
  'ECC_NIST_EDWARDS25519',
  'ECC_SECG_P256K1',
] as const;
export type KmsKeySpec = (typeof KMS_KEY_SPECS)[number];

/** KMS's SigningAlgorithms per key spec (KeyMetadata.SigningAlgorithms): an EC key signs only with its curve's hash. */
export function signingAlgorithms(spec: KmsKeySpec): string[] {
  if (spec.startsWith('RSA')) {
    return ['SHA_256', 'SHA_384', 'SHA_512'].flatMap((h) => [`RSASSA_PSS_${h}`, `RSASSA_PKCS1_V1_5_${h}`]);
  }
  if (spec === 'ECC_NIST_P256') return ['ECDSA_SHA_256'];
  if (spec === 'ECC_NIST_P384') return ['ECDSA_SHA_384'];
  if (spec === 'ECC_NIST_P521') return ['ECDSA_SHA_512'];
  if (spec === 'SM2') return ['SM2DSA'];
  if (spec === 'ECC_SECG_P256K1') return ['ECDSA_SHA_256'];
  if (spec === 'ECC_NIST_EDWARDS25519') return ['ED25519_SHA_512', 'ED25519_PH_SHA_512'];
  return ['ML_DSA_SHAKE_256'];
}

/** Length of the DIGEST (or EXTERNAL_MU) each signing algorithm takes: "must match the length of hashed messages". */
export function digestLength(algorithm: string): number {
  if (algorithm === 'ML_DSA_SHAKE_256') return 64;
  if (algorithm === 'SM2DSA') return 32;
  return Number(algorithm.slice(-3)) / 8;
}

/** A private key of the double; `spki` is what GetPublicKey answers. */
export type Material =
  | { kind: 'rsa'; key: KeyObject; spki: Buffer }
  | { kind: 'ec'; curve: 'P-256' | 'P-384' | 'P-521' | 'secp256k1'; secret: Uint8Array; spki: Buffer }
  | { kind: 'ed25519'; seed: Uint8Array; spki: Buffer }
  | { kind: 'ml-dsa'; level: 44 | 65 | 87; secret: Uint8Array; spki: Buffer }
  | { kind: 'sm2'; dHex: string; spki: Buffer };

const ML_DSA = { 44: ml_dsa44, 65: ml_dsa65, 87: ml_dsa87 } as const;
const NOBLE_CURVE = { 'P-256': p256, 'P-384': p384, 'P-521': p521, secp256k1 } as const;
const EC_SPEC_CURVE = {
  ECC_NIST_P256: 'P-256',
  ECC_NIST_P384: 'P-384',
  ECC_NIST_P521: 'P-521',
  ECC_SECG_P256K1: 'secp256k1',
} as const;
const EC_FIELD_BYTES = { 'P-256': 32, 'P-384': 48, 'P-521': 66, secp256k1: 32 } as const;
/** id-ml-dsa-44/65/87 (2.16.840.1.101.3.4.3.17-19) and the SM2 curve (1.2.156.10197.1.301), DER. */
const ML_DSA_OID = { 44: '0609608648016503040311', 65: '0609608648016503040312', 87: '0609608648016503040313' };
const SM2_ALGORITHM = '301306072a8648ce3d020106082a811ccf5501822d';
const SM2_CURVE_OID = '06082a811ccf5501822d';

export async function generate(spec: KmsKeySpec): Promise<Material> {
  if (spec.startsWith('RSA')) {
    // Off the event loop: an RSA-4096 key takes seconds, and the SDK's timers keep running meanwhile.
    const { privateKey } = await promisify(generateKeyPair)('rsa', { modulusLength: Number(spec.slice(4)) });
    return rsaMaterial(privateKey);
  }
  if (spec in EC_SPEC_CURVE) {
    const curve = EC_SPEC_CURVE[spec as keyof typeof EC_SPEC_CURVE];
    return ecMaterial(curve, NOBLE_CURVE[curve].utils.randomSecretKey());
  }
  if (spec === 'SM2') return sm2Material(smCrypto.sm2.generateKeyPairHex().privateKey.padStart(64, '0'));
  if (spec === 'ECC_NIST_EDWARDS25519') return ed25519Material(randomBytes(32));
  const level = Number(spec.slice(-2)) as 44 | 65 | 87;
  return mlDsaMaterial(level, ML_DSA[level].keygen(randomBytes(32)).secretKey);
}

function rsaMaterial(key: KeyObject): Material {
  return { kind: 'rsa', key, spki: createPublicKey(key).export({ type: 'spki', format: 'der' }) };
}

function ed25519Material(seed: Uint8Array): Material {
  const x = Buffer.from(ed25519.getPublicKey(seed)).toString('base64url');
  const spki = createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x }, format: 'jwk' }).export({
    type: 'spki',
    format: 'der',
  });
  return { kind: 'ed25519', seed, spki };
}

function ecMaterial(curve: keyof typeof NOBLE_CURVE, secret: Uint8Array): Material {
  const point = NOBLE_CURVE[curve].getPublicKey(secret, false);
  const size = EC_FIELD_BYTES[curve];
  const jwk = {
    kty: 'EC',
    crv: curve,
    x: Buffer.from(point.subarray(1, 1 + size)).toString('base64url'),
    y: Buffer.from(point.subarray(1 + size)).toString('base64url'),
  };
  const spki = createPublicKey({ key: jwk, format: 'jwk' }).export({ type: 'spki', format: 'der' });
  return { kind: 'ec', curve, secret, spki };
}

function mlDsaMaterial(level: 44 | 65 | 87, secret: Uint8Array): Material {
  const pk = ML_DSA[level].getPublicKey(secret);
  return { kind: 'ml-dsa', level, secret, spki: spki(Buffer.from(`300b${ML_DSA_OID[level]}`, 'hex'), pk) };
}

function sm2Material(dHex: string): Material {
  const getPub = (smCrypto.sm2 as unknown as { getPublicKeyFromPrivateKey(d: string): string })
    .getPublicKeyFromPrivateKey;
  const point = Buffer.from(getPub(dHex), 'hex');
  return { kind: 'sm2', dHex, spki: spki(Buffer.from(SM2_ALGORITHM, 'hex'), point) };
}

/**
 * The material of an import: the private key as PKCS#8 DER ("For asymmetric key pairs, encrypt and import only the
 * private key"), checked against the key spec. Undefined when it is not a key of that spec.
 */
export function fromPkcs8(spec: KmsKeySpec, der: Buffer): Material | undefined {
  try {
    if (spec.startsWith('RSA')) {
      const key = createPrivateKey({ key: der, format: 'der', type: 'pkcs8' });
      const bits = key.asymmetricKeyDetails?.modulusLength;
      return key.asymmetricKeyType === 'rsa' && bits === Number(spec.slice(4)) ? rsaMaterial(key) : undefined;
    }
    if (spec in EC_SPEC_CURVE) {
      const curve = EC_SPEC_CURVE[spec as keyof typeof EC_SPEC_CURVE];
      const jwk = createPrivateKey({ key: der, format: 'der', type: 'pkcs8' }).export({ format: 'jwk' });
      if (jwk.crv !== curve || !jwk.d) return undefined;
      return ecMaterial(curve, Buffer.from(jwk.d, 'base64url'));
    }
    if (spec === 'ECC_NIST_EDWARDS25519') {
      const jwk = createPrivateKey({ key: der, format: 'der', type: 'pkcs8' }).export({ format: 'jwk' });
      return jwk.crv === 'Ed25519' && jwk.d ? ed25519Material(Buffer.from(jwk.d, 'base64url')) : undefined;
    }
    if (spec === 'SM2') {
      // ECPrivateKey inside PKCS#8 on the SM2 curve: the 32-byte d follows "02 01 01 04 20".
      if (!der.toString('hex').includes(SM2_CURVE_OID)) return undefined;
      const at = der.indexOf(Buffer.from('0201010420', 'hex'));
      return at < 0 ? undefined : sm2Material(der.subarray(at + 5, at + 37).toString('hex'));
    }
    // ML-DSA (RFC 9881): privateKey holds seed [0] (80 20 <32 bytes>), or a SEQUENCE {seed, expandedKey}.
    const level = Number(spec.slice(-2)) as 44 | 65 | 87;
    if (!der.toString('hex').includes(ML_DSA_OID[level])) return undefined;
    const seedAt = der.indexOf(Buffer.from('8020', 'hex'));
    const seed = seedAt >= 0 ? der.subarray(seedAt + 2, seedAt + 34) : undefined;
    if (!seed || seed.length !== 32) return undefined;
    return mlDsaMaterial(level, ML_DSA[level].keygen(seed).secretKey);
  } catch {
    return undefined;
  }
}

/** DigestInfo prefixes (RFC 8017 §9.2 note 1) for EMSA-PKCS1-v1_5 over a given digest. */
const DIGEST_INFO: Record<number, string> = {
  32: '3031300d060960864801650304020105000420',
  48: '3041300d060960864801650304020205000430',
  64: '3051300d060960864801650304020305000440',
};
const HASH_OF_LENGTH: Record<number, string> = { 32: 'sha256', 48: 'sha384', 64: 'sha512' };

/** Signs `message` (a digest, μ or e, already length-checked) as KMS does with MessageType DIGEST / EXTERNAL_MU. */
export function sign(material: Material, algorithm: string, message: Buffer): Buffer {
  if (material.kind === 'rsa') {
    if (algorithm.startsWith('RSASSA_PKCS1')) {
      const block = Buffer.concat([Buffer.from(DIGEST_INFO[message.length] as string, 'hex'), message]);
      return privateEncrypt({ key: material.key, padding: RSA.RSA_PKCS1_PADDING }, block);
    }
    // "RSASSA-PSS ... along with a 256-bit salt": the salt is as long as the digest, MGF1 with the same hash.
    const bits = material.key.asymmetricKeyDetails?.modulusLength as number;
    const encoded = emsaPssEncode(message, bits - 1, randomBytes(message.length));
    return privateEncrypt({ key: material.key, padding: RSA.RSA_NO_PADDING }, encoded);
  }
  if (material.kind === 'ec') {
    const signature = NOBLE_CURVE[material.curve].sign(message, material.secret, { prehash: false, format: 'der' });
    return Buffer.from(signature);
  }
  if (material.kind === 'ed25519') {
    // DIGEST: Ed25519ph of the message whose SHA-512 this is (KMS applies no hash of its own, only the prehash step).
    return signEd25519phDigest(material.seed, message);
  }
  if (material.kind === 'ml-dsa') {
    return Buffer.from(ML_DSA[material.level].internal.sign(message, material.secret, { externalMu: true }));
  }
  const der = smCrypto.sm2.doSignature(Array.from(message), material.dHex, { hash: false, der: true });
  return Buffer.from(der, 'hex');
}

/** Verify as KMS does it: the same input kinds as sign. */
export function verify(material: Material, algorithm: string, message: Buffer, signature: Buffer): boolean {
  try {
    if (material.kind === 'rsa') {
      const recovered = publicDecrypt({ key: createPublicKey(material.key), padding: RSA.RSA_NO_PADDING }, signature);
      if (algorithm.startsWith('RSASSA_PKCS1')) {
        const block = Buffer.concat([Buffer.from(DIGEST_INFO[message.length] as string, 'hex'), message]);
        const padded = Buffer.concat([
          Buffer.from([0, 1]),
          Buffer.alloc(recovered.length - block.length - 3, 0xff),
          Buffer.from([0]),
          block,
        ]);
        return padded.equals(recovered);
      }
      const bits = material.key.asymmetricKeyDetails?.modulusLength as number;
      return emsaPssVerify(message, recovered, bits - 1);
    }
    if (material.kind === 'ec') {
      const point = NOBLE_CURVE[material.curve].getPublicKey(material.secret, false);
      return NOBLE_CURVE[material.curve].verify(signature, message, point, { prehash: false, format: 'der' });
    }
    if (material.kind === 'ed25519') {
      return verifyEd25519phDigest(ed25519.getPublicKey(material.seed), message, signature);
    }
    if (material.kind === 'ml-dsa') {
      const pk = ML_DSA[material.level].getPublicKey(material.secret);
      return ML_DSA[material.level].internal.verify(signature, message, pk, { externalMu: true });
    }
    const pub = (
      smCrypto.sm2 as unknown as { getPublicKeyFromPrivateKey(d: string): string }
    ).getPublicKeyFromPrivateKey(material.dHex);
    return smCrypto.sm2.doVerifySignature(Array.from(message), signature.toString('hex'), pub, {
      hash: false,
      der: true,
    });
  } catch {
    return false;
  }
}

function mgf1(seed: Buffer, length: number, hash: string): Buffer {
  const out: Buffer[] = [];
  for (let counter = 0; out.length * seed.length < length; counter++) {
    const c = Buffer.alloc(4);
    c.writeUInt32BE(counter);
    out.push(createHash(hash).update(seed).update(c).digest());
  }
  return Buffer.concat(out).subarray(0, length);
}

/** RFC 8017 §9.1.1 over an mHash the caller computed. */
function emsaPssEncode(mHash: Buffer, emBits: number, salt: Buffer): Buffer {
  const hash = HASH_OF_LENGTH[mHash.length] as string;
  const emLen = Math.ceil(emBits / 8);
  const h = createHash(hash)
    .update(Buffer.concat([Buffer.alloc(8), mHash, salt]))
    .digest();
  const db = Buffer.concat([Buffer.alloc(emLen - salt.length - h.length - 2), Buffer.from([1]), salt]);
  const masked = mgf1(h, db.length, hash).map((m, i) => m ^ (db[i] as number));
  masked[0] = (masked[0] as number) & (0xff >> (8 * emLen - emBits));
  const em = Buffer.concat([Buffer.from(masked), h, Buffer.from([0xbc])]);
  return emLen * 8 === emBits + 1 ? em : Buffer.concat([Buffer.alloc(1), em]);
}

/** RFC 8017 §9.1.2 with the salt length fixed to the digest length, as KMS verifies. */
function emsaPssVerify(mHash: Buffer, recovered: Buffer, emBits: number): boolean {
  const hash = HASH_OF_LENGTH[mHash.length] as string;
  const emLen = Math.ceil(emBits / 8);
  const em = recovered.subarray(recovered.length - emLen);
  if (em[em.length - 1] !== 0xbc) return false;
  const h = em.subarray(emLen - mHash.length - 1, emLen - 1);
  const db = Buffer.from(mgf1(h, emLen - mHash.length - 1, hash).map((m, i) => m ^ (em[i] as number)));
  db[0] = (db[0] as number) & (0xff >> (8 * emLen - emBits));
  const psLen = emLen - 2 * mHash.length - 2;
  if (!db.subarray(0, psLen).equals(Buffer.alloc(psLen)) || db[psLen] !== 1) return false;
  const salt = db.subarray(psLen + 1);
  const expected = createHash(hash)
    .update(Buffer.concat([Buffer.alloc(8), mHash, salt]))
    .digest();
  return expected.equals(h);
}

function derLength(len: number): Buffer {
  if (len < 0x80) return Buffer.from([len]);
  if (len < 0x100) return Buffer.from([0x81, len]);
  return Buffer.from([0x82, len >> 8, len & 0xff]);
}

function tlv(tag: number, body: Buffer): Buffer {
  return Buffer.concat([Buffer.from([tag]), derLength(body.length), body]);
}

/** SubjectPublicKeyInfo { algorithm, BIT STRING pk } as KMS returns it for ML-DSA and SM2. */
function spki(algorithm: Buffer, publicKey: Uint8Array): Buffer {
  return tlv(0x30, Buffer.concat([algorithm, tlv(0x03, Buffer.concat([Buffer.from([0]), publicKey]))]));
}
