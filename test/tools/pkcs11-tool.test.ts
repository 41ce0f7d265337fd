// pkcs11-tool (OpenSC) and p11-kit through the module, against the real daemon and service: the object listing,
// every sign mechanism the module offers for each key type (module-e2e.test.ts and pkcs11js.test.ts cover the
// conformance run, approvals and denials), and the p11-kit registration with signing through p11-kit's proxy.
import { execFileSync } from 'node:child_process';
import { constants, createHash, createPublicKey, verify } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import { MODULE_FILE, registrationDir } from '../../src/cli/p11-kit.js';
import type { KeySpec } from '../../src/crypto/algorithms.js';
import { runCli } from '../helpers/cli.js';
import { runSnippet, runSnippetOk } from '../helpers/doc-snippets.js';
import { type Stack, startStack, tenantFor } from '../module/harness.js';

const SPECS: KeySpec[] = ['RSA_2048', 'ECC_NIST_P256', 'ECC_NIST_P384'];
let stack: Stack;

beforeAll(async () => {
  stack = await startStack(SPECS);
});
afterAll(async () => {
  await stack?.close();
});

const MESSAGE = Buffer.from('signed by pkcs11-tool through signbridge\n');
const DIGEST_INFO_SHA256 = Buffer.from('3031300d060960864801650304020105000420', 'hex');

function workDir(spec: KeySpec) {
  const dir = mkdtempSync(join(stack.dir, `p11tool-${spec}-`));
  writeFileSync(join(dir, 'file.txt'), MESSAGE);
  const env = { SIGNBRIDGE_SOCKET: stack.socketPath, MODULE: MODULE_PATH, TOKEN: tenantFor(spec) };
  return { dir, env };
}

const publicKey = (spec: KeySpec) => createPublicKey(stack.publicKeys.get(tenantFor(spec)) as string);

describe('pkcs11-tool --list-objects', () => {
  it.each(SPECS)('%s: the private and public key, labelled with the service key id and its CKA_ID', (spec) => {
    const { dir, env } = workDir(spec);
    const out = runSnippetOk('pkcs11-tool-list', dir, env).stdout;
    const keyId = stack.keyIds.get(tenantFor(spec)) as string;
    const blocks = out.split(/\n(?=\S)/);
    const priv = blocks.find((b) => b.startsWith('Private Key Object'));
    const pub = blocks.find((b) => b.startsWith('Public Key Object'));
    for (const b of [priv, pub]) {
      expect(b).toContain(`label:      ${keyId}`);
      expect(b).toContain(`ID:         ${keyId.replaceAll('-', '')}`);
    }
    expect(priv).toMatch(spec.startsWith('RSA') ? /RSA/ : /EC/);
    expect(priv).toMatch(/Usage:\s+sign/);
    expect(priv).toMatch(/Access:\s+sensitive, always sensitive, never extractable/);
  });
});

interface Case {
  spec: KeySpec;
  mechanism: string;
  /** What pkcs11-tool reads: the message, or a digest / DigestInfo for the raw mechanisms. */
  input: (message: Buffer) => Buffer;
  /** Verifies the signature over the message with the service's public key. */
  check: (signature: Buffer) => boolean;
}

const sha = (alg: string, data: Buffer) => createHash(alg).update(data).digest();
const rsa =
  (alg: string, pss = false) =>
  (sig: Buffer) =>
    verify(
      alg,
      MESSAGE,
      {
        key: publicKey('RSA_2048'),
        ...(pss && { padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: constants.RSA_PSS_SALTLEN_DIGEST }),
      },
      sig,
    );
const ec = (spec: KeySpec, alg: string) => (sig: Buffer) =>
  verify(alg, MESSAGE, { key: publicKey(spec), dsaEncoding: 'ieee-p1363' }, sig);

const CASES: Case[] = [
  {
    spec: 'RSA_2048',
    mechanism: 'RSA-PKCS',
    input: (m) => Buffer.concat([DIGEST_INFO_SHA256, sha('sha256', m)]),
    check: rsa('sha256'),
  },
  { spec: 'RSA_2048', mechanism: 'SHA256-RSA-PKCS', input: (m) => m, check: rsa('sha256') },
  { spec: 'RSA_2048', mechanism: 'SHA384-RSA-PKCS', input: (m) => m, check: rsa('sha384') },
  { spec: 'RSA_2048', mechanism: 'SHA512-RSA-PKCS', input: (m) => m, check: rsa('sha512') },
  { spec: 'RSA_2048', mechanism: 'SHA256-RSA-PKCS-PSS', input: (m) => m, check: rsa('sha256', true) },
  { spec: 'RSA_2048', mechanism: 'SHA512-RSA-PKCS-PSS', input: (m) => m, check: rsa('sha512', true) },
  { spec: 'ECC_NIST_P256', mechanism: 'ECDSA', input: (m) => sha('sha256', m), check: ec('ECC_NIST_P256', 'sha256') },
  { spec: 'ECC_NIST_P256', mechanism: 'ECDSA-SHA256', input: (m) => m, check: ec('ECC_NIST_P256', 'sha256') },
  { spec: 'ECC_NIST_P384', mechanism: 'ECDSA', input: (m) => sha('sha384', m), check: ec('ECC_NIST_P384', 'sha384') },
  { spec: 'ECC_NIST_P384', mechanism: 'ECDSA-SHA384', input: (m) => m, check: ec('ECC_NIST_P384', 'sha384') },
];

