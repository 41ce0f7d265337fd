// The `signbridge` CLI as a user runs it: a real process, real HTTP on an ephemeral port, real files.
import { createHash, createPublicKey, verify } from 'node:crypto';
import { readdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BUILT_IN_POLICY_TEXT } from '../../src/signing/policy-settings.js';
import { createApiKeyCli, postAction, runCli, type ServerProcess, startServerProcess } from '../helpers/cli.js';
import { makeTempDir } from '../helpers/service.js';
import { waitFor } from '../helpers/wait.js';

/**
 * The server's log line that mentions `text`. The ready line comes on stderr and the log on stdout: two pipes, so
 * the log line can reach the test after the ready line did.
 */
async function logLine(server: ServerProcess, text: string): Promise<string> {
  await waitFor(`a log line with "${text}"`, () => server.output().includes(text), 10_000);
  return server
    .output()
    .split('\n')
    .find((l) => l.includes(text)) as string;
}

const mode = (path: string) => statSync(path).mode & 0o777;

describe('signbridge admin', () => {
  const dataDir = makeTempDir();
  it('api-key create prints the key alone on stdout', () => {
    const op = runCli(['admin', 'api-key', 'create', '--data-dir', dataDir, '--role', 'operator']);
    expect(op.code, op.stderr).toBe(0);
    expect(op.stdout).toMatch(/^sbk_[0-9a-f]{16}_[A-Za-z0-9_-]{43}\n$/);
    const signer = runCli(['admin', 'api-key', 'create', '--role', 'signer', '--tenant', 'acme'], {
      SIGNBRIDGE_DATA_DIR: dataDir,
    });
    expect(signer.code, signer.stderr).toBe(0);
    expect(signer.stdout).toMatch(/^sbk_[0-9a-f]{16}_[A-Za-z0-9_-]{43}\n$/);
    const list = runCli(['admin', 'api-key', 'list', '--data-dir', dataDir]);
    expect(list.stdout.trim().split('\n')).toHaveLength(2);
    expect(list.stdout).not.toContain(signer.stdout.trim().slice(21));
  });

  it.each([
    [['--role', 'root'], /--role must be one of/],
    [['--role', 'signer'], /needs --tenant/],
    [['--role', 'operator', '--tenant', 'x'], /omit --tenant/],
    [['--role', 'admin', '--tenant', 'bad/tenant'], /not a valid tenant id/],
  ])('api-key create %j fails with a message and a non-zero exit', (args, message) => {
    const res = runCli(['admin', 'api-key', 'create', '--data-dir', dataDir, ...args]);
    expect(res.code).not.toBe(0);
    expect(res.stderr).toMatch(message);
    expect(res.stdout).toBe('');
  });

  it('revoke refuses an unknown id and revokes a known one', () => {
    expect(runCli(['admin', 'api-key', 'revoke', '0123456789abcdef', '--data-dir', dataDir]).code).not.toBe(0);
    const token = runCli([
      'admin',
      'api-key',
      'create',
      '--data-dir',
      dataDir,
      '--role',
      'admin',
      '--tenant',
      't',
    ]).stdout;
    const res = runCli(['admin', 'api-key', 'revoke', token.slice(4, 20), '--data-dir', dataDir]);
    expect(res.code, res.stderr).toBe(0);
    expect(runCli(['admin', 'api-key', 'list', '--data-dir', dataDir]).stdout).toMatch(/revoked/);
  });

  it('an unknown subcommand or a missing data dir fails clearly', () => {
    expect(runCli(['frobnicate']).code).not.toBe(0);
    const res = runCli(['admin', 'api-key', 'list'], { SIGNBRIDGE_DATA_DIR: '' });
    expect(res.code).not.toBe(0);
    expect(res.stderr).toMatch(/no data dir/);
  });
});

