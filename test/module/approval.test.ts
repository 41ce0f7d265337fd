// Through the module, a signature that needs approval: C_Sign waits while the daemon polls, an approver decides
// over HTTP meanwhile (finding the request id where the module logs it), and C_Sign returns the signature, or
// CKR_FUNCTION_REJECTED after a rejection. The build step's context (SIGNBRIDGE_PROJECT, SIGNBRIDGE_ENVIRONMENT)
// reaches the policy: the project allow-list would deny without it.
import { createPublicKey, verify } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import pkcs11js from 'pkcs11js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import { createApiKeyCli } from '../helpers/cli.js';
import { type Stack, startStack, tenantFor } from './harness.js';

const P = pkcs11js;
let stack: Stack;
let lib: pkcs11js.PKCS11;
let session: Buffer;
let key: Buffer;
let approver: string;
let logFile: string;
const tenant = tenantFor('ECC_NIST_P256');

beforeAll(async () => {
  stack = await startStack(
    ['ECC_NIST_P256'],
    'version: 1\nrules:\n  projects: { allow: [payments] }\n  environments: { requireApproval: [production] }\n',
  );
  logFile = join(stack.dir, 'module.log');
  Object.assign(process.env, {
    SIGNBRIDGE_SOCKET: stack.socketPath,
    SIGNBRIDGE_PROJECT: 'payments',
    SIGNBRIDGE_ENVIRONMENT: 'production',
    SIGNBRIDGE_LOG: logFile,
    SIGNBRIDGE_POLL_INTERVAL_MS: '200',
    SIGNBRIDGE_APPROVAL_TIMEOUT: '60',
  });
  lib = new P.PKCS11();
  lib.load(MODULE_PATH);
  lib.C_Initialize({ flags: P.CKF_OS_LOCKING_OK });
  const [slot] = lib.C_GetSlotList(true);
  session = lib.C_OpenSession(slot as Buffer, P.CKF_SERIAL_SESSION);
  lib.C_FindObjectsInit(session, [{ type: P.CKA_CLASS, value: P.CKO_PRIVATE_KEY }]);
  [key] = lib.C_FindObjects(session, 1) as [Buffer];
  lib.C_FindObjectsFinal(session);
  approver = createApiKeyCli(join(stack.dir, 'data'), 'approver', tenant);
}, 120_000);

afterAll(async () => {
  lib?.C_Finalize();
  await stack?.close();
});

/** Starts C_Sign on a libuv thread (pkcs11js's asynchronous call), so this thread can approve meanwhile. */
function signAsync(message: Buffer): Promise<Buffer> {
  lib.C_SignInit(session, { mechanism: P.CKM_ECDSA_SHA256 }, key);
  return new Promise((resolve, reject) =>
    lib.C_Sign(session, message, Buffer.alloc(64), (err, sig) => (err ? reject(err) : resolve(sig))),
  );
}

/** The module logs where a request waits; an approver reads the id from the build log. */
async function waitingRequestId(seen: Set<string>): Promise<string> {
  for (let i = 0; i < 600; i++) {
    const log = existsSync(logFile) ? readFileSync(logFile, 'utf8') : '';
    for (const m of log.matchAll(/waits for approval: request id ([0-9a-f-]{36})/g)) {
      if (!seen.has(m[1] as string)) {
        seen.add(m[1] as string);
        return m[1] as string;
      }
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('the module never logged a waiting request');
}

describe('C_Sign and the approval workflow', () => {
  const seen = new Set<string>();

  it('waits for an approval given meanwhile, then returns the signature', { timeout: 120_000 }, async () => {
    const message = Buffer.from('release build for production');
    const pending = signAsync(message);
    const requestId = await waitingRequestId(seen);
    const approved = await stack.call('approve_sign', approver, { tenant_id: tenant, request_id: requestId });
    expect(approved.status, JSON.stringify(approved.body)).toBe(200);
    const sig = await pending;
    const pem = stack.publicKeys.get(tenant) as string;
    expect(verify('sha256', message, { key: createPublicKey(pem), dsaEncoding: 'ieee-p1363' }, sig)).toBe(true);
  });

  it('returns CKR_FUNCTION_REJECTED when the approver rejects', { timeout: 120_000 }, async () => {
    const pending = signAsync(Buffer.from('not this one'));
    const requestId = await waitingRequestId(seen);
    const rejected = await stack.call('approve_sign', approver, {
      tenant_id: tenant,
      request_id: requestId,
      decision: 'reject',
      reason: 'unreviewed change',
    });
    expect(rejected.status).toBe(200);
    await expect(pending).rejects.toThrow(/CKR_FUNCTION_REJECTED/);
  });
});
