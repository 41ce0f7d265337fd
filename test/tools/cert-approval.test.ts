// `signbridge cert csr` when the policy asks for an approval: the command says which request waits, an approver
// approves it over the API meanwhile, and the command finishes with a request that verifies; a rejection ends it
// with exit 1. The build step's context comes from the same variables the module reads.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, createApiKeyCli } from '../helpers/cli.js';
import { type Stack, startStack, tenantFor } from '../module/harness.js';

let stack: Stack;
let approver: string;
const tenant = tenantFor('ECC_NIST_P256');

beforeAll(async () => {
  stack = await startStack(
    ['ECC_NIST_P256'],
    'version: 1\nrules:\n  projects: { allow: [payments] }\n  environments: { requireApproval: [production] }\n',
  );
  approver = createApiKeyCli(join(stack.dir, 'data'), 'approver', tenant);
});
afterAll(async () => {
  await stack?.close();
});

/**
 * Runs `cert csr` in the background; resolves the request id it prints, and its exit. Each test gets its own subject:
 * the same request again would be the same digest, which continues the earlier request (docs/policy.md).
 */
function csrWaitingForApproval(out: string, subject: string, env: NodeJS.ProcessEnv) {
  const child = spawn(
    process.execPath,
    [CLI, 'cert', 'csr', '--tenant', tenant, '--subject', subject, '--out', out, '--wait', '60'],
    { env: { ...process.env, SIGNBRIDGE_SOCKET: stack.socketPath, ...env } },
  );
  let stderr = '';
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const requestId = new Promise<string>((resolve, reject) => {
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      const m = /waiting: request ([0-9a-f-]{36}) is pending_approval/.exec(stderr);
      if (m) resolve(m[1] as string);
    });
    child.on('exit', () => reject(new Error(`cert csr ended without waiting:\n${stderr}`)));
  });
  return { requestId, exited, stderr: () => stderr };
}

const context = { SIGNBRIDGE_PROJECT: 'payments', SIGNBRIDGE_ENVIRONMENT: 'production' };

describe('signbridge cert csr and approvals', () => {
  it('waits for the approval, then writes a request that verifies', { timeout: 120_000 }, async () => {
    const out = join(mkdtempSync(join(stack.dir, 'csr-')), 'approved.csr');
    const run = csrWaitingForApproval(out, '/CN=needs approval', context);
    const approved = await stack.call('approve_sign', approver, { tenant_id: tenant, request_id: await run.requestId });
    expect(approved.status, JSON.stringify(approved.body)).toBe(200);
    expect(await run.exited, run.stderr()).toBe(0);
    const check = spawnSync('openssl', ['req', '-in', out, '-verify', '-noout'], { encoding: 'utf8' });
    expect(check.stdout + check.stderr).toMatch(/verify OK/);
  });

  it('a rejection ends the command with exit 1 and the reason, and writes nothing', { timeout: 120_000 }, async () => {
    const out = join(mkdtempSync(join(stack.dir, 'csr-')), 'rejected.csr');
    const run = csrWaitingForApproval(out, '/CN=to be rejected', context);
    const rejected = await stack.call('approve_sign', approver, {
      tenant_id: tenant,
      request_id: await run.requestId,
      decision: 'reject',
      reason: 'not this key',
    });
    expect(rejected.status).toBe(200);
    expect(await run.exited).toBe(1);
    expect(run.stderr()).toMatch(/REJECTED/);
    expect(existsSync(out)).toBe(false);
  });

  it('without the build context the policy denies, and the command says so', async () => {
    const r = spawnSync(process.execPath, [CLI, 'cert', 'csr', '--tenant', tenant, '--subject', '/CN=x'], {
      env: { ...process.env, SIGNBRIDGE_SOCKET: stack.socketPath, SIGNBRIDGE_PROJECT: '', SIGNBRIDGE_ENVIRONMENT: '' },
      encoding: 'utf8',
    });
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/POLICY_DENIED/);
    expect(r.stdout).toBe('');
  });
});
