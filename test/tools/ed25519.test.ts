// Ed25519 through the module with the real tools, against the real daemon and service (an ECC_NIST_EDWARDS25519
// tenant, its key in the software key store): the command blocks of docs/clients.md's "Ed25519 through PKCS#11",
// each signature checked by OpenSSL (pure Ed25519, `pkeyutl -rawin`, `verify`, `req -verify`) with the public key
// the service returned, and again here with node:crypto. Debian 12's ssh-keygen, which cannot use such a key, is
// held to what the docs say it prints.
import { spawnSync } from 'node:child_process';
import { createPublicKey, verify, X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import { runSnippet, runSnippetOk } from '../helpers/doc-snippets.js';
import { type Stack, startStack, tenantFor } from '../module/harness.js';

const SPEC = 'ECC_NIST_EDWARDS25519';
let stack: Stack;

beforeAll(async () => {
  stack = await startStack([SPEC]);
});
afterAll(async () => {
  await stack?.close();
});

/** A folder with file.txt and, as public.pem, the public key the service returned. */
function workDir(name: string) {
  const dir = mkdtempSync(join(stack.dir, `ed25519-${name}-`));
  writeFileSync(join(dir, 'file.txt'), `signed with Ed25519 through signbridge, ${name}, ${Date.now()}\n`);
  writeFileSync(join(dir, 'public.pem'), stack.publicKeys.get(tenantFor(SPEC)) as string);
  const env = { SIGNBRIDGE_SOCKET: stack.socketPath, MODULE: MODULE_PATH, TOKEN: tenantFor(SPEC) };
  return { dir, env };
}

const serviceKey = () => createPublicKey(stack.publicKeys.get(tenantFor(SPEC)) as string);

/** file.sig is the pure Ed25519 signature of file.txt under the service's key. */
function fileSigVerifies(dir: string): boolean {
  const sig = readFileSync(join(dir, 'file.sig'));
  return sig.length === 64 && verify(null, readFileSync(join(dir, 'file.txt')), serviceKey(), sig);
}

describe('Ed25519 through the module (docs/clients.md)', () => {
  it('pkcs11-tool lists EC_EDWARDS and EDDSA, and -m EDDSA signs the file; openssl pkeyutl -rawin verifies', () => {
    const w = workDir('pkcs11-tool');
    const out = runSnippetOk('ed25519-pkcs11-tool', w.dir, w.env);
    expect(out.stdout).toMatch(/Public Key Object; EC_EDWARDS/);
    expect(out.stdout).toMatch(/EDDSA, keySize=\{256,256\}, sign/);
    expect(out.stdout).toContain('Signature Verified Successfully');
    expect(fileSigVerifies(w.dir)).toBe(true);
  });

  it('OpenSSL 3 through pkcs11-provider: pkeyutl -sign -rawin, verified by OpenSSL', () => {
    const w = workDir('provider');
    runSnippetOk('openssl-config', w.dir, w.env);
    const out = runSnippetOk('ed25519-openssl-pkeyutl', w.dir, w.env);
    expect(out.stdout).toContain('Signature Verified Successfully');
    expect(fileSigVerifies(w.dir)).toBe(true);
  });

  it('GnuTLS: p11tool lists the key, certtool makes a self-signed certificate that openssl verify accepts', () => {
    const w = workDir('gnutls');
    writeFileSync(
      join(w.dir, 'cert.tmpl'),
      'cn = "Example Ed25519"\nserial = 7\nexpiration_days = 30\nca\ncert_signing_key\n',
    );
    const out = runSnippetOk('ed25519-gnutls', w.dir, w.env);
    expect(out.stdout).toMatch(/Type: Private key \(EdDSA \(Ed25519\)\)|Type: Private key \(EdDSA/);
    expect(out.stdout).toContain('cert.pem: OK');
    const cert = new X509Certificate(readFileSync(join(w.dir, 'cert.pem')));
    expect(cert.publicKey.export({ type: 'spki', format: 'der' })).toEqual(
      serviceKey().export({ type: 'spki', format: 'der' }),
    );
    expect(cert.verify(serviceKey())).toBe(true);
  });

  it('signbridge cert csr and self-signed: pure Ed25519 over the TBS, verified by openssl req -verify and verify', () => {
    const w = workDir('cert');
    const out = runSnippetOk('ed25519-cert', w.dir, w.env);
    expect(`${out.stdout}${out.stderr}`).toMatch(/verify OK|Certificate request self-signature verify OK/);
    expect(out.stdout).toContain('ed25519.pem: OK');
    const cert = new X509Certificate(readFileSync(join(w.dir, 'ed25519.pem')));
    expect(cert.verify(serviceKey())).toBe(true);
  });

  it("a message past 4,096 bytes: pkcs11-tool gets CKR_DATA_LEN_RANGE and stderr says the module's bound", () => {
    const w = workDir('too-long');
    writeFileSync(join(w.dir, 'file.txt'), Buffer.alloc(4097, 0x61));
    const res = runSnippet('ed25519-pkcs11-tool', w.dir, w.env);
    expect(res.code).not.toBe(0);
    expect(res.stderr).toMatch(/CKR_DATA_LEN_RANGE/);
    expect(res.stderr).toMatch(/more than 4096 bytes of input for CKM_EDDSA/);
  });

  it("Debian 12's ssh-keygen -D cannot use the Ed25519 key, and says what docs/clients.md says", () => {
    const w = workDir('ssh');
    const res = spawnSync('ssh-keygen', ['-D', MODULE_PATH], {
      env: { ...process.env, ...w.env },
      encoding: 'utf8',
      timeout: 30_000,
    });
    expect(res.stdout).not.toMatch(/ssh-ed25519/);
    expect(`${res.stdout}${res.stderr}`).toContain('cannot read public key from pkcs11');
    expect(readFileSync(join(import.meta.dirname, '../../docs/clients.md'), 'utf8')).toContain(
      'prints `cannot read public key from pkcs11`',
    );
  });
});
