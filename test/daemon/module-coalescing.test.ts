// Coalescing under real concurrency: the C sign loop (many threads in one process, each signing its own digests
// through libsignbridge-pkcs11.so and verifying every signature with libcrypto against its own digest) talks to a
// daemon whose upstream is a real service over HTTP. With coalescing on, the service sees fewer HTTP requests than
// signatures and no caller gets another's signature; a caller whose policy inputs are refused fails alone, with
// the refusal's CKR code; with coalescing off, one request per signature as before.
import { createPublicKey, verify } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DaemonConfig } from '../../daemon/config.js';
import type { RunningDaemon } from '../../daemon/daemon.js';
import { DEFAULT_COALESCING } from '../../daemon/upstream/coalescing-upstream.js';
import type { PolicyEngine } from '../../src/policy/policy.js';
import { DaemonClient } from '../../wire/client.js';
import { digestOf } from '../helpers/crypto.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';
import { ensurePeercredBuilt, remoteConfig, startTestDaemon, tempDir } from './helpers.js';
import { startSignLoop } from './sign-loop.js';

const TENANT = 'coalesce-rsa';
/** CKR_FUNCTION_REJECTED: how the module answers a policy denial. */
const CKR_FUNCTION_REJECTED = '0x200';

const policy: PolicyEngine = {
  async evaluate(input) {
    if (input.project === 'blocked') return { outcome: 'deny', rule: 'blocked', reason: 'blocked project' };
    if (input.project === 'held') return { outcome: 'pending_approval', rule: 'held', reason: 'a person decides' };
    return { outcome: 'allow', rule: 'test', reason: 'test' };
  },
};

