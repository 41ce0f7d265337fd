import { generateKeyPairSync, sign as nodeSign, verify } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { algorithmForPkcs11, algorithmsForKey, checkSigningRequest, keyInfo } from '../../src/crypto/algorithms.js';
import { ecdsaRawToDer } from '../../src/crypto/der.js';
import { decodeBase64Field } from '../../src/crypto/encoding.js';
import { ApiError } from '../../src/errors.js';

describe('decodeBase64Field', () => {
  const bytes = Buffer.from([0xfb, 0xff, 0xbf, 0x00, 0x01]);
  it.each([
    bytes.toString('base64'),
    bytes.toString('base64url'),
    bytes.toString('base64').replace(/=+$/, ''),
  ])('decodes %s', (text) => expect(decodeBase64Field('hash', text)).toEqual(bytes));
  it.each(['A', 'AB=C', 'AAA=A', '@@@@', '', 'AAAAA=='])('rejects %j', (text) => {
    expect(() => decodeBase64Field('hash', text)).toThrow(ApiError);
  });
});

describe('ecdsaRawToDer', () => {
  it.each([
    ['P-256', 32],
    ['P-384', 48],
    ['P-521', 66],
  ])('converts fixed-width r||s on %s, including short r and s, into DER that verifies', (curve, size) => {
    const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: curve });
    // Sign until r or s has leading zero bytes (about 1 in 128 tries), so padding handling is exercised.
    for (let i = 0; i < 400; i++) {
      const msg = Buffer.from(`m${i}`);
      const raw = nodeSign('sha256', msg, { key: privateKey, dsaEncoding: 'ieee-p1363' });
      expect(raw.length).toBe(2 * size);
      const der = ecdsaRawToDer(raw);
      expect(verify('sha256', msg, publicKey, der)).toBe(true);
      if (raw[0] === 0 || raw[size] === 0) return;
    }
  });
  it('rejects an odd length', () => expect(() => ecdsaRawToDer(Buffer.alloc(3))).toThrow());
});

describe('algorithm tables', () => {
  it('RSA keys take every RSA scheme, EC keys ECDSA with every SHA-2 digest (beyond KMS: any curve)', () => {
    expect(algorithmsForKey('RSA_2048')).toHaveLength(6);
    for (const spec of ['ECC_NIST_P256', 'ECC_NIST_P384', 'ECC_NIST_P521'] as const) {
      expect(algorithmsForKey(spec)).toEqual(['ECDSA_SHA_256', 'ECDSA_SHA_384', 'ECDSA_SHA_512']);
    }
  });
  it('pkcs11_sign on an EC key names the digest really given, by its length', () => {
    expect(algorithmForPkcs11('ECC_NIST_P384', Buffer.alloc(32), false)).toBe('ECDSA_SHA_256');
    expect(algorithmForPkcs11('ECC_NIST_P256', Buffer.alloc(64), false)).toBe('ECDSA_SHA_512');
    expect(algorithmForPkcs11('ECC_NIST_P521', Buffer.alloc(48), false)).toBe('ECDSA_SHA_384');
    expect(() => algorithmForPkcs11('ECC_NIST_P384', Buffer.alloc(20), false)).toThrow(/an EC key, got 20 bytes/);
    expect(() => algorithmForPkcs11('ECC_NIST_P384', Buffer.alloc(48), true)).toThrow(/pss_padding/);
  });
  it('rejects unknown specs, mismatched digests and wrong-length mu or SM3 inputs', () => {
    expect(() => keyInfo('ML_DSA_99' as never)).toThrow(/not a key spec/);
    expect(() => checkSigningRequest('ML_DSA_65', 'ML_DSA_SHAKE_256', Buffer.alloc(32))).toThrow(/64-byte ML-DSA/);
    expect(() => checkSigningRequest('SM2', 'SM2DSA', Buffer.alloc(64))).toThrow(/32-byte SM3/);
    expect(() => checkSigningRequest('SM2', 'ECDSA_SHA_256', Buffer.alloc(32))).toThrow(/allowed: SM2DSA/);
    expect(algorithmForPkcs11('ML_DSA_44', Buffer.alloc(64), false)).toBe('ML_DSA_SHAKE_256');
    expect(() => checkSigningRequest('RSA_2048', 'RSASSA_PSS_SHA_384', Buffer.alloc(32))).toThrow(/48-byte/);
    expect(() => algorithmForPkcs11('RSA_4096', Buffer.alloc(28), false)).toThrow(/32, 48 or 64/);
    expect(algorithmForPkcs11('RSA_4096', Buffer.alloc(48), true)).toBe('RSASSA_PSS_SHA_384');
  });
});
