// verifyDigestSignature (Vault transit's verify) against signatures node:crypto makes over the message: PKCS#1 v1.5,
// PSS with any salt length (as Vault's verify accepts) or only the hash's (KMS's), ECDSA on each curve, and every kind of wrong signature.
// ecdsaDerToRaw against node's own r||s encoding.
import { createHash, constants as cryptoConstants, generateKeyPairSync, sign } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { KeySpec, SigningAlgorithm } from '../../src/crypto/algorithms.js';
import { ecdsaDerToRaw, ecdsaRawToDer } from '../../src/crypto/der.js';
import { verifyDigestSignature } from '../../src/crypto/verify-digest.js';

const message = Buffer.from('the artifact');
const digest = (hash: string) => createHash(hash).update(message).digest();

describe('verifyDigestSignature: RSA', () => {
  const { publicKey, privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const key = {
    keySpec: 'RSA_2048' as KeySpec,
    publicKeyPem: publicKey.export({ type: 'spki', format: 'pem' }) as string,
  };

  it('PKCS#1 v1.5 with each SHA-2, and not for another digest or hash', () => {
    for (const [hash, alg] of [
      ['sha256', 'RSASSA_PKCS1_V1_5_SHA_256'],
      ['sha384', 'RSASSA_PKCS1_V1_5_SHA_384'],
      ['sha512', 'RSASSA_PKCS1_V1_5_SHA_512'],
    ] as const) {
      const signature = sign(hash, message, privateKey);
      expect(verifyDigestSignature(key, alg, digest(hash), signature)).toBe(true);
      expect(verifyDigestSignature(key, alg, createHash(hash).update('other').digest(), signature)).toBe(false);
    }
    const signature = sign('sha256', message, privateKey);
    expect(verifyDigestSignature(key, 'RSASSA_PSS_SHA_256', digest('sha256'), signature)).toBe(false);
    expect(verifyDigestSignature(key, 'RSASSA_PKCS1_V1_5_SHA_256', digest('sha256'), signature.subarray(1))).toBe(
      false,
    );
  });

  it('PSS with salt 0, the hash length and the largest salt', () => {
    for (const saltLength of [0, 32, cryptoConstants.RSA_PSS_SALTLEN_MAX_SIGN]) {
      const signature = sign('sha256', message, {
        key: privateKey,
        padding: cryptoConstants.RSA_PKCS1_PSS_PADDING,
        saltLength,
      });
      expect(verifyDigestSignature(key, 'RSASSA_PSS_SHA_256', digest('sha256'), signature), String(saltLength)).toBe(
        true,
      );
      const tampered = Buffer.from(signature);
      tampered[10] = (tampered[10] ?? 0) ^ 1;
      expect(verifyDigestSignature(key, 'RSASSA_PSS_SHA_256', digest('sha256'), tampered)).toBe(false);
      expect(verifyDigestSignature(key, 'RSASSA_PKCS1_V1_5_SHA_256', digest('sha256'), signature)).toBe(false);
      // KMS's Verify takes only the salt KMS signs with: the hash's length.
      expect(
        verifyDigestSignature(key, 'RSASSA_PSS_SHA_256', digest('sha256'), signature, { pssSaltLength: 'hash' }),
        String(saltLength),
      ).toBe(saltLength === 32);
    }
  });
});

describe('verifyDigestSignature: ECDSA', () => {
  for (const [curve, spec, width] of [
    ['P-256', 'ECC_NIST_P256', 32],
    ['P-384', 'ECC_NIST_P384', 48],
    ['P-521', 'ECC_NIST_P521', 66],
  ] as const) {
    it(`${curve}: DER over SHA-256 and SHA-512, r||s round trip, wrong ones refused`, () => {
      const { publicKey, privateKey } = generateKeyPairSync('ec', { namedCurve: curve });
      const key = {
        keySpec: spec as KeySpec,
        publicKeyPem: publicKey.export({ type: 'spki', format: 'pem' }) as string,
      };
      for (const [hash, alg] of [
        ['sha256', 'ECDSA_SHA_256'],
        ['sha512', 'ECDSA_SHA_512'],
      ] as [string, SigningAlgorithm][]) {
        const der = sign(hash, message, privateKey);
        expect(verifyDigestSignature(key, alg, digest(hash), der)).toBe(true);
        expect(verifyDigestSignature(key, alg, digest(hash), Buffer.from('not der'))).toBe(false);
        expect(verifyDigestSignature(key, 'ECDSA_SHA_384', digest(hash), der)).toBe(false);
        const raw = sign(hash, message, { key: privateKey, dsaEncoding: 'ieee-p1363' });
        expect(raw.length).toBe(2 * width);
        const rawOfDer = ecdsaDerToRaw(der, width);
        expect(rawOfDer.length).toBe(2 * width);
        expect(verifyDigestSignature(key, alg, digest(hash), ecdsaRawToDer(rawOfDer))).toBe(true);
        expect(verifyDigestSignature(key, alg, digest(hash), ecdsaRawToDer(raw))).toBe(true);
      }
    });
  }
});
