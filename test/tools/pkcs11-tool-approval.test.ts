// pkcs11-tool signing through the module when the policy holds the signature for approval: by default the module
// prints ONE line to stderr when the signature starts to wait (tenant, request id, status, and the console page
// where it can be approved), not one per poll; an approver approves meanwhile and pkcs11-tool writes a signature
// that verifies. SIGNBRIDGE_LOG=off silences the line, as it silences the denial notice.
import { spawn } from 'node:child_process';
import { createPublicKey, verify } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import { openSqlite } from '../../src/store/sqlite/sqlite-driver.js';
import { createApiKeyCli } from '../helpers/cli.js';
import { type Stack, startStack, tenantFor } from '../module/harness.js';

let stack: Stack;
let approver: string;
const tenant = tenantFor('ECC_NIST_P256');
const PUBLIC_URL = 'https://signing.example.test';
const MESSAGE = Buffer.from('release build waiting for an approver\n');

beforeAll(async () => {
  stack = await startStack(
    ['ECC_NIST_P256'],
    'version: 1\nrules:\n  projects: { allow: [payments] }\n  environments: { requireApproval: [production] }\n',
    // People reach the console at the public URL, which is not the address the daemon uses.
    { SIGNBRIDGE_PUBLIC_URL: PUBLIC_URL },
  );
  approver = createApiKeyCli(join(stack.dir, 'data'), 'approver', tenant);
}, 120_000);
afterAll(async () => {
  await stack?.close();
});

/** `pkcs11-tool --sign` of MESSAGE in the background, its stderr as it comes, and its exit. */
function pkcs11ToolSign(dir: string, env: NodeJS.ProcessEnv, message = MESSAGE) {
  writeFileSync(join(dir, 'file.txt'), message);
  const child = spawn(
    'pkcs11-tool',
    [
      '--module',
      MODULE_PATH,
      '--token-label',
      tenant,
      '--sign',
      '--mechanism',
      'ECDSA-SHA256',
      '--input-file',
      join(dir, 'file.txt'),
      '--output-file',
      join(dir, 'file.sig'),
    ],
    {
      env: {
        ...process.env,
        SIGNBRIDGE_SOCKET: stack.socketPath,
        SIGNBRIDGE_PROJECT: 'payments',
        SIGNBRIDGE_ENVIRONMENT: 'production',
        SIGNBRIDGE_POLL_INTERVAL_MS: '200',
        SIGNBRIDGE_APPROVAL_TIMEOUT: '300',
        ...env,
      },
    },
  );
  let stderr = '';
  child.stderr.on('data', (c: Buffer) => {
    stderr += c.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { stderr: () => stderr, exited };
}

/** Polls `read` (with a long deadline, never a timing assertion) until it yields a value. */
async function eventually<T>(read: () => T | undefined, what: string): Promise<T> {
  for (let i = 0; i < 1200; i++) {
    const v = read();
    if (v !== undefined) return v;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`never saw ${what}`);
}

/** Polls the module's log until it has said `n` times that the request is still pending (n POLLs answered). */
const stillPendingTimes = (logFile: string, n: number) =>
  eventually(() => {
    const log = existsSync(logFile) ? readFileSync(logFile, 'utf8') : '';
    return (log.match(/still pending_approval/g) ?? []).length >= n ? true : undefined;
  }, `${n} polls in the module's log`);

describe('pkcs11-tool and a signature held for approval', () => {
  it('prints one line saying where to approve, once, and signs after the approval', { timeout: 300_000 }, async () => {
    const dir = mkdtempSync(join(stack.dir, 'approval-'));
    const logFile = join(dir, 'module.log');
    // The log goes to a file (as in CI); the notice still goes to stderr.
    const run = pkcs11ToolSign(dir, { SIGNBRIDGE_LOG: `info:${logFile}` });
    const line = await eventually(
      () => /^signbridge: signature for tenant .* waits for approval: .*$/m.exec(run.stderr())?.[0],
      'the waiting notice on stderr',
    );
    const requestId = /request ([0-9a-f-]{36}) \(pending_approval\)/.exec(line)?.[1];
    expect(requestId, line).toBeDefined();
    expect(line).toContain(
      `signature for tenant ${tenant} waits for approval: request ${requestId} (pending_approval)`,
    );
    // The service's own page for it (its 202's approve_url, under the public URL).
    expect(line).toContain(`approve it at ${PUBLIC_URL}/console/requests#req-${requestId}`);
    // Several polls go by before anyone decides: the line is not repeated for them.
    await stillPendingTimes(logFile, 3);
    const approved = await stack.call('approve_sign', approver, { tenant_id: tenant, request_id: requestId as string });
    expect(approved.status, JSON.stringify(approved.body)).toBe(200);
    expect(await run.exited, run.stderr()).toBe(0);
    expect(run.stderr().match(/waits for approval/g)).toHaveLength(1);
    const signature = readFileSync(join(dir, 'file.sig'));
    const key = createPublicKey(stack.publicKeys.get(tenant) as string);
    expect(verify('sha256', MESSAGE, { key, dsaEncoding: 'ieee-p1363' }, signature)).toBe(true);
  });

  it('says nothing with SIGNBRIDGE_LOG=off', { timeout: 300_000 }, async () => {
    const dir = mkdtempSync(join(stack.dir, 'approval-off-'));
    // Another artifact: the same digest from the same caller would get the first test's approved signature at once
    // (a retry within the window continues its request, docs/policy.md).
    const run = pkcs11ToolSign(dir, { SIGNBRIDGE_LOG: 'off' }, Buffer.from('another release build\n'));
    // With the log off, the approver finds the request in the service's database (what the console lists).
    const requestId = await eventually(() => {
      const db = openSqlite(join(stack.dir, 'data', 'signbridge.db'), { readonly: true });
      try {
        const row = db
          .prepare("SELECT id FROM pending_requests WHERE tenant_id = ? AND status = 'pending_approval'")
          .get(tenant) as { id: string } | undefined;
        return row?.id;
      } finally {
        db.close();
      }
    }, 'the pending request');
    const approved = await stack.call('approve_sign', approver, { tenant_id: tenant, request_id: requestId });
    expect(approved.status, JSON.stringify(approved.body)).toBe(200);
    expect(await run.exited, run.stderr()).toBe(0);
    expect(run.stderr()).not.toMatch(/signbridge:/);
  });
});
