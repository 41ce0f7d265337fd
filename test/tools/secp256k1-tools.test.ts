// A secp256k1 (ECC_SECG_P256K1) key through the PKCS#11 module with the real tools, against the real daemon and
// service (docs/clients.md#secp256k1-keys): OpenSSL 3 with pkcs11-provider signs with `openssl dgst` (the snippets
// of docs/clients.md), checked by `openssl dgst -verify` with the public key get_public_key returned; `signbridge
// cert self-signed` and `cert csr` through the daemon, checked by OpenSSL; GnuTLS's p11tool lists the key, and
// GnuTLS 3.7's certtool refuses a secp256k1 key because GnuTLS has no such curve (its exact refusal asserted, on a
// plain SoftHSM token, so a GnuTLS that learns the curve fails this test and the docs are to be updated).
import { spawnSync } from 'node:child_process';
import { createPublicKey, X509Certificate } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import { findSoftHsmModule } from '../../src/keys/pkcs11/softhsm.js';
import { runSnippetOk } from '../helpers/doc-snippets.js';
import { type Stack, startStack, tenantFor } from '../module/harness.js';

const K1 = tenantFor('ECC_SECG_P256K1');
let stack: Stack;

beforeAll(async () => {
  stack = await startStack(['ECC_SECG_P256K1']);
}, 120_000);
afterAll(async () => {
  await stack?.close();
});

/** A fresh folder with file.txt and service.pem (the public key get_public_key returned for the tenant). */
function work(name: string) {
  const dir = mkdtempSync(join(stack.dir, `k1-${name}-`));
  writeFileSync(join(dir, 'file.txt'), `signed with secp256k1 through signbridge, ${Date.now()}\n`);
  writeFileSync(join(dir, 'service.pem'), stack.publicKeys.get(K1) as string);
  const env = { SIGNBRIDGE_SOCKET: stack.socketPath, MODULE: MODULE_PATH, TOKEN: K1, MD: 'sha256' };
  return { dir, env };
}

const spki = (pem: string) => createPublicKey(pem).export({ type: 'spki', format: 'der' });
const run = (cmd: string, args: string[], dir: string, env: Record<string, string> = {}) =>
  spawnSync(cmd, args, { cwd: dir, encoding: 'utf8', env: { ...process.env, ...env } });

describe('OpenSSL 3 + pkcs11-provider with a secp256k1 key', () => {
  it('reads the public key from the token (the service key) and signs with openssl dgst -sha256', () => {
    const { dir, env } = work('openssl');
    runSnippetOk('openssl-config', dir, env);
    runSnippetOk('openssl-public-key', dir, env);
    const fromToken = readFileSync(join(dir, 'public.pem'), 'utf8');
    expect(spki(fromToken).equals(spki(stack.publicKeys.get(K1) as string))).toBe(true);
    expect(createPublicKey(fromToken).asymmetricKeyDetails?.namedCurve).toBe('secp256k1');

    expect(runSnippetOk('openssl-dgst', dir, env).stdout).toContain('Verified OK');
    // Verified again with the key get_public_key returned, not the one the token showed.
    const checked = run(
      'openssl',
      ['dgst', '-sha256', '-verify', 'service.pem', '-signature', 'file.sig', 'file.txt'],
      dir,
    );
    expect(checked.stdout, checked.stderr).toContain('Verified OK');
    writeFileSync(join(dir, 'file.txt'), 'other data\n');
    const other = run(
      'openssl',
      ['dgst', '-sha256', '-verify', 'service.pem', '-signature', 'file.sig', 'file.txt'],
      dir,
    );
    expect(other.stdout).toContain('Verification failure');
  });
});

