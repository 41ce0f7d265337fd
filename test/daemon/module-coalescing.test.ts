// Coalescing under real concurrency: the C sign loop (many threads in one process, each signing its own digests
// through libsignbridge-pkcs11.so and verifying every signature with libcrypto against its own digest) talks to a
// daemon whose upstream is a real service over HTTP. With coalescing on, the service sees fewer HTTP requests than
// signatures and no caller gets another's signature; a caller whose policy inputs are refused fails alone, with
// the refusal's CKR code; with coalescing off, one request per signature as before.
import { createPublicKey } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningDaemon } from '../../daemon/daemon.js';
import { DEFAULT_COALESCING } from '../../daemon/upstream/coalescing-upstream.js';
import type { PolicyEngine } from '../../src/policy/policy.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';
import { ensurePeercredBuilt, remoteConfig, startTestDaemon, tempDir } from './helpers.js';
import { startSignLoop } from './sign-loop.js';

const TENANT = 'coalesce-rsa';
/** CKR_FUNCTION_REJECTED: how the module answers a policy denial. */
const CKR_FUNCTION_REJECTED = '0x200';

const policy: PolicyEngine = {
  async evaluate(input) {
    if (input.project === 'blocked') return { outcome: 'deny', rule: 'blocked', reason: 'blocked project' };
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

  async function withDaemon<T>(coalesce: boolean, fn: (daemon: RunningDaemon) => Promise<T>): Promise<T> {
    const config = remoteConfig(url, [{ tenantId: TENANT, apiKey: signer }], {
      ...(coalesce && { coalesce: DEFAULT_COALESCING }),
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
});
