// The KMS Verify of MessageType DIGEST: signatures made by node:crypto over the message, checked over its digest.
import { constants, createHash, generateKeyPairSync, sign } from 'node:crypto';
import { expect, test } from 'vitest';
import { verifyRepresentative } from '../../src/crypto/verify-representative.js';

test('verifyRepresentative checks RSA PKCS#1 and PSS (salt = hash length) and ECDSA signatures over a digest, and refuses a changed digest or the other padding', () => {
  for (const bits of [2048, 3072]) {
    const { publicKey, privateKey } = generateKeyPairSync('rsa', { modulusLength: bits });
    const pem = publicKey.export({ type: 'spki', format: 'pem' }) as string;
    const msg = Buffer.from('hello');
    for (const h of ['sha256', 'sha384', 'sha512'] as const) {
      const d = createHash(h).update(msg).digest();
      const n = h.slice(3);
      const s1 = sign(h, msg, privateKey);
      const s2 = sign(h, msg, { key: privateKey, padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: d.length });
      const spec = `RSA_${bits}` as never;
      expect(
        verifyRepresentative({ keySpec: spec, publicKeyPem: pem }, `RSASSA_PKCS1_V1_5_SHA_${n}` as never, d, s1),
      ).toBe(true);
      expect(verifyRepresentative({ keySpec: spec, publicKeyPem: pem }, `RSASSA_PSS_SHA_${n}` as never, d, s2)).toBe(
        true,
      );
      expect(verifyRepresentative({ keySpec: spec, publicKeyPem: pem }, `RSASSA_PSS_SHA_${n}` as never, d, s1)).toBe(
        false,
      );
      d[0] = (d[0] as number) ^ 1;
      expect(verifyRepresentative({ keySpec: spec, publicKeyPem: pem }, `RSASSA_PSS_SHA_${n}` as never, d, s2)).toBe(
        false,
      );
      expect(
        verifyRepresentative({ keySpec: spec, publicKeyPem: pem }, `RSASSA_PKCS1_V1_5_SHA_${n}` as never, d, s1),
      ).toBe(false);
    }
  }
  for (const [curve, spec] of [
    ['P-256', 'ECC_NIST_P256'],
    ['P-384', 'ECC_NIST_P384'],
    ['P-521', 'ECC_NIST_P521'],
  ]) {
    const { publicKey, privateKey } = generateKeyPairSync('ec', { namedCurve: curve! });
    const pem = publicKey.export({ type: 'spki', format: 'pem' }) as string;
    for (const h of ['sha256', 'sha384', 'sha512'] as const) {
      const msg = Buffer.from('hi');
      const d = createHash(h).update(msg).digest();
      const s = sign(h, msg, privateKey);
      expect(
        verifyRepresentative({ keySpec: spec as never, publicKeyPem: pem }, `ECDSA_SHA_${h.slice(3)}` as never, d, s),
      ).toBe(true);
      d[1] = (d[1] as number) ^ 1;
      expect(
        verifyRepresentative({ keySpec: spec as never, publicKeyPem: pem }, `ECDSA_SHA_${h.slice(3)}` as never, d, s),
      ).toBe(false);
    }
  }
});
