import { execFileSync } from 'node:child_process';
import { createHash, createPublicKey, verify } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { algorithmInfo, type SigningAlgorithm } from '../../src/crypto/algorithms.js';

/** The digest an algorithm signs (Ed25519ph: SHA-512). For ML-DSA a 64-byte SHAKE256 stands in for μ (it needs the key: mlDsaMu). */
export function digestOf(algorithm: SigningAlgorithm, message: Buffer): Buffer {
  const { hash } = algorithmInfo(algorithm);
  if (hash === 'mu') return createHash('shake256', { outputLength: 64 }).update(message).digest();
  // Pure Ed25519 signs the message, not a digest; its SHA-512 stands in where a test sends it as a `hash` anyway.
  if (hash === 'message') return createHash('sha512').update(message).digest();
  return createHash(hash).update(message).digest();
}

/** Verifies a service signature over `message` with node:crypto (PSS salt = digest length, ECDSA DER). */
export function verifyWithNode(
  algorithm: SigningAlgorithm,
  publicKeyPem: string,
  message: Buffer,
  sig: Buffer,
): boolean {
  const info = algorithmInfo(algorithm);
  const key = createPublicKey(publicKeyPem);
  if (info.padding === 'pss') {
    const saltLength = { sha256: 32, sha384: 48, sha512: 64 }[info.hash];
    return verify(info.hash, message, { key, padding: 6 /* RSA_PKCS1_PSS_PADDING */, saltLength }, sig);
  }
  return verify(info.hash, message, key, sig);
}

/** Verifies with the `openssl` command line, as a user would; returns openssl's verdict line. */
export function verifyWithOpenssl(
  algorithm: SigningAlgorithm,
  publicKeyPem: string,
  message: Buffer,
  sig: Buffer,
): string {
  const info = algorithmInfo(algorithm);
  const dir = mkdtempSync(join(tmpdir(), 'sb-openssl-'));
  try {
    writeFileSync(join(dir, 'pub.pem'), publicKeyPem);
    writeFileSync(join(dir, 'msg'), message);
    writeFileSync(join(dir, 'sig'), sig);
    const args = ['dgst', `-${info.hash}`, '-verify', join(dir, 'pub.pem'), '-signature', join(dir, 'sig')];
    if (info.padding === 'pss') args.push('-sigopt', 'rsa_padding_mode:pss', '-sigopt', 'rsa_pss_saltlen:digest');
    args.push(join(dir, 'msg'));
    return execFileSync('openssl', args, { encoding: 'utf8' }).trim();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * `openssl req -x509` with a new local P-256 key: writes `keyFile` and `certFile` (paths, or names within `cwd`).
 * `extensions`: -addext values, e.g. `subjectAltName=DNS:localhost`.
 */
export function selfSignedP256(
  keyFile: string,
  certFile: string,
  subject: string,
  options: { days?: number; extensions?: string[]; cwd?: string } = {},
): void {
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:P-256',
      '-nodes',
      '-keyout',
      keyFile,
      '-out',
      certFile,
      '-days',
      String(options.days ?? 2),
      '-subj',
      subject,
      ...(options.extensions ?? []).flatMap((e) => ['-addext', e]),
    ],
    { stdio: 'pipe', ...(options.cwd && { cwd: options.cwd }) },
  );
}
