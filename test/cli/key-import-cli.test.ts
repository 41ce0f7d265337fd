// `signbridge key import` against a real service process: key files as users have them (PKCS#1, SEC 1, PKCS#8 PEM
// and DER, ML-DSA, SM2), wrapped by the CLI in Node, imported, and proven by a signature verified with the file's
// public half; errors with a message and a non-zero exit.

import { createPrivateKey } from 'node:crypto';
import { chmodSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiKeyCli, postAction, type ServerProcess, startServerProcess } from '../helpers/cli.js';
import { loginEnv, runCliChild } from '../helpers/cli-child.js';
import { material, mlDsaMaterial, sm2Material } from '../helpers/key-import.js';

const dir = mkdtempSync(join(tmpdir(), 'signbridge-key-import-cli-'));
const dataDir = join(dir, 'data');
let server: ServerProcess;
let adminFile: string;
let signerFile: string;
let operator: string;

function keyFile(name: string, content: string | Buffer, mode = 0o600): string {
  const path = join(dir, name);
  writeFileSync(path, content);
  chmodSync(path, mode);
  return path;
}

beforeAll(async () => {
  server = await startServerProcess(['--data-dir', dataDir]);
  operator = createApiKeyCli(dataDir, 'operator');
  for (const t of ['cli-a', 'cli-b']) {
    const made = await postAction(server.url, 'create_tenant', operator, { tenant_id: t, key_spec: 'ECC_NIST_P256' });
    expect(made.status).toBe(201);
  }
  adminFile = keyFile('admin.key', createApiKeyCli(dataDir, 'admin', 'cli-a'));
  signerFile = keyFile('signer.key', createApiKeyCli(dataDir, 'signer', 'cli-a'));
}, 60_000);
afterAll(async () => {
  await server?.stop();
});

function importCli(args: string[]) {
  return runCliChild(
    ['key', 'import', '--service-url', server.url, '--api-key-file', adminFile, '--tenant', 'cli-a', ...args],
    loginEnv(dir),
  );
}

