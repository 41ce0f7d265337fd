import { execFileSync } from 'node:child_process';
import { createHash, generateKeyPairSync, verify } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DIGEST_LENGTH, type HashName, type NamedCurve } from '../../src/crypto/algorithms.js';
import { ecdsaInputForCurve } from '../../src/crypto/ecdsa-digest.js';

const dir = mkdtempSync(join(tmpdir(), 'sb-ecdsa-digest-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const CURVES: NamedCurve[] = ['P-256', 'P-384', 'P-521', 'secp256k1'];
const HASHES: HashName[] = ['sha256', 'sha384', 'sha512'];
const keys = new Map(
  CURVES.map((curve) => {
    const pair = generateKeyPairSync('ec', { namedCurve: curve });
    const file = join(dir, `${curve}.pem`);
    writeFileSync(file, pair.privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
    return [curve, { file, publicKey: pair.publicKey }] as const;
  }),
);

/** Raw ECDSA over exactly these bytes (no hashing), as a key store's CKM_ECDSA or KMS's DIGEST mode does; DER. */
function signRaw(curve: NamedCurve, input: Buffer): Buffer {
  const file = join(dir, 'input.bin');
  writeFileSync(file, input);
  const key = keys.get(curve)?.file as string;
  return execFileSync('openssl', ['pkeyutl', '-sign', '-inkey', key, '-in', file]);
}

describe('ecdsaInputForCurve: the curve-length input for any SHA-2 digest', () => {
  const cases = CURVES.flatMap((curve) => HASHES.map((hash) => [curve, hash] as const));
  it.each(
    cases,
  )('%s with %s: the signature over the fitted input verifies against the original digest', (curve, hash) => {
    const message = Buffer.from(`artifact for ${curve} ${hash}`);
    const digest = createHash(hash).update(message).digest();
    const input = ecdsaInputForCurve(curve, digest);
    const curveHash = ({ 'P-256': 'sha256', 'P-384': 'sha384', 'P-521': 'sha512', secp256k1: 'sha256' } as const)[
      curve
    ];
    expect(input.length).toBe(DIGEST_LENGTH[curveHash]);
    const publicKey = keys.get(curve)?.publicKey;
    if (!publicKey) throw new Error('no key');
    const signature = signRaw(curve, input);
    expect(verify(hash, message, publicKey, signature)).toBe(true);
    expect(verify(hash, Buffer.from('another message'), publicKey, signature)).toBe(false);
  });

  it('a naive fit (zeros on the right) would not verify: the rule matters', () => {
    const message = Buffer.from('naive');
    const digest = createHash('sha256').update(message).digest();
    const publicKey = keys.get('P-384')?.publicKey;
    if (!publicKey) throw new Error('no key');
    const naive = signRaw('P-384', Buffer.concat([digest, Buffer.alloc(16)]));
    expect(verify('sha256', message, publicKey, naive)).toBe(false);
    const right = signRaw('P-384', ecdsaInputForCurve('P-384', digest));
    expect(verify('sha256', message, publicKey, right)).toBe(true);
  });
});
