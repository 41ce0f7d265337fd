// Policy from the command line: `admin policy check`, and a server started with a policy file.
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { createApiKeyCli, postAction, runCli, type ServerProcess, startServerProcess } from '../helpers/cli.js';
import { makeTempDir } from '../helpers/service.js';

const dir = makeTempDir('sb-policy-');
const good = join(dir, 'policy.yaml');
writeFileSync(
  good,
  'version: 1\nrules:\n  environments: { requireApproval: [production] }\ntenants:\n  acme: { projects: { allow: [web] } }\napprovals: { lifetimeHours: 2 }\n',
);
const bad = join(dir, 'bad.yaml');
writeFileSync(bad, 'version: 1\nrules:\n  environments: { requireApproval: production }\n');

describe('signbridge admin policy check', () => {
  it('accepts a valid document and summarises it', () => {
    const res = runCli(['admin', 'policy', 'check', good]);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).toContain('valid policy (version 1; 1 tenant override(s): acme)');
  });
  it('rejects an invalid document with file, path and problem, and a non-zero exit', () => {
    const res = runCli(['admin', 'policy', 'check', bad]);
    expect(res.code).not.toBe(0);
    expect(res.stderr).toContain(`${bad}: /rules/environments/requireApproval`);
    expect(runCli(['admin', 'policy', 'check', join(dir, 'missing.yaml')]).stderr).toContain('cannot read');
  });
});

describe('a server with a policy file', () => {
  let server: ServerProcess | undefined;
  afterAll(async () => {
    await server?.stop();
  });

  it('refuses to start with an invalid policy', () => {
    const res = runCli(['server', '--data-dir', join(dir, 'd0'), '--listen', '127.0.0.1:0'], {
      SIGNBRIDGE_POLICY_FILE: bad,
    });
    expect(res.code).not.toBe(0);
    expect(res.stderr).toContain('/rules/environments/requireApproval');
  });

  it('holds production signatures for approval (202) and signs staging at once', async () => {
    const dataDir = join(dir, 'd1');
    const config = join(dir, 'server.yaml');
    writeFileSync(config, `dataDir: ${dataDir}\npolicyFile: ${good}\n`);
    server = await startServerProcess(['--config', config]);
    const operator = createApiKeyCli(dataDir, 'operator');
    const call = (action: string, token: string, body: object) => postAction(server?.url ?? '', action, token, body);
    expect((await call('create_tenant', operator, { tenant_id: 'ops', key_spec: 'ECC_NIST_P256' })).status).toBe(201);
    const signer = createApiKeyCli(dataDir, 'signer', 'ops');
    const hash = createHash('sha256').update('x').digest('base64');
    const body = { tenant_id: 'ops', algorithm: 'ECDSA_SHA_256', hash };
    expect((await call('sign', signer, { ...body, environment: 'staging' })).status).toBe(200);
    const prod = await call('sign', signer, { ...body, environment: 'production' });
    expect(prod.status).toBe(202);
    const pending = prod.body as { request_id: string; status: string };
    expect(pending.status).toBe('pending_approval');
    // approvals.lifetimeHours from the policy file sets the request's lifetime.
    const store = openSqliteStore(join(dataDir, 'signbridge.db'));
    const record = await store.requests.get('ops', pending.request_id);
    await store.close();
    expect(Date.parse(record?.expiresAt as string) - Date.parse(record?.createdAt as string)).toBe(2 * 3_600_000);
  });
});
