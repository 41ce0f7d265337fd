// An Ed25519 key's request and certificate (src/cli/certs/x509-builder.ts): pure Ed25519 over the TBS bytes (RFC
// 8410), so the remote key is handed the TBS itself, never a digest; OpenSSL (a separate implementation) verifies.

import { spawnSync } from 'node:child_process';
import { generateKeyPairSync, sign, X509Certificate } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { certificateAlgorithm, createCsr, createSelfSigned, type RemoteKey } from '../../src/cli/certs/x509-builder.js';
import type { SigningAlgorithm } from '../../src/crypto/algorithms.js';
import { parseSubject, SubjectError } from '../../src/crypto/subject-name.js';
import { makeTempDir } from '../helpers/service.js';

const pair = generateKeyPairSync('ed25519');
const asked: { algorithm: SigningAlgorithm; input: Buffer }[] = [];
const key: RemoteKey = {
  keySpec: 'ECC_NIST_EDWARDS25519',
  spki: pair.publicKey.export({ type: 'spki', format: 'der' }),
  async sign(algorithm, input) {
    asked.push({ algorithm, input });
    return sign(null, input, pair.privateKey);
  },
};
const dir = makeTempDir('sb-x509-ed25519-');
const openssl = (args: string[]) => spawnSync('openssl', args, { encoding: 'utf8' });

describe('Ed25519 requests and certificates', () => {
  it('sign with ED25519_SHA_512 (the signature algorithm id-Ed25519); --hash and --pss are refused', () => {
    expect(certificateAlgorithm('ECC_NIST_EDWARDS25519')).toEqual({
      algorithm: 'ED25519_SHA_512',
      web: { name: 'Ed25519' },
    });
    expect(() => certificateAlgorithm('ECC_NIST_EDWARDS25519', { hash: 'sha512' })).toThrow(SubjectError);
    expect(() => certificateAlgorithm('ECC_NIST_EDWARDS25519', { pss: true })).toThrow(/pure Ed25519/);
  });

  it('a self-signed certificate: the key signs the TBS bytes themselves, and OpenSSL verifies the certificate', async () => {
    asked.length = 0;
    const cert = await createSelfSigned(key, { subject: parseSubject('/CN=Ed25519 signing'), days: 30 });
    const node = new X509Certificate(Buffer.from(cert.rawData));
    expect(asked).toHaveLength(1);
    expect(asked[0]?.algorithm).toBe('ED25519_SHA_512');
    // What was signed is the certificate's TBSCertificate, which is longer than any digest and sits inside it.
    expect(asked[0]?.input.length).toBeGreaterThan(64);
    expect(Buffer.from(cert.rawData).includes(asked[0]?.input as Buffer)).toBe(true);
    expect(node.verify(pair.publicKey)).toBe(true);
    const file = join(dir, 'cert.pem');
    writeFileSync(file, cert.toString('pem'));
    expect(openssl(['x509', '-in', file, '-noout', '-text']).stdout).toContain('Signature Algorithm: ED25519');
    const verified = openssl(['verify', '-partial_chain', '-CAfile', file, file]);
    expect(verified.stdout + verified.stderr).toContain(': OK');
  });

  it('a PKCS#10 request that openssl req -verify accepts', async () => {
    const csr = await createCsr(key, { subject: parseSubject('/CN=Ed25519 request') });
    const file = join(dir, 'req.pem');
    writeFileSync(file, csr.toString('pem'));
    const verified = openssl(['req', '-in', file, '-verify', '-noout']);
    expect(verified.stdout + verified.stderr).toMatch(/verify OK/);
  });
});
