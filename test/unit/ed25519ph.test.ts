// Ed25519ph over a caller's SHA-512 digest (src/crypto/ed25519ph.ts) is RFC 8032's Ed25519ph of the message: the
// RFC's test vector, and noble's ed25519ph (which hashes the message itself) agreeing both ways.
import { createHash, randomBytes } from 'node:crypto';
import { ed25519, ed25519ph } from '@noble/curves/ed25519.js';
import { describe, expect, it } from 'vitest';
import { ed25519PublicKey, signEd25519phDigest, verifyEd25519phDigest } from '../../src/crypto/ed25519ph.js';

const sha512 = (data: Buffer) => createHash('sha512').update(data).digest();

describe('Ed25519ph over a SHA-512 digest', () => {
  it("signs RFC 8032 §7.3's test vector (message 'abc')", () => {
    const seed = Buffer.from('833fe62409237b9d62ec77587520911e9a759cec1d19755b7da901b96dca3d42', 'hex');
    expect(ed25519PublicKey(seed).toString('hex')).toBe(
      'ec172b93ad5e563bf4932c70e1245034c35467ef2efd4d64ebf819683467e2bf',
    );
    expect(signEd25519phDigest(seed, sha512(Buffer.from('abc'))).toString('hex')).toBe(
      '98a70222f0b8121aa9d30f813d683f809e462b469c7ff87639499bb94e6dae41' +
        '31f85042463c2a355a2003d062adf5aaa10b8c61e636062aaad11c2a26083406',
    );
  });

  it("agrees with noble's ed25519ph over the message, both ways", () => {
    const seed = randomBytes(32);
    const message = randomBytes(1000);
    const signature = signEd25519phDigest(seed, sha512(message));
    expect(ed25519ph.verify(signature, message, ed25519PublicKey(seed))).toBe(true);
    expect(Buffer.from(ed25519ph.sign(message, seed)).equals(signature)).toBe(true);
    expect(verifyEd25519phDigest(ed25519PublicKey(seed), sha512(message), signature)).toBe(true);
  });

  it('is not pure Ed25519: neither verifies as the other', () => {
    const seed = randomBytes(32);
    const message = Buffer.from('artifact');
    const ph = signEd25519phDigest(seed, sha512(message));
    expect(ed25519.verify(ph, message, ed25519PublicKey(seed))).toBe(false);
    const pure = Buffer.from(ed25519.sign(message, seed));
    expect(verifyEd25519phDigest(ed25519PublicKey(seed), sha512(message), pure)).toBe(false);
  });

  it('refuses a digest that is not 64 bytes, and rejects a wrong digest or key', () => {
    const seed = randomBytes(32);
    expect(() => signEd25519phDigest(seed, randomBytes(32))).toThrow(/64-byte/);
    const digest = sha512(Buffer.from('x'));
    const signature = signEd25519phDigest(seed, digest);
    expect(verifyEd25519phDigest(ed25519PublicKey(seed), sha512(Buffer.from('y')), signature)).toBe(false);
    expect(verifyEd25519phDigest(ed25519PublicKey(randomBytes(32)), digest, signature)).toBe(false);
    expect(verifyEd25519phDigest(ed25519PublicKey(seed), digest.subarray(0, 32), signature)).toBe(false);
  });
});
