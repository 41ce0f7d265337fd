// `signbridge audit prove --signature` with what the PKCS#11 module hands out: pkcs11-tool signs with a P-256 key
// through the module (raw r‖s, as CKM_ECDSA returns it), and the proof is looked up from that file. The log names
// the signature by the SHA-256 of its DER form (what the service returned to the daemon); the outside evaluation
// found that the raw file was "not yet logged?" for good.
import { execFileSync } from 'node:child_process';
import { createHash, createPublicKey, verify } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ckaIdFor } from '../../daemon/key-id.js';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import { runCli } from '../helpers/cli.js';
import { type Stack, startStack, tenantFor } from './harness.js';

const TENANT = tenantFor('ECC_NIST_P256');
let stack: Stack;

beforeAll(async () => {
  stack = await startStack(['ECC_NIST_P256']);
}, 180_000);
afterAll(async () => stack?.close());

describe('audit prove --signature with a signature made through the PKCS#11 module', () => {
  it('finds and proves the raw r||s file pkcs11-tool wrote', async () => {
    const message = join(stack.dir, 'artifact.bin');
    writeFileSync(message, 'signed through the module, proved by its raw signature\n');
    const digest = createHash('sha256').update(readFileSync(message)).digest();
    const sig = join(stack.dir, 'artifact.sig');
    writeFileSync(`${sig}.in`, digest);
    const id = ckaIdFor(stack.keyIds.get(TENANT) as string).toString('hex');
    execFileSync(
      'pkcs11-tool',
      ['--module', MODULE_PATH, '--sign', '--id', id, '-m', 'ECDSA', '--input-file', `${sig}.in`, '--output-file', sig],
      { env: { ...process.env, SIGNBRIDGE_SOCKET: stack.socketPath }, stdio: 'pipe' },
    );
    const raw = readFileSync(sig);
    expect(raw.length).toBe(64); // r‖s, not DER
    const pub = createPublicKey(stack.publicKeys.get(TENANT) as string);
    expect(verify('sha256', readFileSync(message), { key: pub, dsaEncoding: 'ieee-p1363' }, raw)).toBe(true);

    const published = await fetch(`${stack.server.url}/log/checkpoint`, {
      method: 'POST',
      headers: { authorization: `Bearer ${stack.operator}` },
    });
    expect(published.status, await published.text()).toBe(200);
    const vkey = (
      await (
        await fetch(`${stack.server.url}/log/public-key`, { headers: { authorization: `Bearer ${stack.operator}` } })
      ).text()
    ).trim();
    const signer = readFileSync(join(stack.dir, 'keys', TENANT), 'utf8').trim();
    const env = { SIGNBRIDGE_SERVICE_URL: stack.server.url, SIGNBRIDGE_API_KEY: signer, HOME: stack.dir };
    const proved = runCli(['audit', 'prove', '--tenant', TENANT, '--signature', sig, '--public-key', vkey], env);
    expect(proved.code, proved.stderr).toBe(0);
    expect(proved.stdout).toContain('verified:   the entry is in the log');
    expect(proved.stdout).toContain(`digest ${digest.toString('base64')}`);

    // Saved and checked offline: the bundle ties the entry to the same raw file.
    const bundle = join(stack.dir, 'artifact.proof');
    const saved = runCli(
      ['audit', 'prove', '--tenant', TENANT, '--signature', sig, '--public-key', vkey, '--out', bundle],
      env,
    );
    expect(saved.code, saved.stderr).toBe(0);
    const offline = runCli(
      ['audit', 'prove', '--tenant', TENANT, '--signature', sig, '--public-key', vkey, '--bundle', bundle],
      env,
    );
    expect(offline.code, offline.stderr).toBe(0);

    // Another 64-byte file is still not found.
    const other = join(stack.dir, 'other.sig');
    writeFileSync(other, Buffer.from(raw).fill(7, 0, 8));
    const missing = runCli(['audit', 'prove', '--tenant', TENANT, '--signature', other, '--public-key', vkey], env);
    expect(missing.code, missing.stderr).toBe(1);
    expect(missing.stderr).toContain('no log entry');
  });
});
