// jarsigner and keytool (JDK 17, SunPKCS11) through the module, against the real daemon and service: each tenant
// key gets a CA-issued certificate through `signbridge cert csr` + `cert import`, keytool shows the key entry with
// its chain from the token, jarsigner signs a JAR with its default algorithm for the key, and verifies it.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import type { KeySpec } from '../../src/crypto/algorithms.js';
import { runSnippet, runSnippetOk } from '../helpers/doc-snippets.js';
import { type Stack, startStack, tenantFor } from '../module/harness.js';
import { certifyTenants, makeTestPki, type TestPki } from './pki.js';

// Slot order is the daemon's tenant order, which is this order.
const SPECS: KeySpec[] = ['RSA_2048', 'RSA_3072', 'ECC_NIST_P256', 'ECC_NIST_P384'];
const EXPECTED: Record<string, { algorithm: string; key: string }> = {
  RSA_2048: { algorithm: 'SHA256withRSA', key: '2048-bit' },
  RSA_3072: { algorithm: 'SHA256withRSA', key: '3072-bit' },
  ECC_NIST_P256: { algorithm: 'SHA256withECDSA', key: '256-bit' },
  ECC_NIST_P384: { algorithm: 'SHA384withECDSA', key: '384-bit' },
};
let stack: Stack;
let pki: TestPki;
let jar: Buffer;

beforeAll(async () => {
  stack = await startStack(SPECS);
  pki = makeTestPki(mkdtempSync(join(stack.dir, 'pki-')));
  const build = mkdtempSync(join(stack.dir, 'jar-'));
  writeFileSync(join(build, 'Hello.txt'), 'signed by signbridge\n');
  execFileSync('jar', ['cf', 'app.jar', 'Hello.txt'], { cwd: build });
  jar = readFileSync(join(build, 'app.jar'));
  certifyTenants(pki, stack.socketPath, stack.dir, SPECS.map(tenantFor));
}, 180_000);
afterAll(async () => {
  await stack?.close();
});

function workDir(spec: KeySpec) {
  const dir = mkdtempSync(join(stack.dir, `sign-${spec}-`));
  writeFileSync(join(dir, 'app.jar'), jar);
  writeFileSync(join(dir, 'root.pem'), readFileSync(pki.root));
  const env = {
    SIGNBRIDGE_SOCKET: stack.socketPath,
    MODULE: MODULE_PATH,
    SLOT: String(SPECS.indexOf(spec)),
    KEY_ID: stack.keyIds.get(tenantFor(spec)) as string,
  };
  runSnippetOk('java-pkcs11-config', dir, env);
  return { dir, env };
}

describe.each(SPECS)('jarsigner + SunPKCS11, %s', (spec) => {
  it('keytool lists the key entry with its chain of three from the token', () => {
    const { dir, env } = workDir(spec);
    const out = runSnippetOk('keytool-list', dir, env).stdout;
    expect(out).toContain(`Alias name: ${env.KEY_ID}`);
    expect(out).toContain('Entry type: PrivateKeyEntry');
    expect(out).toContain('Certificate chain length: 3');
    expect(out).toMatch(/Owner: CN=Example release signing, O=Example/);
    expect(out).toMatch(/Owner: CN=Example test code-signing CA, O=Example/);
    expect(out).toMatch(/Owner: CN=Example test root CA, O=Example/);
  });

  it(`signs a JAR with ${EXPECTED[spec]?.algorithm} and jarsigner -verify -strict passes against the root`, () => {
    const { dir, env } = workDir(spec);
    runSnippetOk('jarsigner-sign', dir, env);
    const verified = runSnippetOk('jarsigner-verify', dir, env).stdout;
    expect(verified).toContain('jar verified.');
    // The summary after "Signed by" names the signature jarsigner chose for this key.
    const summary = verified.slice(verified.indexOf('- Signed by'));
    expect(summary).toContain(`Signature algorithm: ${EXPECTED[spec]?.algorithm}, ${EXPECTED[spec]?.key}`);
    expect(verified).toContain('CN=Example release signing, O=Example');
    // The signature block holds the leaf and the intermediate, taken from the token.
    const block = execFileSync('unzip', ['-Z1', 'app-signed.jar'], { cwd: dir, encoding: 'utf8' })
      .split('\n')
      .find((n) => /^META-INF\/.*\.(RSA|EC)$/.test(n)) as string;
    expect(block).toBeDefined();
    const der = execFileSync('unzip', ['-p', 'app-signed.jar', block], { cwd: dir });
    const certs = spawnSync('openssl', ['pkcs7', '-inform', 'DER', '-print_certs', '-noout'], {
      input: der,
      encoding: 'utf8',
    }).stdout;
    expect(certs).toContain('CN = Example release signing');
    expect(certs).toContain('CN = Example test code-signing CA');
  });

  it('a changed entry, or a trust store with another root, fails jarsigner -verify -strict', () => {
    const { dir, env } = workDir(spec);
    runSnippetOk('jarsigner-sign', dir, env);
    // Replace the entry's content inside the signed jar.
    writeFileSync(join(dir, 'Hello.txt'), 'not what was signed\n');
    execFileSync('jar', ['uf', 'app-signed.jar', 'Hello.txt'], { cwd: dir });
    const changed = runSnippet('jarsigner-verify', dir, env);
    expect(changed.code).not.toBe(0);
    expect(changed.stdout + changed.stderr).toMatch(/digest error|unsigned entries|not signed/i);
    expect(changed.stdout + changed.stderr).not.toContain('jar verified.');

    runSnippetOk('jarsigner-sign', dir, env);
    const other = makeTestPki(mkdtempSync(join(stack.dir, 'other-pki-')), 'Other');
    writeFileSync(join(dir, 'root.pem'), readFileSync(other.root));
    rmSync(join(dir, 'trust.p12'));
    const untrusted = runSnippet('jarsigner-verify', dir, env);
    expect(untrusted.code).not.toBe(0);
    expect(untrusted.stdout + untrusted.stderr).toMatch(/certificate chain is invalid|PKIX path/);
  });
});

// RSASSA-PSS: SunPKCS11 offers it only when the token lists CKM_SHA256 as a digest (it hashes on the token, then
// signs with CKM_RSA_PKCS_PSS); without the module's digests both commands fail with "Unsupported digest algorithm".
describe.each(SPECS.filter((s) => s.startsWith('RSA_')))('RSASSA-PSS through SunPKCS11, %s', (spec) => {
  it('jarsigner -sigalg RSASSA-PSS signs a JAR that jarsigner -verify -strict accepts', () => {
    const { dir, env } = workDir(spec);
    runSnippetOk('jarsigner-sign-pss', dir, env);
    const verified = runSnippetOk('jarsigner-verify', dir, env).stdout;
    expect(verified).toContain('jar verified.');
    const summary = verified.slice(verified.indexOf('- Signed by'));
    expect(summary).toContain(`Signature algorithm: RSASSA-PSS, ${EXPECTED[spec]?.key}`);
  });

  it('keytool -certreq -sigalg RSASSA-PSS makes a request whose PSS signature verifies', () => {
    const { dir, env } = workDir(spec);
    const run = runSnippetOk('keytool-certreq-pss', dir, env);
    expect(run.stderr).toContain('verify OK');
    const text = execFileSync('openssl', ['req', '-in', join(dir, 'release.csr'), '-noout', '-text'], {
      encoding: 'utf8',
    });
    expect(text).toContain('rsassaPss');
    expect(text).toMatch(/Hash Algorithm: sha256/);
  });
});