describe('signbridge server', () => {
  const dataDir = makeTempDir();
  let server: ServerProcess;
  let operator: string;
  beforeAll(async () => {
    operator = createApiKeyCli(dataDir, 'operator');
    server = await startServerProcess(['--data-dir', dataDir]);
  });
  afterAll(async () => {
    await server?.stop('SIGKILL');
  });

  const post = (action: string, token: string, body: Record<string, unknown>) =>
    postAction(server.url, action, token, body);

  it('logs the policy in force at start-up: the built-in default without a policy file, and its digest', async () => {
    const digest = createHash('sha256').update(BUILT_IN_POLICY_TEXT).digest('hex');
    const line = await logLine(server, 'policy in force');
    expect(JSON.parse(line)).toMatchObject({
      msg: 'policy in force: built-in default',
      policy: 'built-in default',
      policy_sha256: digest,
    });
  });

  it('serves health, readiness and the OpenAPI document', async () => {
    expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
    const ready = await fetch(`${server.url}/readyz`);
    expect(await ready.json()).toEqual({ status: 'ready', store: 'ok', key_store: 'ok' });
    const doc = await fetch(`${server.url}/api/openapi.yml`);
    expect(await doc.text()).toMatch(/^openapi: 3\.0\.0/);
  });

  it('creates a tenant and signs over real HTTP, with the key from the embedded SoftHSM token', async () => {
    const created = await post('create_tenant', operator, { tenant_id: 'cli', key_spec: 'ECC_NIST_P256' });
    expect(created.status).toBe(201);
    expect(created.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    const signer = createApiKeyCli(dataDir, 'signer', 'cli');
    const message = Buffer.from('over http');
    const res = await post('sign', signer, {
      tenant_id: 'cli',
      algorithm: 'ECDSA_SHA_256',
      hash: createHash('sha256').update(message).digest('base64url'),
    });
    expect(res.status).toBe(200);
    const signature = res.body.signature as string;
    const pub = await post('get_public_key', signer, { tenant_id: 'cli' });
    const pem = pub.body.public_key_pem as string;
    expect(verify('sha256', message, createPublicKey(pem), Buffer.from(signature, 'base64'))).toBe(true);
    expect(server.output()).not.toContain(signer.slice(21));
    expect(server.output()).not.toContain(operator.slice(21));
  });

  it('keeps its files private: folders 0700, database and PINs 0600', () => {
    expect(mode(dataDir)).toBe(0o700);
    expect(mode(join(dataDir, 'signbridge.db'))).toBe(0o600);
    expect(mode(join(dataDir, 'softhsm'))).toBe(0o700);
    expect(mode(join(dataDir, 'softhsm', 'tokens'))).toBe(0o700);
    for (const f of ['user.pin', 'so.pin', 'softhsm2.conf']) expect(mode(join(dataDir, 'softhsm', f)), f).toBe(0o600);
    for (const f of readdirSync(dataDir).filter((n) => n.startsWith('signbridge.db'))) {
      expect(mode(join(dataDir, f)), f).toBe(0o600);
    }
  });

  it('keeps tenants and keys across a restart, and shuts down cleanly on SIGTERM', async () => {
    expect(await server.stop('SIGTERM')).toBe(0);
    server = await startServerProcess(['--data-dir', dataDir]);
    const signer = createApiKeyCli(dataDir, 'signer', 'cli');
    const res = await post('sign', signer, {
      tenant_id: 'cli',
      algorithm: 'ECDSA_SHA_256',
      hash: Buffer.alloc(32, 5).toString('base64'),
    });
    expect(res.status).toBe(200);
  });

  it('names a policy file in force and the SHA-256 of its bytes', async () => {
    const dir = makeTempDir();
    const policyFile = join(dir, 'policy.yaml');
    const text = 'version: 1\nrules:\n  denyInactiveIdentities: true\n  projects: { deny: [legacy] }\n';
    writeFileSync(policyFile, text);
    const other = await startServerProcess(['--data-dir', join(dir, 'data')], { SIGNBRIDGE_POLICY_FILE: policyFile });
    try {
      const line = await logLine(other, 'policy in force');
      expect(JSON.parse(line)).toMatchObject({
        policy: policyFile,
        policy_sha256: createHash('sha256').update(text).digest('hex'),
      });
    } finally {
      await other.stop('SIGKILL');
    }
  });

  it('refuses to start on a bad configuration, saying what is wrong', () => {
    const file = join(makeTempDir(), 'bad.yaml');
    writeFileSync(file, 'dataDir: /tmp/x\nkeyStore: {type: hsm}\n');
    const res = runCli(['server', '--config', file]);
    expect(res.code).not.toBe(0);
    expect(res.stderr).toContain('bad.yaml');
  });
});
