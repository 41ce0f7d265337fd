// pkcs11-tool (OpenSC) through the module, against the real daemon and service: the object listing, the mechanism
// list, and a signature with every sign mechanism the module offers for each key type, each verified by `openssl`
// with the service's public key. Not here (covered elsewhere): the pkcs11-tool --test --login conformance run
// (module/pkcs11js.test.ts), the slot listing, approvals and denials (conformance/pkcs11.test.ts), and the CKR codes
// for wrong mechanisms and digest sizes (module/pkcs11js.test.ts).
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import type { KeySpec } from '../../src/crypto/algorithms.js';
import { runSnippetOk } from '../helpers/doc-snippets.js';
import { type Stack, startStack, tenantFor } from '../module/harness.js';

// Every curve, each signing SHA-256, SHA-384 and SHA-512 digests (as a plain HSM does; TLS 1.2 needs it).
const SPECS: KeySpec[] = ['RSA_2048', 'ECC_NIST_P256', 'ECC_NIST_P384', 'ECC_NIST_P521'];
let stack: Stack;

beforeAll(async () => {
  stack = await startStack(SPECS);
});
afterAll(async () => {
  await stack?.close();
});

const MESSAGE = Buffer.from('signed by pkcs11-tool through signbridge\n');
const DIGEST_INFO_SHA256 = Buffer.from('3031300d060960864801650304020105000420', 'hex');

/** A folder with file.txt and, as service.pem, the public key the service returned for the tenant. */
function workDir(spec: KeySpec) {
  const dir = mkdtempSync(join(stack.dir, `p11tool-${spec}-`));
  writeFileSync(join(dir, 'file.txt'), MESSAGE);
  writeFileSync(join(dir, 'service.pem'), stack.publicKeys.get(tenantFor(spec)) as string);
  const env = { SIGNBRIDGE_SOCKET: stack.socketPath, MODULE: MODULE_PATH, TOKEN: tenantFor(spec) };
  return { dir, env };
}

/** r‖s (what PKCS#11 returns) as the DER ECDSA-Sig-Value OpenSSL reads. */
function ecdsaDer(raw: Buffer): Buffer {
  const int = (b: Buffer) => {
    let v = b;
    while (v.length > 1 && v[0] === 0 && ((v[1] as number) & 0x80) === 0) v = v.subarray(1);
    if ((v[0] as number) & 0x80) v = Buffer.concat([Buffer.from([0]), v]);
    return Buffer.concat([Buffer.from([0x02, v.length]), v]);
  };
  const half = raw.length / 2;
  const body = Buffer.concat([int(raw.subarray(0, half)), int(raw.subarray(half))]);
  const len = body.length < 0x80 ? Buffer.from([body.length]) : Buffer.from([0x81, body.length]);
  return Buffer.concat([Buffer.from([0x30]), len, body]);
}

/**
 * `openssl dgst -verify` of `signature` over file.txt with service.pem (the service's public key): true when OpenSSL
 * prints "Verified OK".
 */
function opensslVerifies(dir: string, md: string, signature: Buffer, opts: { pss?: boolean; ec?: boolean } = {}) {
  writeFileSync(join(dir, 'check.sig'), opts.ec ? ecdsaDer(signature) : signature);
  const pss = opts.pss ? ['-sigopt', 'rsa_padding_mode:pss', '-sigopt', 'rsa_pss_saltlen:digest'] : [];
  const r = spawnSync(
    'openssl',
    ['dgst', `-${md}`, ...pss, '-verify', 'service.pem', '-signature', 'check.sig'].concat('file.txt'),
    {
      cwd: dir,
      encoding: 'utf8',
    },
  );
  return r.status === 0 && r.stdout.includes('Verified OK');
}

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
    // Nothing else: no certificate until one is imported.
    expect(blocks.filter((b) => /^\S.*Object/.test(b))).toHaveLength(2);
  });
});

interface Case {
  spec: KeySpec;
  mechanism: string;
  /** What pkcs11-tool reads: the message, or a digest / DigestInfo for the raw mechanisms. */
  input: (message: Buffer) => Buffer;
  /** The digest over the message the signature verifies with, and how. */
  md: string;
  pss?: boolean;
}

const sha = (alg: string, data: Buffer) => createHash(alg).update(data).digest();
const message = (m: Buffer) => m;