describe('signbridge cert with a secp256k1 key, through the daemon', () => {
  it('self-signed: ecdsa-with-SHA256 on secp256k1, openssl verify OK, and the module shows it', () => {
    const { dir, env } = work('self-signed');
    runSnippetOk('cert-self-signed', dir, env);
    const pem = readFileSync(join(dir, 'self-signed.pem'), 'utf8');
    const cert = new X509Certificate(pem);
    expect(
      cert.publicKey.export({ type: 'spki', format: 'der' }).equals(spki(stack.publicKeys.get(K1) as string)),
    ).toBe(true);
    expect(run('openssl', ['x509', '-in', 'self-signed.pem', '-noout', '-text'], dir).stdout).toContain(
      'ecdsa-with-SHA256',
    );
    const verified = run('openssl', ['verify', '-CAfile', 'self-signed.pem', 'self-signed.pem'], dir);
    expect(verified.stdout, verified.stderr).toContain(': OK');
    const objects = run('pkcs11-tool', ['--module', MODULE_PATH, '--token-label', K1, '--list-objects'], dir, env);
    expect(objects.stdout).toMatch(/Certificate Object[\s\S]*subject:\s+DN: CN=Example test signing/);
  });

  it('csr: openssl req -verify accepts the request, with the service key', () => {
    const { dir, env } = work('csr');
    runSnippetOk('cert-csr', dir, env);
    const checked = run('openssl', ['req', '-in', 'release.csr', '-verify', '-noout', '-pubkey'], dir);
    expect(checked.stderr + checked.stdout).toMatch(/verify OK/);
    expect(spki(checked.stdout).equals(spki(stack.publicKeys.get(K1) as string))).toBe(true);
  });
});

describe('GnuTLS with a secp256k1 key', () => {
  it('p11tool --list-all shows the private key as EC/ECDSA', () => {
    const { dir, env } = work('p11tool');
    const listed = run('p11tool', ['--provider', MODULE_PATH, '--list-all', `pkcs11:token=${K1}`], dir, env);
    expect(listed.status, listed.stderr).toBe(0);
    expect(listed.stdout).toMatch(
      new RegExp(`token=${K1};[^\\n]*type=private[\\s\\S]*Type: Private key \\(EC/ECDSA\\)`),
    );
  });

  it('certtool --generate-self-signed refuses a secp256k1 key: GnuTLS 3.7 has no such curve', () => {
    // GnuTLS's own limit, shown on a plain SoftHSM token with a secp256k1 key (through the module certtool does not
    // get this far today, for P-256 either: docs/clients.md#secp256k1-keys).
    const { dir } = work('certtool');
    const conf = join(dir, 'softhsm2.conf');
    mkdirSync(join(dir, 'tokens'));
    writeFileSync(conf, `directories.tokendir = ${join(dir, 'tokens')}\nobjectstore.backend = file\n`);
    const env = { SOFTHSM2_CONF: conf, GNUTLS_PIN: '1234' };
    const softhsm = findSoftHsmModule();
    const init = ['--init-token', '--free', '--label', 'k1', '--pin', '1234', '--so-pin', '1234'];
    expect(run('softhsm2-util', init, dir, env).status).toBe(0);
    const keygen = run(
      'pkcs11-tool',
      ['--module', softhsm, '--token-label', 'k1', '--login', '--pin', '1234', '--keypairgen'].concat([
        '--key-type',
        'EC:secp256k1',
        '--label',
        'k1',
        '--id',
        '01',
      ]),
      dir,
      env,
    );
    expect(keygen.status, keygen.stderr).toBe(0);
    writeFileSync(join(dir, 'template'), 'cn = secp256k1 test\nexpiration_days = 2\nsigning_key\ncode_signing_key\n');
    const made = run(
      'certtool',
      ['--provider', softhsm, '--generate-self-signed', '--template', 'template', '--outfile', 'gnutls.pem'].concat(
        ['--load-privkey', 'pkcs11:token=k1;object=k1;type=private'],
        ['--load-pubkey', 'pkcs11:token=k1;object=k1;type=public'],
      ),
      dir,
      env,
    );
    expect(made.stderr).toContain('The curve is unsupported');
    expect(existsSync(join(dir, 'gnutls.pem'))).toBe(false);
  });
});