describe('pkcs11-tool --sign', () => {
  it.each(CASES)('$spec with $mechanism: verified with the service public key', ({ spec, mechanism, input, check }) => {
    const { dir, env } = workDir(spec);
    writeFileSync(join(dir, 'input.bin'), input(MESSAGE));
    runSnippetOk('pkcs11-tool-sign', dir, { ...env, MECHANISM: mechanism, INPUT: 'input.bin' });
    const signature = readFileSync(join(dir, 'file.sig'));
    expect(check(signature)).toBe(true);
    // The same check fails for another message, so it is not vacuous.
    signature[signature.length - 1] = (signature[signature.length - 1] as number) ^ 1;
    expect(check(signature)).toBe(false);
  });

  it('RSA-PKCS-PSS over a digest, with explicit parameters', () => {
    const { dir, env } = workDir('RSA_2048');
    writeFileSync(join(dir, 'file.digest'), sha('sha256', MESSAGE));
    runSnippetOk('pkcs11-tool-sign-pss', dir, env);
    expect(rsa('sha256', true)(readFileSync(join(dir, 'file.sig')))).toBe(true);
  });

  it('a mechanism the key does not allow, or a digest of the wrong size, fails and writes no signature', () => {
    const { dir, env } = workDir('ECC_NIST_P384');
    writeFileSync(join(dir, 'short.bin'), sha('sha256', MESSAGE));
    const wrongSize = runSnippet('pkcs11-tool-sign', dir, { ...env, MECHANISM: 'ECDSA', INPUT: 'short.bin' });
    expect(wrongSize.code).not.toBe(0);
    expect(wrongSize.stderr).toMatch(/CKR_DATA_LEN_RANGE/);
    const wrongMech = runSnippet('pkcs11-tool-sign', dir, { ...env, MECHANISM: 'SHA256-RSA-PKCS', INPUT: 'file.txt' });
    expect(wrongMech.code).not.toBe(0);
    expect(wrongMech.stderr).toMatch(/CKR_KEY_TYPE_INCONSISTENT|CKR_MECHANISM_INVALID/);
    expect(existsSync(join(dir, 'file.sig')) && readFileSync(join(dir, 'file.sig')).length > 0).toBe(false);
  });
});

describe('p11-kit', () => {
  // p11-kit ignores per-user registrations in programs running as root, so as root the test registers system-wide
  // (and always removes it again); otherwise it uses a private HOME.
  const asRoot = process.getuid?.() === 0;
  const home = mkdtempSync(join('/tmp', 'sb-p11kit-home-'));
  const scopeEnv = asRoot ? {} : { HOME: home };
  const file = join(asRoot ? registrationDir('system') : registrationDir('user', { HOME: home }), MODULE_FILE);

  afterAll(() => {
    if (existsSync(file)) runCli(['p11-kit', 'unregister'], scopeEnv);
  });

  it('register: p11-kit lists our module and tokens, and the proxy module signs through it; unregister removes it', () => {
    expect(existsSync(file)).toBe(false);
    const { dir, env } = workDir('RSA_2048');
    const listed = runSnippetOk('p11-kit-register', dir, { ...env, ...scopeEnv }).stdout;
    expect(readFileSync(file, 'utf8')).toContain(`module: ${MODULE_PATH}`);
    const ours = listed.slice(listed.indexOf('signbridge:'));
    expect(ours.startsWith(`signbridge: ${MODULE_PATH}`)).toBe(true);
    for (const spec of SPECS) expect(ours).toContain(`token: ${tenantFor(spec)}`);

    runSnippetOk('p11-kit-proxy-sign', dir, { ...env, ...scopeEnv });
    expect(rsa('sha256')(readFileSync(join(dir, 'file.sig')))).toBe(true);

    const removed = runCli(['p11-kit', 'unregister'], scopeEnv);
    expect(removed.code).toBe(0);
    expect(existsSync(file)).toBe(false);
    const after = execFileSync('p11-kit', ['list-modules'], { env: { ...process.env, ...scopeEnv }, encoding: 'utf8' });
    expect(after).not.toContain('signbridge:');
    const again = runCli(['p11-kit', 'unregister'], scopeEnv);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('nothing to remove');
  });
});
