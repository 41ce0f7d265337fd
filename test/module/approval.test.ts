// Through the module, a signature that needs approval: C_Sign waits while the daemon polls, an approver decides
// over HTTP meanwhile (finding the request id where the module logs it), and C_Sign returns the signature, or
// CKR_FUNCTION_REJECTED after a rejection. The build step's context (SIGNBRIDGE_PROJECT, SIGNBRIDGE_ENVIRONMENT)
// reaches the policy: the project allow-list would deny without it. A client's own retry after the module's approval
// timeout continues the request it opened (issue 21): the same request id, one request at the service.
import { createHash, createPublicKey, verify } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import pkcs11js from 'pkcs11js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import { openSqlite } from '../../src/store/sqlite/sqlite-driver.js';
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
  });
  lib = new P.PKCS11();
  lib.load(MODULE_PATH);
  initialize(60);
  approver = createApiKeyCli(join(stack.dir, 'data'), 'approver', tenant);
}, 120_000);

/** C_Initialize with an approval timeout (the module reads SIGNBRIDGE_APPROVAL_TIMEOUT there), a session, the key. */
function initialize(approvalTimeoutSeconds: number): void {
  process.env.SIGNBRIDGE_APPROVAL_TIMEOUT = String(approvalTimeoutSeconds);
  lib.C_Initialize({ flags: P.CKF_OS_LOCKING_OK });
  const [slot] = lib.C_GetSlotList(true);
  session = lib.C_OpenSession(slot as Buffer, P.CKF_SERIAL_SESSION);
  lib.C_FindObjectsInit(session, [{ type: P.CKA_CLASS, value: P.CKO_PRIVATE_KEY }]);
  [key] = lib.C_FindObjects(session, 1) as [Buffer];
  lib.C_FindObjectsFinal(session);
}

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

/** Request ids the tests have taken from the module's log already. */
const seen = new Set<string>();

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

/** The requests the service holds for a message's SHA-256 (read from its SQLite database beside it). */
function serviceRequestsFor(message: Buffer): Array<{ id: string; status: string }> {
  const db = openSqlite(join(stack.dir, 'data', 'signbridge.db'), { readonly: true });
  try {
    const hash = createHash('sha256').update(message).digest('base64');
    return db
      .prepare('SELECT id, status FROM pending_requests WHERE hash = ? ORDER BY created_at, id')
      .all(hash) as Array<{ id: string; status: string }>;
  } finally {
    db.close();
  }
}

/** How often the module logged that a C_Sign waits for `requestId` (once per C_Sign that waited for it). */
function waitsLogged(requestId: string): number {
  const log = readFileSync(logFile, 'utf8');
  return log.split(`waits for approval: request id ${requestId}`).length - 1;
}

/** A C_Sign that fails: resolves with the error (its message names the CKR). */
async function signRefused(message: Buffer): Promise<Error> {
  return signAsync(message).then(
    () => {
      throw new Error('C_Sign returned a signature; it should have been refused');
    },
    (err: Error) => err,
  );
}

describe("a client's own retry after the module's approval timeout", () => {
  beforeAll(() => {
    // A short approval timeout, so that C_Sign gives up before anyone decides (nothing here races it: every
    // decision below is made after the C_Sign it concerns has returned).
    lib.C_Finalize();
    initialize(2);
  });

  it(
    'continues the pending request; once approved, the retry returns a signature that verifies',
    {
      timeout: 180_000,
    },
    async () => {
      const message = Buffer.from('retried release build');
      const first = await signRefused(message);
      expect(first.message).toMatch(/CKR_FUNCTION_REJECTED/);
      const requestId = await waitingRequestId(seen);
      expect(readFileSync(logFile, 'utf8')).toContain(`request ${requestId} was not approved within 2 s`);

      // The retry in the same process, the way pkcs11-tool and osslsigncode make it (C_SignUpdate, C_SignFinal),
      // waits for the same request, and gives up again.
      lib.C_SignInit(session, { mechanism: P.CKM_ECDSA_SHA256 }, key);
      lib.C_SignUpdate(session, message);
      const retry = await lib.C_SignFinalAsync(session, Buffer.alloc(64)).then(
        () => new Error('C_SignFinal returned a signature; it should have been refused'),
        (err: Error) => err,
      );
      expect(retry.message).toMatch(/CKR_FUNCTION_REJECTED/);
      expect(waitsLogged(requestId)).toBe(2);
      expect(serviceRequestsFor(message)).toEqual([{ id: requestId, status: 'pending_approval' }]);

      // The tool run again (a long timeout now, so the approval below never races it): it waits for the same
      // request, the approver approves it meanwhile, and C_Sign returns the signature.
      lib.C_Finalize();
      initialize(120);
      const waiting = signAsync(message);
      for (let i = 0; waitsLogged(requestId) < 3; i++) {
        if (i > 1200) throw new Error('the retry never logged that it waits for the request');
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(serviceRequestsFor(message)).toEqual([{ id: requestId, status: 'pending_approval' }]);
      const approved = await stack.call('approve_sign', approver, { tenant_id: tenant, request_id: requestId });
      expect(approved.status, JSON.stringify(approved.body)).toBe(200);
      const sig = await waiting;
      const pem = stack.publicKeys.get(tenant) as string;
      expect(verify('sha256', message, { key: createPublicKey(pem), dsaEncoding: 'ieee-p1363' }, sig)).toBe(true);
      expect(serviceRequestsFor(message)).toEqual([{ id: requestId, status: 'approved' }]);
      lib.C_Finalize();
      initialize(2);
    },
  );

  it('gets the refusal at once after a rejection, without a new request', { timeout: 180_000 }, async () => {
    const message = Buffer.from('retried and rejected');
    expect((await signRefused(message)).message).toMatch(/CKR_FUNCTION_REJECTED/);
    const requestId = await waitingRequestId(seen);
    const rejected = await stack.call('approve_sign', approver, {
      tenant_id: tenant,
      request_id: requestId,
      decision: 'reject',
      reason: 'not from the release branch',
    });
    expect(rejected.status).toBe(200);
    const before = readFileSync(logFile, 'utf8').length;
    const retry = await signRefused(message);
    expect(retry.message).toMatch(/CKR_FUNCTION_REJECTED/);
    // Refused by the SIGN itself: the retry never waited for a request, and the service opened none.
    const retryLog = readFileSync(logFile, 'utf8').slice(before);
    expect(retryLog).not.toContain('waits for approval');
    expect(retryLog).toContain(requestId);
    expect(serviceRequestsFor(message)).toEqual([{ id: requestId, status: 'rejected' }]);
  });
});