describe('signbridge key import', () => {
  it.each([
    [
      'RSA_2048 as PKCS#1 PEM',
      () => {
        const m = material('RSA_2048');
        return {
          m,
          file: createPrivateKey({ key: m.pkcs8, format: 'der', type: 'pkcs8' }).export({
            type: 'pkcs1',
            format: 'pem',
          }),
        };
      },
      [],
    ],
    [
      'ECC_NIST_P384 as SEC 1 DER, RSAES_OAEP_SHA_1 under RSA_2048, expiring',
      () => {
        const m = material('ECC_NIST_P384');
        return {
          m,
          file: createPrivateKey({ key: m.pkcs8, format: 'der', type: 'pkcs8' }).export({
            type: 'sec1',
            format: 'der',
          }),
        };
      },
      ['--wrapping-algorithm', 'RSAES_OAEP_SHA_1', '--wrapping-key-spec', 'RSA_2048', '--expires-in', '30d'],
    ],
    [
      'ML_DSA_65 as PKCS#8 PEM',
      () => {
        const m = mlDsaMaterial('ML_DSA_65');
        return { m, file: `-----BEGIN PRIVATE KEY-----\n${m.pkcs8.toString('base64')}\n-----END PRIVATE KEY-----\n` };
      },
      [],
    ],
    [
      'SM2 as PKCS#8 DER, RSA_AES_KEY_WRAP_SHA_1',
      () => {
        const m = sm2Material();
        return { m, file: m.pkcs8 };
      },
      ['--wrapping-algorithm', 'RSA_AES_KEY_WRAP_SHA_1', '--wrapping-key-spec', 'RSA_2048'],
    ],
  ] as const)('%s: imported, current, proven', async (_name, make, extra) => {
    const { m, file } = make();
    const path = keyFile(`key-${m.spec}`, file as string | Buffer);
    const res = await importCli(['--key-file', path, '--signer-api-key-file', signerFile, ...extra]);
    expect(res.code, res.stderr + res.stdout).toBe(0);
    expect(res.stdout).toMatch(new RegExp(`key file: ${m.spec} private key`));
    expect(res.stdout).toMatch(/imported: key \S+ \(.*\) is the current key of tenant cli-a/);
    expect(res.stdout).toMatch(/proven: a \S+ signature by key \S+ verifies/);
    if ((extra as readonly string[]).includes('--expires-in')) expect(res.stdout).toMatch(/material expires 20/);
    const pub = await postAction(server.url, 'get_public_key', createApiKeyCli(dataDir, 'admin', 'cli-a'), {
      tenant_id: 'cli-a',
    });
    expect(pub.body.key_spec).toBe(m.spec);
    expect(pub.body.public_key_pem).toBe(m.publicKeyPem);
  });

  it('--kms-key-id imports the same material again; other material is refused', async () => {
    const first = material('ECC_NIST_P256');
    const path = keyFile('again.der', first.pkcs8);
    const res = await importCli(['--key-file', path, '--signer-api-key-file', signerFile, '--expires-in', '1d']);
    expect(res.code, res.stderr).toBe(0);
    const id = /imported: key (\S+)/.exec(res.stdout)?.[1] as string;
    const other = keyFile('other.der', material('ECC_NIST_P256').pkcs8);
    const refused = await importCli(['--key-file', other, '--kms-key-id', id]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/import_key failed: incorrect_key_material/);
    const again = await importCli(['--key-file', path, '--kms-key-id', id, '--signer-api-key-file', signerFile]);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toMatch(
      new RegExp(`imported: key ${id} .*\\(the same material again\\), material does not expire`),
    );
  });

  it('an admin key that may not sign: imported, not proven, exit 2', async () => {
    const path = keyFile(
      'p256.pem',
      createPrivateKey({ key: material('ECC_NIST_P256').pkcs8, format: 'der', type: 'pkcs8' }).export({
        type: 'pkcs8',
        format: 'pem',
      }),
    );
    const res = await importCli(['--key-file', path]);
    expect(res.code, res.stderr).toBe(2);
    expect(res.stdout).toMatch(/imported: key/);
    expect(res.stdout).toMatch(/not proven: this API key may not sign for cli-a .*--signer-api-key-file/);
  });

  it.each([
    ['a missing key file', ['--key-file', join(dir, 'nope.pem')], /nope\.pem: ENOENT/],
    [
      'a key spec the file is not',
      ['--key-file', 'RSA', '--key-spec', 'RSA_3072'],
      /holds a RSA_2048 key, not RSA_3072/,
    ],
    [
      'RSA material with RSAES_OAEP_SHA_256',
      ['--key-file', 'RSA', '--wrapping-algorithm', 'RSAES_OAEP_SHA_256'],
      /wrapping_algorithm_not_allowed: RSA private keys/,
    ],
    [
      'an unknown wrapping algorithm',
      ['--key-file', 'RSA', '--wrapping-algorithm', 'RSAES_PKCS1_V1_5'],
      /--wrapping-algorithm must be one of/,
    ],
    ['a public key', ['--key-file', 'PUB'], /holds a PEM "PUBLIC KEY", not a private key/],
  ])('%s: a message and exit 1', async (_name, args, message) => {
    const rsa = material('RSA_2048');
    const files: Record<string, string> = {
      RSA: keyFile(
        'rsa.pem',
        createPrivateKey({ key: rsa.pkcs8, format: 'der', type: 'pkcs8' }).export({
          type: 'pkcs8',
          format: 'pem',
        }) as string,
      ),
      PUB: keyFile('pub.pem', rsa.publicKeyPem),
    };
    const res = await importCli(args.map((a) => files[a] ?? a));
    expect(res.code).toBe(1);
    expect(res.stderr).toMatch(message);
  });

  it('another tenant than the admin key is for: 403, exit 1, nothing imported', async () => {
    const path = keyFile('p256b.der', material('ECC_NIST_P256').pkcs8);
    const res = await runCliChild(
      [
        'key',
        'import',
        '--service-url',
        server.url,
        '--api-key-file',
        adminFile,
        '--tenant',
        'cli-b',
        '--key-file',
        path,
      ],
      loginEnv(dir),
    );
    expect(res.code).toBe(1);
    expect(res.stderr).toMatch(/get_import_params failed: forbidden/);
  });
});