describe('the module under many threads -> daemon (coalescing) -> service', () => {
  let svc: TestService;
  let url: string;
  let signer: string;
  /** The service's HTTP requests by path, counted by its own node:http server. */
  const requests = new Map<string, number>();
  const count = (path: string) => requests.get(path) ?? 0;

  beforeAll(async () => {
    ensurePeercredBuilt();
    svc = await startTestService({ policy });
    url = await svc.app.listen({ host: '127.0.0.1', port: 0 });
    svc.app.server.on('request', (req: IncomingMessage) => {
      const path = req.url ?? '';
      requests.set(path, count(path) + 1);
    });
    const created = await callAction(svc.app, svc.operator, 'create_tenant', {
      tenant_id: TENANT,
      key_spec: 'RSA_2048',
    });
    expect(created.status).toBe(201);
    signer = await svc.apiKey('signer', TENANT);
    const pub = await callAction(svc.app, signer, 'get_public_key', { tenant_id: TENANT });
    createPublicKey(pub.body.public_key_pem as string);
  });
  afterAll(async () => {
    await svc?.close();
  });

  async function withDaemon<T>(
    coalesce: boolean,
    fn: (daemon: RunningDaemon) => Promise<T>,
    overrides: Partial<DaemonConfig> = {},
  ): Promise<T> {
    const config = remoteConfig(url, [{ tenantId: TENANT, apiKey: signer }], {
      ...(coalesce && { coalesce: DEFAULT_COALESCING }),
      ...overrides,
    });
    const daemon = await startTestDaemon(config);
    try {
      return await fn(daemon);
    } finally {
      await daemon.close();
    }
  }

  const signingRequests = () => count('/v1/pkcs11_sign') + count('/v1/sign_batch');

  it('coalescing on: every signature verifies against its own digest, in fewer requests than signatures', async () => {
    const before = signingRequests();
    const batchesBefore = count('/v1/sign_batch');
    const { result, code, stderr } = await withDaemon(true, async (daemon) => {
      const loop = startSignLoop(tempDir('sbd-coalesce-'), TENANT, 16, { SIGNBRIDGE_SOCKET: daemon.socketPath });
      await loop.waitForSigned(400);
      return loop.stop();
    });
    expect(stderr).toBe('');
    expect(code).toBe(0);
    expect(result.failed).toBe(0);
    expect(result.bad).toBe(0);
    const sent = signingRequests() - before;
    expect(count('/v1/sign_batch') - batchesBefore).toBeGreaterThan(0);
    expect(sent).toBeLessThan(result.signed);
  });

  it('a refused caller fails alone with its CKR code while the others sign and verify', async () => {
    const { allowed, refused } = await withDaemon(true, async (daemon) => {
      const dir = tempDir('sbd-coalesce-');
      const env = { SIGNBRIDGE_SOCKET: daemon.socketPath };
      const ok = startSignLoop(dir, TENANT, 12, env);
      const blocked = startSignLoop(tempDir('sbd-coalesce-'), TENANT, 4, { ...env, SIGNBRIDGE_PROJECT: 'blocked' });
      await ok.waitForSigned(300);
      while (blocked.progress().failed < 20) await new Promise((r) => setTimeout(r, 50));
      return { allowed: await ok.stop(), refused: await blocked.stop() };
    });
    expect(allowed.code).toBe(0);
    expect(allowed.result).toMatchObject({ failed: 0, bad: 0 });
    expect(allowed.stderr).toBe('');
    expect(refused.result.signed).toBe(0);
    expect(refused.result.bad).toBe(0);
    const codes = new Set([...refused.stderr.matchAll(/CKR (0x[0-9a-f]+)/g)].map((m) => m[1]));
    expect([...codes]).toEqual([CKR_FUNCTION_REJECTED]);
  });

  it('coalescing off: one pkcs11_sign request per signature, as before', async () => {
    const before = signingRequests();
    const batchesBefore = count('/v1/sign_batch');
    const { result, code } = await withDaemon(false, async (daemon) => {
      const loop = startSignLoop(tempDir('sbd-coalesce-'), TENANT, 16, { SIGNBRIDGE_SOCKET: daemon.socketPath });
      await loop.waitForSigned(200);
      return loop.stop();
    });
    expect(code).toBe(0);
    expect(result).toMatchObject({ failed: 0, bad: 0 });
    expect(count('/v1/sign_batch')).toBe(batchesBefore);
    expect(signingRequests() - before).toBe(result.signed);
  });

  it('a held batch is one request: its callers get SIGN_PENDING with its id, one approval, each POLLs its signature', async () => {
    const key = createPublicKey(
      (await callAction(svc.app, signer, 'get_public_key', { tenant_id: TENANT })).body.public_key_pem as string,
    );
    const messages = Array.from({ length: 16 }, (_, i) => Buffer.from(`held release file ${i}`));
    const approver = await svc.apiKey('approver', TENANT);
    const batchesBefore = count('/v1/sign_batch');
    await withDaemon(
      true,
      async (daemon) => {
        const clients = await Promise.all(messages.map(() => DaemonClient.open(daemon.socketPath)));
        const keyId = await ckaIdOf(clients[0]?.client as DaemonClient);
        // Each caller on a connection of its own, at once, as the threads of one signing tool would.
        const answers = await Promise.all(
          messages.map((m, i) =>
            (clients[i]?.client as DaemonClient).request({
              type: 'SIGN',
              tenant: TENANT,
              keyId,
              algorithm: 'RSASSA_PKCS1_V1_5_SHA_256',
              digest: digestOf('RSASSA_PKCS1_V1_5_SHA_256', m),
              project: 'held',
            }),
          ),
        );
        expect(answers.map((a) => a.type)).toEqual(messages.map(() => 'SIGN_PENDING'));
        const ids = answers.map((a) => (a as { requestId: string }).requestId);
        // The first callers went alone (coalesce.lanes), the rest waited together: fewer requests than callers.
        const distinct = [...new Set(ids)];
        expect(distinct.length).toBeLessThan(messages.length);
        expect(count('/v1/sign_batch') - batchesBefore).toBeGreaterThan(0);
        const batchRequests = [];
        for (const id of distinct) {
          const record = await svc.store.requests.get(TENANT, id);
          if (record?.batch) batchRequests.push(record);
          const approved = await callAction(svc.app, approver, 'approve_sign', { tenant_id: TENANT, request_id: id });
          expect(approved.status, JSON.stringify(approved.body)).toBe(200);
        }
        expect(batchRequests.length).toBeGreaterThan(0);
        // Each caller polls with its own digest and gets its own signature, in any order.
        for (const i of [...messages.keys()].reverse()) {
          const polled = await (clients[i]?.client as DaemonClient).request({
            type: 'POLL',
            tenant: TENANT,
            requestId: ids[i] as string,
            digest: digestOf('RSASSA_PKCS1_V1_5_SHA_256', messages[i] as Buffer),
          });
          if (polled.type !== 'SIGN_OK') throw new Error(JSON.stringify(polled));
          expect(verify('sha256', messages[i] as Buffer, key, polled.signature)).toBe(true);
        }
        for (const c of clients) c.client.close();
      },
      { approvalWaitMs: 0 },
    );
  });
});

/** The CKA_ID of the tenant's current key, as the module sees it (LIST). */
async function ckaIdOf(client: DaemonClient): Promise<Buffer> {
  const list = await client.request({ type: 'LIST' });
  if (list.type !== 'LIST_OK') throw new Error(JSON.stringify(list));
  return list.tokens.find((t) => t.tenant === TENANT)?.keys[0]?.keyId as Buffer;
}
