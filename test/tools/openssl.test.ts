// OpenSSL 3 through the module, against the real daemon and service: pkcs11-provider and the libp11 engine, each
// with dgst, pkeyutl, req -x509 and cms, for RSA (PKCS#1 v1.5 and PSS) and EC keys. The commands are the snippets of
// docs/clients.md; every signature is verified by OpenSSL's own verifier, and again here with the public key the
// service returned (so a signature by any other key fails).
import { spawnSync } from 'node:child_process';
import { constants, createPublicKey, verify, X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import type { KeySpec } from '../../src/crypto/algorithms.js';
import { runSnippet, runSnippetOk } from '../helpers/doc-snippets.js';
import { type Stack, startStack, tenantFor } from '../module/harness.js';

const SPECS: KeySpec[] = ['RSA_2048', 'ECC_NIST_P256', 'ECC_NIST_P384'];
const MD: Record<string, string> = { RSA_2048: 'sha256', ECC_NIST_P256: 'sha256', ECC_NIST_P384: 'sha384' };
let stack: Stack;

beforeAll(async () => {
  stack = await startStack(SPECS);
});
afterAll(async () => {
  await stack?.close();
});

/** A folder with both configurations, file.txt and the token's public key (from the token, via the provider). */
function workDir(spec: KeySpec) {
  const dir = mkdtempSync(join(stack.dir, `openssl-${spec}-`));
  const env = { SIGNBRIDGE_SOCKET: stack.socketPath, MODULE: MODULE_PATH, TOKEN: tenantFor(spec), MD: MD[spec] };
  writeFileSync(join(dir, 'file.txt'), `signed by OpenSSL through signbridge, ${spec}, ${Date.now()}\n`);
  runSnippetOk('openssl-config', dir, env);
  runSnippetOk('openssl-engine-config', dir, env);
  runSnippetOk('openssl-public-key', dir, env);
  return { dir, env };
}

const servicePublicKey = (spec: KeySpec) => createPublicKey(stack.publicKeys.get(tenantFor(spec)) as string);

/** Verifies file.sig over file.txt with the service's public key for `spec`. */
function verifiedByServiceKey(dir: string, spec: KeySpec, keySpec = spec, pss = false): boolean {
  const key = servicePublicKey(keySpec);
  const options = pss
    ? { key, padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: constants.RSA_PSS_SALTLEN_DIGEST }
    : { key, dsaEncoding: 'der' as const };
  try {
    return verify(
      MD[spec] as string,
      readFileSync(join(dir, 'file.txt')),
      options,
      readFileSync(join(dir, 'file.sig')),
    );
  } catch {
    return false; // e.g. an EC signature checked with an RSA key
  }
}

describe.each(SPECS)('OpenSSL 3 + pkcs11-provider, %s', (spec) => {
  it('the public key read from the token is the service key', () => {
    const { dir } = workDir(spec);
    const fromToken = createPublicKey(readFileSync(join(dir, 'public.pem')));
    expect(fromToken.export({ type: 'spki', format: 'der' })).toEqual(
      servicePublicKey(spec).export({ type: 'spki', format: 'der' }),
    );
  });

  it('openssl dgst -sign, verified by openssl and by the service key (and not by another tenant key)', () => {
    const { dir, env } = workDir(spec);
    const r = runSnippetOk('openssl-dgst', dir, env);
    expect(r.stdout).toContain('Verified OK');
    expect(verifiedByServiceKey(dir, spec)).toBe(true);
    expect(verifiedByServiceKey(dir, spec, spec === 'RSA_2048' ? 'ECC_NIST_P256' : 'RSA_2048')).toBe(false);
    const sameFamily = SPECS.find((s) => s !== spec && s.slice(0, 3) === spec.slice(0, 3));
    if (sameFamily) expect(verifiedByServiceKey(dir, spec, sameFamily)).toBe(false);
  });

  it('openssl pkeyutl -sign over a digest, verified by openssl and by the service key', () => {
    const { dir, env } = workDir(spec);
    const r = runSnippetOk('openssl-pkeyutl', dir, env);
    expect(r.stdout).toContain('Signature Verified Successfully');
    expect(verifiedByServiceKey(dir, spec)).toBe(true);
  });

  it('openssl req -new -x509 and openssl cms -sign, verified by openssl', () => {
    const { dir, env } = workDir(spec);
    const req = runSnippetOk('openssl-req-x509', dir, env);
    expect(req.stdout).toContain('cert.pem: OK');
    const cert = new X509Certificate(readFileSync(join(dir, 'cert.pem')));
    expect(cert.publicKey.export({ type: 'spki', format: 'der' })).toEqual(
      servicePublicKey(spec).export({ type: 'spki', format: 'der' }),
    );
    const cms = runSnippetOk('openssl-cms', dir, env);
    expect(cms.stderr).toContain('Verification successful');
    // The CMS signature does not cover changed content.
    writeFileSync(join(dir, 'file.txt'), 'something else\n');
    const changed = spawnSync(
      'openssl',
      [
        'cms',
        '-verify',
        '-binary',
        '-inform',
        'DER',
        '-in',
        'file.p7s',
        '-content',
        'file.txt',
        '-CAfile',
        'cert.pem',
        '-purpose',
        'any',
        '-out',
        '/dev/null',
      ],
      { cwd: dir, encoding: 'utf8' },
    );
    expect(changed.status).not.toBe(0);
    expect(changed.stderr).toContain('Verification failure');
  });
});

describe('OpenSSL 3 + pkcs11-provider, RSA-PSS', () => {
  it('openssl dgst with rsa_padding_mode:pss, verified by openssl and as PSS by the service key', () => {
    const { dir, env } = workDir('RSA_2048');
    const r = runSnippetOk('openssl-dgst-pss', dir, env);
    expect(r.stdout).toContain('Verified OK');
    expect(verifiedByServiceKey(dir, 'RSA_2048', 'RSA_2048', true)).toBe(true);
    expect(verifiedByServiceKey(dir, 'RSA_2048')).toBe(false); // not a PKCS#1 v1.5 signature
  });
});

describe.each(SPECS)('OpenSSL + libp11 engine, %s', (spec) => {
  it('openssl dgst -engine pkcs11, verified by openssl and by the service key', () => {
    const { dir, env } = workDir(spec);
    const r = runSnippetOk('openssl-engine-dgst', dir, env);
    expect(r.stdout).toContain('Verified OK');
    expect(verifiedByServiceKey(dir, spec)).toBe(true);
  });

  it('openssl req -x509 and cms -sign with -engine pkcs11, verified by openssl', () => {
    const { dir, env } = workDir(spec);
    expect(runSnippetOk('openssl-engine-req-x509', dir, env).stdout).toContain('cert.pem: OK');
    expect(runSnippetOk('openssl-engine-cms', dir, env).stderr).toContain('Verification successful');
  });
});

it('a key the daemon does not expose is an error from OpenSSL, not a signature', () => {
  const { dir, env } = workDir('RSA_2048');
  const r = runSnippet('openssl-dgst', dir, { ...env, TOKEN: 'no-such-tenant' });
  expect(r.code).not.toBe(0);
});
