// The manual import route of docs/keys.md, run as written: plain openssl (OpenSSL 3.0's enc -id-aes256-wrap-pad
// and pkeyutl OAEP), curl and jq against a real service process; then a signature through the service verifies
// with the public half of the key openssl made.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packagePath } from '../../src/paths.js';
import { createApiKeyCli, postAction, type ServerProcess, startServerProcess } from '../helpers/cli.js';
import { runSnippetOk } from '../helpers/doc-snippets.js';

const KEYS_DOC = packagePath('docs', 'keys.md');
const dir = mkdtempSync(join(tmpdir(), 'signbridge-import-docs-'));
let server: ServerProcess;
let operator: string;

beforeAll(async () => {
  server = await startServerProcess(['--data-dir', join(dir, 'data')]);
  operator = createApiKeyCli(join(dir, 'data'), 'operator');
}, 60_000);
afterAll(async () => {
  await server?.stop();
});

describe('docs/keys.md: import by hand with openssl', () => {
  it.each([
    ['import-rsa-aes-key-wrap-sha256', 'RSA_2048', 'RSASSA_PKCS1_V1_5_SHA_256'],
    ['import-ec-rsaes-oaep-sha1', 'ECC_NIST_P256', 'ECDSA_SHA_256'],
  ])('%s imports a %s key that then signs as %s, verified by openssl', async (snippet, spec, algorithm) => {
    const tenant = `docs-${spec.toLowerCase().replaceAll('_', '-')}`;
    const made = await postAction(server.url, 'create_tenant', operator, {
      tenant_id: tenant,
      key_spec: 'ECC_NIST_P384',
    });
    expect(made.status).toBe(201);
    const env = {
      SERVICE: server.url,
      TENANT: tenant,
      ADMIN: createApiKeyCli(join(dir, 'data'), 'admin', tenant),
      SIGNER: createApiKeyCli(join(dir, 'data'), 'signer', tenant),
      ALGORITHM: algorithm,
    };
    const cwd = mkdtempSync(join(dir, 'run-'));
    const imported = runSnippetOk(snippet, cwd, env, 120_000, KEYS_DOC);
    const answer = JSON.parse(imported.stdout) as Record<string, unknown>;
    expect(answer).toMatchObject({ key_spec: spec, current: true, reimport: false });
    const verified = runSnippetOk('import-verify', cwd, env, 60_000, KEYS_DOC);
    expect(verified.stdout).toMatch(/Verified OK/);
    const pub = await postAction(server.url, 'get_public_key', env.ADMIN, { tenant_id: tenant });
    expect(pub.body.key_id).toBe(answer.imported);
  });
});
