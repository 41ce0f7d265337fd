// Issue 31's reproduction: an approval whose client retried after a `kill -9` of the service got 409 although the
// first attempt had committed. Here a real `signbridge server` process (SQLite in its data dir, a policy file that
// holds production signatures for approval) is killed with SIGKILL as soon as the approval has committed (seen by
// the requester's collect, while the approver's own request may still be unanswered), started again on the same
// data dir, and the approver sends the very same approve_sign again: 200 with the signature the request holds,
// and the audit log has one approval, not two. Every wait is for a condition, with a deadline only for a hang.
import { createHash, createPublicKey, verify } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiKeyCli, exportAudit, postAction, type ServerProcess, startServerProcess } from '../helpers/cli.js';
import { makeTempDir } from '../helpers/service.js';
import { until } from '../helpers/wait.js';

const dir = makeTempDir();
const dataDir = join(dir, 'data');
const policyFile = join(dir, 'policy.yaml');
const env = { SIGNBRIDGE_POLICY_FILE: policyFile };
let first: ServerProcess | undefined;
let restarted: ServerProcess | undefined;

beforeAll(async () => {
  writeFileSync(policyFile, 'version: 1\nrules:\n  environments:\n    requireApproval: [production]\n');
  first = await startServerProcess(['--data-dir', dataDir], env);
});
afterAll(async () => {
  await first?.stop('SIGKILL');
  await restarted?.stop();
});

describe('approve_sign retried after a kill -9 of the service', () => {
  it('gets 200 and the same signature from the restarted service; the approval is audited once', async () => {
    const server = first as ServerProcess;
    const operator = createApiKeyCli(dataDir, 'operator');
    const made = await postAction(server.url, 'create_tenant', operator, {
      tenant_id: 'k9a',
      key_spec: 'ECC_NIST_P256',
    });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    const signer = createApiKeyCli(dataDir, 'signer', 'k9a');
    const approver = createApiKeyCli(dataDir, 'approver', 'k9a');
    const pem = (await postAction(server.url, 'get_public_key', approver, { tenant_id: 'k9a' })).body
      .public_key_pem as string;

    const message = 'release 9.9.9';
    const sign = {
      tenant_id: 'k9a',
      algorithm: 'ECDSA_SHA_256',
      hash: createHash('sha256').update(message).digest('base64'),
    };
    const held = await postAction(server.url, 'sign', signer, { ...sign, environment: 'production' });
    expect(held.status, JSON.stringify(held.body)).toBe(202);
    const requestId = held.body.request_id as string;
    const approval = { tenant_id: 'k9a', request_id: requestId };

    // The approver's request is sent and not awaited: the process dies as soon as the approval has committed,
    // whether or not its answer reached the approver.
    const lost = postAction(server.url, 'approve_sign', approver, approval).catch((err: Error) => err);
    const collected = await until('the approval to commit', async () => {
      const res = await postAction(server.url, 'sign', signer, { ...sign, request_id: requestId });
      return res.status === 200 ? res : undefined;
    });
    server.child.kill('SIGKILL');
    await server.stop();
    await lost;

    restarted = await startServerProcess(['--data-dir', dataDir], env);
    const retried = await postAction(restarted.url, 'approve_sign', approver, approval);
    expect(retried.status, JSON.stringify(retried.body)).toBe(200);
    expect(retried.body).toMatchObject({ request_id: requestId, status: 'approved', key_id: collected.body.key_id });
    expect(retried.body.signature).toBe(collected.body.signature);
    expect(retried.headers.get('signbridge-log-index')).toBe(collected.headers.get('signbridge-log-index'));
    const signature = Buffer.from(retried.body.signature as string, 'base64');
    expect(verify('sha256', Buffer.from(message), createPublicKey(pem), signature)).toBe(true);

    // Another approver is still refused; the log has one approval and one signature for the request.
    const other = createApiKeyCli(dataDir, 'approver', 'k9a');
    expect((await postAction(restarted.url, 'approve_sign', other, approval)).status).toBe(409);
    const approvals = exportAudit(['--data-dir', dataDir]).filter(
      (e) => e.action === 'approve_sign' && (e.details as Record<string, unknown>).request_id === requestId,
    );
    expect(approvals.map((e) => e.outcome)).toEqual(['signed']);
  });
});
