// The pieces of key import that are plain computation: RSA-OAEP decoding of a raw RSA block (the SHA-256 paths
// SoftHSM 2.6.1 cannot do), and the public key of an EC key recovered from its signatures.
import {
  constants,
  createPublicKey,
  generateKeyPairSync,
  privateDecrypt,
  publicEncrypt,
  randomBytes,
} from 'node:crypto';
import { p256, p384, p521 } from '@noble/curves/nist.js';
import { describe, expect, it } from 'vitest';
import { recoverEcPublicKey } from '../../src/keys/import/ec-public-key.js';
import { OaepDecodeError, oaepDecode } from '../../src/keys/import/oaep.js';

describe('oaepDecode', () => {
  const { publicKey, privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const raw = (block: Buffer) => privateDecrypt({ key: privateKey, padding: constants.RSA_NO_PADDING }, block);

  it.each(['sha1', 'sha256'] as const)('decodes what Node encrypted with OAEP-%s', (hash) => {
    const message = randomBytes(32);
    const block = publicEncrypt({ key: publicKey, padding: constants.RSA_PKCS1_OAEP_PADDING, oaepHash: hash }, message);
    expect(oaepDecode(hash, raw(block)).equals(message)).toBe(true);
  });

  it('refuses the other hash, and an altered block, with one error', () => {
    const block = publicEncrypt(
      { key: publicKey, padding: constants.RSA_PKCS1_OAEP_PADDING, oaepHash: 'sha256' },
      randomBytes(32),
    );
    expect(() => oaepDecode('sha1', raw(block))).toThrow(OaepDecodeError);
    const altered = raw(block);
    altered[40] = (altered[40] as number) ^ 1;
    expect(() => oaepDecode('sha256', altered)).toThrow(OaepDecodeError);
  });
});

describe('recoverEcPublicKey', () => {
  it.each([
    ['P-256', p256],
    ['P-384', p384],
    ['P-521', p521],
  ] as const)('finds the public key of a %s key from two signatures', (curve, ec) => {
    const { secretKey, publicKey } = ec.keygen();
    const sign = (digest: Buffer) => Buffer.from(ec.sign(digest, secretKey, { prehash: false, format: 'compact' }));
    const pem = recoverEcPublicKey(curve, sign);
    const point = Buffer.from(ec.Point.fromBytes(publicKey).toBytes(false));
    const jwk = createPublicKey(pem).export({ format: 'jwk' });
    expect(Buffer.from(jwk.x as string, 'base64url').equals(point.subarray(1, 1 + (point.length - 1) / 2))).toBe(true);
    expect(Buffer.from(jwk.y as string, 'base64url').equals(point.subarray(1 + (point.length - 1) / 2))).toBe(true);
  });

  it('fails when the signatures are not of one key', () => {
    const a = p256.keygen().secretKey;
    const b = p256.keygen().secretKey;
    let n = 0;
    const sign = (digest: Buffer) =>
      Buffer.from(p256.sign(digest, n++ === 0 ? a : b, { prehash: false, format: 'compact' }));
    expect(() => recoverEcPublicKey('P-256', sign)).toThrow(/could not recover/);
  });
});
