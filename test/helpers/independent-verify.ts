// What a client sends as `hash` for a message, and a check of the signature over the message itself with
// verifiers that owe nothing to the key store that signed: node:crypto (RSA, ECDSA), node:crypto on Node 24 or
// @noble/post-quantum on Node 20 over the MESSAGE (ML-DSA; the key stores sign μ),
// openssl with KMS's distinguishing ID (SM2; its default ID is empty), and @noble/curves' ed25519ph over the MESSAGE
// (Ed25519ph; node:crypto and OpenSSL 3.0 have pure Ed25519 only, which node:crypto checks).
import { execFileSync } from 'node:child_process';
import { constants, createHash, createPublicKey, verify } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ed25519ph } from '@noble/curves/ed25519.js';
import type { KeySpec, SigningAlgorithm } from '../../src/crypto/algorithms.js';
import { mlDsaMu, sm2Digest } from '../../src/crypto/message-representatives.js';
import { mlDsaLevel, verifyMlDsa } from '../../src/crypto/ml-dsa-verify.js';
import { parseMlDsaSpki, parseSm2Spki } from '../../src/crypto/spki.js';

export function spkiDer(pem: string): Buffer {
  return Buffer.from(pem.replace(/-----[^-]+-----|\s/g, ''), 'base64');
}

/** The hash name in an RSA or ECDSA algorithm name (…_SHA_256 -> sha256). */
function hashOf(algorithm: SigningAlgorithm): string {
  return `sha${algorithm.slice(-3)}`;
}

/** The `hash` field for `message` under `algorithm` (ML-DSA: μ from the public key; SM2: SM3(Z_A || M)). */
export function signingInput(pem: string, algorithm: SigningAlgorithm, message: Buffer): Buffer {
  if (algorithm === 'ML_DSA_SHAKE_256') {
    const parsed = parseMlDsaSpki(spkiDer(pem));
    if (!parsed) throw new Error('not an ML-DSA SPKI');
    return mlDsaMu(parsed.publicKey, [message]);
  }
  if (algorithm === 'SM2DSA') {
    const point = parseSm2Spki(spkiDer(pem));
    if (!point) throw new Error('not an SM2 SPKI');
    return sm2Digest(point, [message]);
  }
  return createHash(hashOf(algorithm)).update(message).digest();
}

/** True when `signature` is a valid `algorithm` signature of `message` under the public key `pem` (key `spec`). */
export function verifiesIndependently(
  spec: KeySpec,
  pem: string,
  algorithm: SigningAlgorithm,
  message: Buffer,
  signature: Buffer,
): boolean {
  const level = mlDsaLevel(spec);
  if (level) {
    const parsed = parseMlDsaSpki(spkiDer(pem));
    return verifyMlDsa(level, parsed?.publicKey ?? new Uint8Array(), { message }, signature);
  }
  if (spec === 'SM2') return opensslSm2Verify(pem, message, signature);
  const key = createPublicKey(pem);
  if (algorithm === 'ED25519_PH_SHA_512') {
    const publicKey = Buffer.from(key.export({ format: 'jwk' }).x ?? '', 'base64url');
    return ed25519ph.verify(signature, message, publicKey);
  }
  if (algorithm === 'ED25519_SHA_512') return verify(null, message, key, signature);
  if (algorithm.startsWith('RSASSA_PSS')) {
    const saltLength = Number(algorithm.slice(-3)) / 8;
    return verify(hashOf(algorithm), message, { key, padding: constants.RSA_PKCS1_PSS_PADDING, saltLength }, signature);
  }
  return verify(hashOf(algorithm), message, key, signature);
}

function opensslSm2Verify(pem: string, message: Buffer, signature: Buffer): boolean {
  const dir = mkdtempSync(join(tmpdir(), 'sb-sm2-'));
  try {
    writeFileSync(join(dir, 'pub.pem'), pem);
    writeFileSync(join(dir, 'msg'), message);
    writeFileSync(join(dir, 'sig'), signature);
    const out = execFileSync(
      'openssl',
      ['pkeyutl', '-verify', '-pubin', '-inkey', join(dir, 'pub.pem'), '-rawin', '-digest', 'sm3'].concat([
        '-pkeyopt',
        'distid:1234567812345678',
        '-in',
        join(dir, 'msg'),
        '-sigfile',
        join(dir, 'sig'),
      ]),
      { stdio: ['ignore', 'pipe', 'ignore'] },
    );
    return out.toString().includes('Signature Verified Successfully');
  } catch {
    return false;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A copy of `signature` with one bit flipped in the middle: a verifier that really checks refuses it. */
export function tampered(signature: Buffer): Buffer {
  const other = Buffer.from(signature);
  const at = other.length >> 1;
  other.writeUInt8((other.readUInt8(at) ^ 1) & 0xff, at);
  return other;
}