const CASES: Case[] = [
  {
    spec: 'RSA_2048',
    mechanism: 'RSA-PKCS',
    input: (m) => Buffer.concat([DIGEST_INFO_SHA256, sha('sha256', m)]),
    md: 'sha256',
  },
  { spec: 'RSA_2048', mechanism: 'SHA256-RSA-PKCS', input: message, md: 'sha256' },
  { spec: 'RSA_2048', mechanism: 'SHA384-RSA-PKCS', input: message, md: 'sha384' },
  { spec: 'RSA_2048', mechanism: 'SHA512-RSA-PKCS', input: message, md: 'sha512' },
  { spec: 'RSA_2048', mechanism: 'SHA256-RSA-PKCS-PSS', input: message, md: 'sha256', pss: true },
  { spec: 'RSA_2048', mechanism: 'SHA384-RSA-PKCS-PSS', input: message, md: 'sha384', pss: true },
  { spec: 'RSA_2048', mechanism: 'SHA512-RSA-PKCS-PSS', input: message, md: 'sha512', pss: true },
  ...(['ECC_NIST_P256', 'ECC_NIST_P384', 'ECC_NIST_P521'] as const).flatMap((spec): Case[] =>
    ['sha256', 'sha384', 'sha512'].flatMap((md): Case[] => [
      { spec, mechanism: 'ECDSA', input: (m) => sha(md, m), md },
      { spec, mechanism: `ECDSA-${md.toUpperCase()}`, input: message, md },
    ]),
  ),
];

describe('pkcs11-tool --sign', () => {
  it.each(CASES)('$spec with $mechanism: openssl verifies it with the service public key', (c) => {
    const { dir, env } = workDir(c.spec);
    writeFileSync(join(dir, 'input.bin'), c.input(MESSAGE));
    runSnippetOk('pkcs11-tool-sign', dir, { ...env, MECHANISM: c.mechanism, INPUT: 'input.bin' });
    const signature = readFileSync(join(dir, 'file.sig'));
    const ec = c.spec.startsWith('ECC');
    expect(opensslVerifies(dir, c.md, signature, { pss: c.pss, ec })).toBe(true);
    // The same check fails for a changed signature, so it is not vacuous.
    signature[signature.length - 1] = (signature[signature.length - 1] as number) ^ 1;
    expect(opensslVerifies(dir, c.md, signature, { pss: c.pss, ec })).toBe(false);
  });

  it('RSA-PKCS-PSS over a digest, with explicit parameters', () => {
    const { dir, env } = workDir('RSA_2048');
    writeFileSync(join(dir, 'file.digest'), sha('sha256', MESSAGE));
    runSnippetOk('pkcs11-tool-sign-pss', dir, env);
    const signature = readFileSync(join(dir, 'file.sig'));
    expect(opensslVerifies(dir, 'sha256', signature, { pss: true })).toBe(true);
    expect(opensslVerifies(dir, 'sha256', signature)).toBe(false); // not PKCS#1 v1.5
  });
});

describe('pkcs11-tool --list-mechanisms', () => {
  const RSA = ['RSA-PKCS', 'SHA256-RSA-PKCS', 'SHA384-RSA-PKCS', 'SHA512-RSA-PKCS'].flatMap((m) => [m, `${m}-PSS`]);
  const EC = ['ECDSA', 'ECDSA-SHA256', 'ECDSA-SHA384', 'ECDSA-SHA512'];

  it.each(SPECS)('%s: sign-only mechanisms, and each one the key may use is signed with above', (spec) => {
    const { dir, env } = workDir(spec);
    const out = runSnippetOk('pkcs11-tool-mechanisms', dir, env).stdout;
    const all = out.split('\n').filter((l) => l.startsWith('  '));
    // Besides signing, only the SHA-2 digests (SunPKCS11 needs them for RSASSA-PSS).
    const lines = all.filter((l) => !/^ {2}SHA(256|384|512), digest$/.test(l));
    expect(all.length - lines.length).toBe(3);
    expect(lines.every((l) => l.includes(', sign') && !/encrypt|decrypt|verify|derive|wrap/.test(l))).toBe(true);
    const listed = lines.map((l) => (l.trim().split(',')[0] as string).trim());
    expect(new Set(listed)).toEqual(new Set(spec.startsWith('RSA') ? RSA : EC));
    // Every mechanism listed signs (an EC key any SHA-2 digest).
    const usable = listed;
    const signed = CASES.filter((c) => c.spec === spec).map((c) => c.mechanism);
    if (spec === 'RSA_2048') signed.push('RSA-PKCS-PSS'); // the explicit-parameters test
    expect(new Set(signed)).toEqual(new Set(usable));
  });
});
