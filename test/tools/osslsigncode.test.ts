// osslsigncode through the libp11 engine and the module, against the real daemon and service: a PE built here with
// mingw, signed with RSA and EC tenant keys whose certificates came from `signbridge cert csr` and a CA, and
// verified by osslsigncode against the root only (so the embedded chain is what makes it pass).
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import type { KeySpec } from '../../src/crypto/algorithms.js';
import { runSnippet, runSnippetOk } from '../helpers/doc-snippets.js';
import { type Stack, startStack, tenantFor } from '../module/harness.js';
import { certifyTenants, makeTestPki, type TestPki } from './pki.js';

const SPECS: KeySpec[] = ['RSA_2048', 'ECC_NIST_P256', 'ECC_NIST_P384'];
let stack: Stack;
let pki: TestPki;
let pe: Buffer;

beforeAll(async () => {
  stack = await startStack(SPECS);
  pki = makeTestPki(mkdtempSync(join(stack.dir, 'pki-')));
  const build = mkdtempSync(join(stack.dir, 'pe-'));
  writeFileSync(join(build, 'hello.c'), '#include <stdio.h>\nint main(void){puts("signed by signbridge");return 0;}\n');
  execFileSync('x86_64-w64-mingw32-gcc', ['-O2', '-o', 'hello.exe', 'hello.c'], { cwd: build });
  pe = readFileSync(join(build, 'hello.exe'));
  expect(pe.subarray(0, 2).toString()).toBe('MZ');
  certifyTenants(pki, stack.socketPath, stack.dir, SPECS.map(tenantFor));
});
afterAll(async () => {
  await stack?.close();
});

function workDir(spec: KeySpec): { dir: string; env: NodeJS.ProcessEnv } {
  const dir = mkdtempSync(join(stack.dir, `sign-${spec}-`));
  writeFileSync(join(dir, 'app.exe'), pe);
  writeFileSync(join(dir, 'intermediates.pem'), readFileSync(pki.intermediate));
  writeFileSync(join(dir, 'root.pem'), readFileSync(pki.root));
  const env = {
    SIGNBRIDGE_SOCKET: stack.socketPath,
    MODULE: MODULE_PATH,
    TOKEN: tenantFor(spec),
    KEY_ID: stack.keyIds.get(tenantFor(spec)) as string,
    HASH: spec === 'ECC_NIST_P384' ? 'sha384' : 'sha256',
  };
  return { dir, env };
}

describe.each(SPECS)('osslsigncode + libp11 engine, %s', (spec) => {
  it('signs a PE through the module, and osslsigncode verifies it against the root with the embedded chain', () => {
    const { dir, env } = workDir(spec);
    runSnippetOk('osslsigncode-sign', dir, env);
    const verified = runSnippetOk('osslsigncode-verify', dir, env);
    expect(verified.stdout).toContain('Signature verification: ok');
    expect(verified.stdout).toMatch(/Number of certificates: 3|Signer's certificate:[\s\S]*Example release signing/);
    expect(verified.stdout).toContain('Example test code-signing CA');
    // The signer certificate is the tenant's leaf and the signature the expected kind.
    const printed = spawnSync(
      'osslsigncode',
      ['extract-signature', '-pem', '-in', 'app-signed.exe', '-out', 'sig.pem'],
      {
        cwd: dir,
        encoding: 'utf8',
      },
    );
    expect(printed.status).toBe(0);
    const pkcs7 = execFileSync('openssl', ['pkcs7', '-in', 'sig.pem', '-print'], { cwd: dir, encoding: 'utf8' });
    expect(pkcs7).toMatch(spec.startsWith('RSA') ? /rsaEncryption|sha256WithRSAEncryption/ : /ecdsa-with-SHA/);
    expect(pkcs7).toContain(spec === 'ECC_NIST_P384' ? 'sha384' : 'sha256');
    expect(pkcs7).toContain('Example release signing');
    // The signed program still runs as a PE (mingw can't run it here): its header is intact.
    expect(readFileSync(join(dir, 'app-signed.exe')).subarray(0, 2).toString()).toBe('MZ');
  });

  it('a signed file changed afterwards, or a verifier with another root, fails verification', () => {
    const { dir, env } = workDir(spec);
    runSnippetOk('osslsigncode-sign', dir, env);
    const signed = readFileSync(join(dir, 'app-signed.exe'));
    const tampered = Buffer.from(signed);
    const at = tampered.indexOf(Buffer.from('signed by signbridge'));
    expect(at).toBeGreaterThan(0);
    tampered[at] = (tampered[at] as number) ^ 0x20;
    writeFileSync(join(dir, 'app-signed.exe'), tampered);
    const bad = runSnippet('osslsigncode-verify', dir, env);
    expect(bad.code).not.toBe(0);
    expect(bad.stdout + bad.stderr).not.toMatch(/Signature verification: ok/);

    writeFileSync(join(dir, 'app-signed.exe'), signed);
    const other = makeTestPki(mkdtempSync(join(stack.dir, 'other-pki-')), 'Other');
    writeFileSync(join(dir, 'root.pem'), readFileSync(other.root));
    const untrusted = runSnippet('osslsigncode-verify', dir, env);
    expect(untrusted.code).not.toBe(0);
  });
});

it('a P-384 key signs a SHA-256 digest too (as a plain HSM does); a SHA-1 one fails with CKR_DATA_LEN_RANGE', () => {
  const { dir, env } = workDir('ECC_NIST_P384');
  runSnippetOk('osslsigncode-sign', dir, { ...env, HASH: 'sha256' });
  expect(runSnippetOk('osslsigncode-verify', dir, env).stdout).toContain('Signature verification: ok');
  const sha1 = workDir('ECC_NIST_P384');
  const r = runSnippet('osslsigncode-sign', sha1.dir, { ...sha1.env, HASH: 'sha1' });
  expect(r.code).not.toBe(0);
  expect(r.stderr).toContain('Data len range');
});
