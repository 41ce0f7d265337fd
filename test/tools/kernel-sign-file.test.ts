// The kernel's scripts/sign-file (Debian's linux-kbuild-6.1) signs a module with a `pkcs11:` URI through the
// module, with the pkcs11-provider configuration: the commands are docs/clients.md's snippets, run as written. The
// appended signature is checked with openssl (the doc's own check) and independently here: the module is unchanged
// before it, the certificate carries the service's key, and the marker is the kernel's. With the libp11 engine
// configuration the same command fails as the doc says.
import { spawnSync } from 'node:child_process';
import { createPublicKey, randomBytes, X509Certificate } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { KeySpec } from '../../src/crypto/algorithms.js';
import { pathWithSignbridge, runSnippetOk } from '../helpers/doc-snippets.js';
import { type Stack, startStack, tenantFor } from '../module/harness.js';

const SIGN_FILE = '/usr/lib/linux-kbuild-6.1/scripts/sign-file';
if (!existsSync(SIGN_FILE)) throw new Error(`${SIGN_FILE} is missing: run scripts/setup.sh (linux-kbuild-6.1)`);

const SPECS: KeySpec[] = ['RSA_2048', 'ECC_NIST_P256'];
const MARKER = '~Module signature appended~\n';
let stack: Stack;

beforeAll(async () => {
  stack = await startStack(SPECS);
}, 120_000);
afterAll(async () => {
  await stack?.close();
});

/** A folder with a stand-in module.ko (sign-file signs any file) and the snippets' variables. */
function workDir(spec: KeySpec) {
  const dir = mkdtempSync(join(stack.dir, `sign-file-${spec}-`));
  const module = Buffer.concat([Buffer.from('\x7fELF stand-in kernel module\n'), randomBytes(4096)]);
  writeFileSync(join(dir, 'module.ko'), module);
  const env = { SIGNBRIDGE_SOCKET: stack.socketPath, TOKEN: tenantFor(spec), SIGN_FILE };
  return { dir, env, module };
}

describe('scripts/sign-file with a pkcs11: URI', () => {
  it.each(SPECS)('%s: signs a module with the provider configuration; the appended signature verifies', (spec) => {
    const { dir, env, module } = workDir(spec);
    runSnippetOk('kernel-sign-file', dir, env);
    const signed = readFileSync(join(dir, 'module.ko'));
    expect(signed.subarray(0, module.length).equals(module)).toBe(true);
    expect(signed.subarray(signed.length - MARKER.length).toString('latin1')).toBe(MARKER);
    const sigLen = signed.readUInt32BE(signed.length - MARKER.length - 4);
    expect(module.length + sigLen + 12 + MARKER.length).toBe(signed.length);
    // The certificate that the kernel would trust carries the tenant's key at the service.
    const cert = new X509Certificate(readFileSync(join(dir, 'signing.pem')));
    const serviceKey = createPublicKey(stack.publicKeys.get(tenantFor(spec)) as string);
    expect(cert.publicKey.export({ type: 'spki', format: 'der' })).toEqual(
      serviceKey.export({ type: 'spki', format: 'der' }),
    );
    const verified = runSnippetOk('kernel-sign-file-verify', dir, env);
    expect(verified.stderr).toMatch(/Verification successful/);
    expect(readFileSync(join(dir, 'module.unsigned')).equals(module)).toBe(true);
    // A module changed after signing no longer verifies against that signature.
    const tampered = Buffer.from(signed);
    tampered[10] = (tampered[10] as number) ^ 1;
    const rejected = spawnSync(
      'openssl',
      [
        'cms',
        '-verify',
        '-binary',
        '-inform',
        'DER',
        '-in',
        'module.p7s',
        '-content',
        '/dev/stdin',
        '-certfile',
        'signing.pem',
        '-CAfile',
        'signing.pem',
        '-purpose',
        'any',
        '-out',
        '/dev/null',
      ],
      { cwd: dir, input: tampered.subarray(0, module.length), encoding: 'utf8' },
    );
    expect(rejected.status).not.toBe(0);
  });

  it('fails with the libp11 engine configuration, as docs/clients.md says', () => {
    const { dir, env, module } = workDir('RSA_2048');
    runSnippetOk('kernel-sign-file', dir, env); // the certificate and the provider configuration
    writeFileSync(join(dir, 'module.ko'), module);
    const config = spawnSync('signbridge', ['openssl-config', '--engine', '--out', 'signbridge-engine.cnf'], {
      cwd: dir,
      env: { ...process.env, PATH: pathWithSignbridge(), ...env },
      encoding: 'utf8',
    });
    expect(config.status, config.stderr).toBe(0);
    const res = spawnSync(SIGN_FILE, ['sha256', `pkcs11:token=${env.TOKEN};type=private`, 'signing.pem', 'module.ko'], {
      cwd: dir,
      env: { ...process.env, ...env, OPENSSL_CONF: join(dir, 'signbridge-engine.cnf') },
      encoding: 'utf8',
    });
    expect(res.status).not.toBe(0);
    expect(res.stderr).toMatch(/private key does not match certificate/);
    expect(readFileSync(join(dir, 'module.ko')).equals(module)).toBe(true);
  });
});
