// The commands and programs of docs/keys.md, run as written against a real service: μ and SM3(Z_A || M) computed
// with OpenSSL 3.0 and with the Node program agree with each other and with `signbridge digest`; signatures
// requested with curl verify with the documented verifiers (OpenSSL with distid for SM2, noble for ML-DSA), which
// refuse a changed file; `signbridge sign` as documented. Ed25519: the SHA-512 request, and the noble program
// that verifies the Ed25519ph signature over the file.
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mlDsaMu, sm2Digest } from '../../src/crypto/message-representatives.js';
import { parseMlDsaSpki, parseSm2Spki } from '../../src/crypto/spki.js';
import { packagePath } from '../../src/paths.js';
import { createApiKeyCli, postAction, type ServerProcess, startServerProcess } from '../helpers/cli.js';
import { loginEnv } from '../helpers/cli-child.js';
import { docSnippet, pathWithSignbridge } from '../helpers/doc-snippets.js';
import { makeTempDir } from '../helpers/service.js';

const KEYS_DOC = packagePath('docs', 'keys.md');
const dir = makeTempDir('sb-keys-doc-');
const dataDir = join(dir, 'data');
let server: ServerProcess;
const signers = new Map<string, string>();

beforeAll(async () => {
  server = await startServerProcess(['--data-dir', dataDir]);
  const operator = createApiKeyCli(dataDir, 'operator');
  for (const [tenant, spec] of [
    ['doc-mldsa', 'ML_DSA_65'],
    ['doc-sm2', 'SM2'],
    ['doc-ed25519', 'ECC_NIST_EDWARDS25519'],
  ]) {
    const created = await postAction(server.url, 'create_tenant', operator, { tenant_id: tenant, key_spec: spec });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    signers.set(tenant as string, createApiKeyCli(dataDir, 'signer', tenant));
  }
}, 120_000);
afterAll(async () => {
  await server?.stop();
});

/** A folder for one tenant's run, with release.bin and the packages the Node programs import. */
function workDir(name: string): string {
  const cwd = join(dir, name);
  mkdirSync(cwd);
  symlinkSync(packagePath('node_modules'), join(cwd, 'node_modules'));
  // Bigger than one read of every streaming reader involved.
  writeFileSync(join(cwd, 'release.bin'), Buffer.alloc(3 * 1024 * 1024 + 5, 'release 1.0\n'));
  return cwd;
}

function env(tenant: string): NodeJS.ProcessEnv {
  return {
    ...loginEnv(dir),
    PATH: pathWithSignbridge(),
    TENANT: tenant,
    SIGNBRIDGE_SERVICE_URL: server.url,
    SIGNBRIDGE_API_KEY: signers.get(tenant) as string,
  };
}

function sh(id: string, cwd: string, tenant: string) {
  const res = spawnSync('bash', ['-euo', 'pipefail', '-c', docSnippet(id, KEYS_DOC)], {
    cwd,
    env: { ...process.env, ...env(tenant) },
    encoding: 'utf8',
    timeout: 120_000,
  });
  return { code: res.status, stdout: res.stdout, stderr: res.stderr };
}

function shOk(id: string, cwd: string, tenant: string) {
  const res = sh(id, cwd, tenant);
  if (res.code !== 0) throw new Error(`snippet ${id} exited with ${res.code}\n${res.stdout}\n${res.stderr}`);
  return res;
}

/** A program of the page, saved as `file` and run with node. */
function node(id: string, file: string, cwd: string, args: string[]) {
  writeFileSync(join(cwd, file), docSnippet(id, KEYS_DOC));
  const res = spawnSync(process.execPath, [file, ...args], { cwd, encoding: 'utf8', timeout: 120_000 });
  return { code: res.status, stdout: res.stdout, stderr: res.stderr };
}

const requestHash = (cwd: string) =>
  (JSON.parse(readFileSync(join(cwd, 'sign-request.json'), 'utf8')) as { hash: string; algorithm: string }).hash;

describe('ML-DSA-65', () => {
  const tenant = 'doc-mldsa';
  it('μ from openssl, from the Node program and from signbridge agree; the curl signature verifies', () => {
    const cwd = workDir('mldsa');
    shOk('keys-get-public-key', cwd, tenant);
    shOk('keys-mu-openssl', cwd, tenant);
    const viaOpenssl = requestHash(cwd);
    const pk = parseMlDsaSpki(readFileSync(join(cwd, 'pub.der')))?.publicKey as Buffer;
    expect(viaOpenssl).toBe(mlDsaMu(pk, [readFileSync(join(cwd, 'release.bin'))]).toString('base64'));
    const program = node('keys-representative-node', 'representative.mjs', cwd, ['pub.der', 'release.bin']);
    expect(program.code, program.stderr).toBe(0);
    expect(JSON.parse(program.stdout)).toEqual({ algorithm: 'ML_DSA_SHAKE_256', hash: viaOpenssl });

    shOk('keys-sign-curl', cwd, tenant);
    expect(readFileSync(join(cwd, 'release.bin.sig'))).toHaveLength(3309);
    const verified = node('keys-verify-ml-dsa-node', 'verify-ml-dsa.mjs', cwd, [
      'pub.der',
      'release.bin',
      'release.bin.sig',
    ]);
    expect(verified.code, verified.stderr).toBe(0);
    expect(verified.stdout).toContain('Signature Verified Successfully');
    writeFileSync(join(cwd, 'other.bin'), 'another file');
    const refused = node('keys-verify-ml-dsa-node', 'verify-ml-dsa.mjs', cwd, [
      'pub.der',
      'other.bin',
      'release.bin.sig',
    ]);
    expect(refused.code).toBe(1);
    expect(refused.stdout).toContain('Signature Verification Failure');
  });

  it('signbridge sign and digest as documented', () => {
    const cwd = workDir('mldsa-cli');
    shOk('keys-sign-file', cwd, tenant);
    shOk('keys-get-public-key', cwd, tenant);
    const pk = parseMlDsaSpki(readFileSync(join(cwd, 'pub.der')))?.publicKey as Buffer;
    expect(requestHash(cwd)).toBe(mlDsaMu(pk, [readFileSync(join(cwd, 'release.bin'))]).toString('base64'));
    const verified = node('keys-verify-ml-dsa-node', 'verify-ml-dsa.mjs', cwd, [
      'pub.der',
      'release.bin',
      'release.bin.sig',
    ]);
    expect(verified.code, verified.stderr).toBe(0);
  });
});

describe('SM2', () => {
  const tenant = 'doc-sm2';
  it('SM3(Z_A || M) from openssl, from the Node program and from signbridge agree; openssl verifies with distid', () => {
    const cwd = workDir('sm2');
    shOk('keys-get-public-key', cwd, tenant);
    shOk('keys-sm2-openssl', cwd, tenant);
    const viaOpenssl = requestHash(cwd);
    const point = parseSm2Spki(readFileSync(join(cwd, 'pub.der'))) as Buffer;
    expect(viaOpenssl).toBe(sm2Digest(point, [readFileSync(join(cwd, 'release.bin'))]).toString('base64'));
    const program = node('keys-representative-node', 'representative.mjs', cwd, ['pub.der', 'release.bin']);
    expect(program.code, program.stderr).toBe(0);
    expect(JSON.parse(program.stdout)).toEqual({ algorithm: 'SM2DSA', hash: viaOpenssl });

    shOk('keys-sign-curl', cwd, tenant);
    const verified = shOk('keys-sm2-verify', cwd, tenant);
    expect(verified.stdout).toContain('Signature Verified Successfully'); // pkeyutl
    expect(verified.stdout).toContain('Verified OK'); // dgst
    // OpenSSL's default (empty) ID fails, and so does a changed file.
    const emptyId = spawnSync(
      'openssl',
      ['pkeyutl', '-verify', '-pubin', '-inkey', 'pub.pem', '-rawin', '-digest', 'sm3', '-in', 'release.bin'].concat([
        '-sigfile',
        'release.bin.sig',
      ]),
      { cwd, encoding: 'utf8' },
    );
    expect(emptyId.stdout).toContain('Signature Verification Failure');
    writeFileSync(join(cwd, 'release.bin'), 'a changed release');
    expect(sh('keys-sm2-verify', cwd, tenant).code).not.toBe(0);
  });

  it('signbridge sign as documented writes a signature openssl verifies with distid', () => {
    const cwd = workDir('sm2-cli');
    shOk('keys-sign-file', cwd, tenant);
    shOk('keys-get-public-key', cwd, tenant);
    const point = parseSm2Spki(readFileSync(join(cwd, 'pub.der'))) as Buffer;
    expect(requestHash(cwd)).toBe(sm2Digest(point, [readFileSync(join(cwd, 'release.bin'))]).toString('base64'));
    const verified = shOk('keys-sm2-verify', cwd, tenant);
    expect(verified.stdout).toContain('Signature Verified Successfully');
  });
});

describe('Ed25519', () => {
  const tenant = 'doc-ed25519';
  it("the SHA-512 request signs as Ed25519ph: the page's program verifies it over the file, not another file", () => {
    const cwd = workDir('ed25519');
    shOk('keys-get-public-key', cwd, tenant);
    shOk('keys-ed25519ph-request', cwd, tenant);
    const request = JSON.parse(readFileSync(join(cwd, 'sign-request.json'), 'utf8')) as { algorithm: string };
    expect(request.algorithm).toBe('ED25519_PH_SHA_512');
    expect(Buffer.from(requestHash(cwd), 'base64')).toHaveLength(64);
    shOk('keys-sign-curl', cwd, tenant);
    expect(readFileSync(join(cwd, 'release.bin.sig'))).toHaveLength(64);
    const args = ['pub.pem', 'release.bin', 'release.bin.sig'];
    const verified = node('keys-verify-ed25519ph-node', 'verify-ed25519ph.mjs', cwd, args);
    expect(verified.code, verified.stderr).toBe(0);
    expect(verified.stdout).toContain('Signature Verified Successfully');
    writeFileSync(join(cwd, 'other.bin'), 'another file');
    const refused = node('keys-verify-ed25519ph-node', 'verify-ed25519ph.mjs', cwd, [
      'pub.pem',
      'other.bin',
      'release.bin.sig',
    ]);
    expect(refused.code).toBe(1);
  });
});
