// The daemon against the real service (SQLite + this file's SoftHSM token) over real HTTP, driven through its
// Unix socket with the TypeScript codec as the client.
import { execFile, execFileSync } from 'node:child_process';
import { createPublicKey, verify } from 'node:crypto';
import { chmodSync, existsSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningDaemon } from '../../daemon/daemon.js';
import { ckaIdFor } from '../../daemon/key-id.js';
import { algorithmInfo, algorithmsForKey, type KeySpec, type SigningAlgorithm } from '../../src/crypto/algorithms.js';
import { packagePath } from '../../src/paths.js';
import type { PolicyEngine, PolicyInput } from '../../src/policy/policy.js';
import { DaemonClient } from '../../wire/client.js';
import { encodeMessage, frameBytes } from '../../wire/codec.js';
import type { Response, WireKey, WireToken } from '../../wire/messages.js';
import { MessageType, WireStatus } from '../../wire/wire.js';
import { digestOf } from '../helpers/crypto.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';
import { ensurePeercredBuilt, remoteConfig, startTestDaemon, tempDir } from './helpers.js';

const SPECS: Record<string, KeySpec> = {
  't-rsa': 'RSA_2048',
  't-p256': 'ECC_NIST_P256',
  't-p384': 'ECC_NIST_P384',
  't-p521': 'ECC_NIST_P521',
  't-rot': 'ECC_NIST_P256',
  't-revoked': 'ECC_NIST_P256',
  't-policy': 'ECC_NIST_P256',
};

const policyInputs: PolicyInput[] = [];
const policy: PolicyEngine = {
  async evaluate(input) {
    policyInputs.push(input);
    if (input.project === 'needs-approval') {
      return { outcome: 'pending_approval', rule: 'release-approval', reason: 'releases need an approver' };
    }
    if (input.project === 'blocked') {
      return {
        outcome: 'deny',
        rule: 'vulnerable-dependency',
        reason: 'openssl 1.1.1 has a critical vulnerability',
        vulnId: 'CVE-2024-0001',
        fixVersion: '1.2.4',
      };
    }
    return { outcome: 'allow', rule: 'test', reason: 'test policy' };
  },
};

let svc: TestService;
let url: string;
let daemon: RunningDaemon;
const signers = new Map<string, string>();
const admins = new Map<string, string>();

beforeAll(async () => {
  ensurePeercredBuilt();
  svc = await startTestService({ policy });
  url = await svc.app.listen({ host: '127.0.0.1', port: 0 });
  for (const [tenant, spec] of Object.entries(SPECS)) {
    const created = await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: tenant, key_spec: spec });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    signers.set(tenant, await svc.apiKey('signer', tenant));
    admins.set(tenant, await svc.apiKey('admin', tenant));
  }
  daemon = await startTestDaemon(
    remoteConfig(
      url,
      Object.keys(SPECS).map((tenantId) => ({
        tenantId,
        label: tenantId === 't-rsa' ? 'RSA release key' : undefined,
        apiKey: signers.get(tenantId) as string,
      })),
    ),
  );
});
afterAll(async () => {
  await daemon?.close();
  await svc?.close();
});

async function session(path = daemon.socketPath): Promise<DaemonClient> {
  const { client, hello } = await DaemonClient.open(path, 'daemon.test');
  expect(hello).toMatchObject({ type: 'HELLO_OK', version: 2 });
  return client;
}

async function publicKey(tenant: string): Promise<{ key_id: string; public_key_pem: string }> {
  const res = await callAction(svc.app, signers.get(tenant), 'get_public_key', { tenant_id: tenant });
  expect(res.status).toBe(200);
  return res.body as { key_id: string; public_key_pem: string };
}

async function listed(client: DaemonClient, tenant: string): Promise<{ token: WireToken; key: WireKey }> {
  const res = await client.request({ type: 'LIST' });
  if (res.type !== 'LIST_OK') throw new Error(`LIST answered ${JSON.stringify(res)}`);
  const token = res.tokens.find((t) => t.tenant === tenant);
  if (!token?.keys[0]) throw new Error(`no key for ${tenant}`);
  return { token, key: token.keys[0] };
}

function expectError(res: Response, status: number, pattern?: RegExp): void {
  expect(res.type, JSON.stringify(res)).toBe('ERROR');
  if (res.type !== 'ERROR') return;
  expect(res.status, res.message).toBe(status);
  if (pattern) expect(res.message).toMatch(pattern);
}

function verifyPkcs11(algorithm: SigningAlgorithm, pem: string, message: Buffer, sig: Buffer): boolean {
  const info = algorithmInfo(algorithm);
  const key = createPublicKey(pem);
  if (info.padding === 'ecdsa') return verify(info.hash, message, { key, dsaEncoding: 'ieee-p1363' }, sig);
  if (info.padding === 'pss') {
    return verify(
      info.hash,
      message,
      { key, padding: 6, saltLength: { sha256: 32, sha384: 48, sha512: 64 }[info.hash] },
      sig,
    );
  }
  return verify(info.hash, message, key, sig);
}

describe('HELLO', () => {
  it('answers HELLO_OK with version 1', async () => {
    const { client, hello } = await DaemonClient.open(daemon.socketPath);
    expect(hello).toEqual({ type: 'HELLO_OK', version: 2, server: expect.stringMatching(/^signbridge-daemon/) });
    client.close();
  });

  it('refuses a version range without 1 or 2, then closes', async () => {
    const client = await DaemonClient.connect(daemon.socketPath);
    const res = await client.request({ type: 'HELLO', versionMin: 3, versionMax: 4, client: 'x', pid: 1 });
    expectError(res, WireStatus.VERSION_UNSUPPORTED);
    await client.closed();
  });

  it('answers a first request other than HELLO with BAD_REQUEST, then closes', async () => {
    const client = await DaemonClient.connect(daemon.socketPath);
    expectError(await client.request({ type: 'LIST' }), WireStatus.BAD_REQUEST, /HELLO/);
    await client.closed();
  });
});

describe('LIST', () => {
  it('shows one token per tenant with its current key, SPKI matching get_public_key', async () => {
    const client = await session();
    const res = await client.request({ type: 'LIST' });
    expect(res.type).toBe('LIST_OK');
    if (res.type !== 'LIST_OK') return;
    expect(res.tokens.map((t) => t.tenant).sort()).toEqual(Object.keys(SPECS).sort());
    for (const token of res.tokens) {
      expect(token.label).toBe(token.tenant === 't-rsa' ? 'RSA release key' : token.tenant);
      expect(token.keys).toHaveLength(1);
      const [key] = token.keys as [WireKey];
      const pub = await publicKey(token.tenant);
      expect(key.keySpec).toBe(SPECS[token.tenant]);
      expect(key.label).toBe(pub.key_id);
      expect(key.keyId).toEqual(ckaIdFor(pub.key_id));
      expect(key.keyId.length).toBeLessThanOrEqual(16);
      expect(key.publicKey).toEqual(createPublicKey(pub.public_key_pem).export({ type: 'spki', format: 'der' }));
      expect(key.certificate).toBeUndefined();
      expect(key.chain).toEqual([]);
    }
    client.close();
  });
});

describe('SIGN', () => {
  const cases = ['t-rsa', 't-p256', 't-p384', 't-p521'].flatMap((tenant) =>
    algorithmsForKey(SPECS[tenant] as KeySpec).map((alg) => [tenant, alg] as const),
  );

  it.each(cases)('%s with %s: a PKCS#11-form signature that node:crypto verifies', async (tenant, algorithm) => {
    const client = await session();
    const { key } = await listed(client, tenant);
    const pem = (await publicKey(tenant)).public_key_pem;
    // P-521 r and s are shorter than 66 bytes now and then: sign often enough to meet that case.
    const rounds = tenant === 't-p521' ? 24 : 2;
    for (let i = 0; i < rounds; i++) {
      const message = Buffer.from(`artifact ${tenant} ${algorithm} ${i}`);
      const res = await client.request({
        type: 'SIGN',
        tenant,
        keyId: key.keyId,
        algorithm,
        digest: digestOf(algorithm, message),
      });
      expect(res.type, JSON.stringify(res)).toBe('SIGN_OK');
      if (res.type !== 'SIGN_OK') return;
      const expectedLength = { 't-rsa': 256, 't-p256': 64, 't-p384': 96, 't-p521': 132 }[tenant];
      expect(res.signature.length).toBe(expectedLength);
      expect(res.requestId).toMatch(/^[0-9a-f-]{36}$/);
      expect(verifyPkcs11(algorithm, pem, message, res.signature)).toBe(true);
      expect(verifyPkcs11(algorithm, pem, Buffer.from('other'), res.signature)).toBe(false);
    }
    client.close();
  });

  it('refuses an algorithm the key does not allow (ALGORITHM_INVALID) and unknown algorithms; EC: any SHA-2', async () => {
    const client = await session();
    const p256 = (await listed(client, 't-p256')).key;
    const rsa = (await listed(client, 't-rsa')).key;
    const sign = (tenant: string, keyId: Buffer, algorithm: string, len = 32) =>
      client.request({ type: 'SIGN', tenant, keyId, algorithm, digest: Buffer.alloc(len, 1) });
    expectError(
      await sign('t-p256', p256.keyId, 'RSASSA_PKCS1_V1_5_SHA_256'),
      WireStatus.ALGORITHM_INVALID,
      /allowed: ECDSA_SHA_256, ECDSA_SHA_384, ECDSA_SHA_512/,
    );
    // An EC key signs every SHA-2 digest (TLS 1.2 hands a P-384 key SHA-256); r||s is as wide as its curve.
    const message = Buffer.from('P-256 with SHA-384');
    const ok = await client.request({
      type: 'SIGN',
      tenant: 't-p256',
      keyId: p256.keyId,
      algorithm: 'ECDSA_SHA_384',
      digest: digestOf('ECDSA_SHA_384', message),
    });
    expect(ok.type, JSON.stringify(ok)).toBe('SIGN_OK');
    if (ok.type === 'SIGN_OK') {
      expect(ok.signature.length).toBe(64);
      const pem = (await publicKey('t-p256')).public_key_pem;
      expect(verifyPkcs11('ECDSA_SHA_384', pem, message, ok.signature)).toBe(true);
    }
    expectError(await sign('t-p256', p256.keyId, 'RSASSA_PSS_SHA_256'), WireStatus.ALGORITHM_INVALID);
    expectError(await sign('t-rsa', rsa.keyId, 'ECDSA_SHA_256'), WireStatus.ALGORITHM_INVALID);
    expectError(await sign('t-rsa', rsa.keyId, 'RSASSA_PKCS1_V1_5_SHA_1'), WireStatus.ALGORITHM_INVALID, /unknown/);
    expectError(await sign('t-rsa', rsa.keyId, 'RSASSA_PKCS1_V1_5_SHA_256', 48), WireStatus.BAD_REQUEST, /32-byte/);
    expectError(await sign('t-p256', p256.keyId, 'ECDSA_SHA_256', 20), WireStatus.BAD_REQUEST);
    client.close();
  });

  it('answers KEY_NOT_FOUND for an unknown key id and a tenant it does not expose', async () => {
    const client = await session();
    const sign = (tenant: string, keyId: Buffer) =>
      client.request({ type: 'SIGN', tenant, keyId, algorithm: 'ECDSA_SHA_256', digest: Buffer.alloc(32) });
    expectError(
      await sign('t-p256', Buffer.from('00112233445566778899aabbccddeeff', 'hex')),
      WireStatus.KEY_NOT_FOUND,
      /not tenant t-p256's current key/,
    );
    expectError(await sign('nobody-tenant', Buffer.from([1])), WireStatus.KEY_NOT_FOUND, /not exposed/);
    client.close();
  });

  it('passes CTX fields and the SBOM file to the policy; a denial is POLICY_DENIED with the vulnerability', async () => {
    const client = await session();
    const { key } = await listed(client, 't-policy');
    const dir = tempDir('sbd-sbom-');
    const sbomPath = join(dir, 'sbom.json');
    const sbom = JSON.stringify({ bomFormat: 'CycloneDX', specVersion: '1.5', components: [] });
    writeFileSync(sbomPath, sbom);
    const base = { type: 'SIGN' as const, tenant: 't-policy', keyId: key.keyId, algorithm: 'ECDSA_SHA_256' };
    policyInputs.length = 0;
    const ok = await client.request({
      ...base,
      digest: Buffer.alloc(32, 3),
      project: 'app',
      environment: 'prod',
      artifactType: 'exe',
      artifactVersion: '2.0.0',
      sbomPath,
    });
    expect(ok.type, JSON.stringify(ok)).toBe('SIGN_OK');
    expect(policyInputs.at(-1)).toMatchObject({
      tenantId: 't-policy',
      project: 'app',
      environment: 'prod',
      artifactType: 'exe',
      artifactVersion: '2.0.0',
      sbom,
    });
    const denied = await client.request({ ...base, digest: Buffer.alloc(32, 4), project: 'blocked' });
    expectError(denied, WireStatus.POLICY_DENIED, /policy_denied: .*critical vulnerability.*CVE-2024-0001.*1\.2\.4/);
    if (denied.type === 'ERROR') expect(denied.requestId).toMatch(/^[0-9a-f-]{36}$/);

    expectError(
      await client.request({ ...base, digest: Buffer.alloc(32), sbomPath: join(dir, 'missing.json') }),
      WireStatus.BAD_REQUEST,
      /SBOM .*ENOENT/,
    );
    expectError(
      await client.request({ ...base, digest: Buffer.alloc(32), sbomPath: dir }),
      WireStatus.BAD_REQUEST,
      /not a regular file/,
    );
    writeFileSync(join(dir, 'big.json'), Buffer.alloc(1024 * 1024 + 1, 0x20));
    expectError(
      await client.request({ ...base, digest: Buffer.alloc(32), sbomPath: join(dir, 'big.json') }),
      WireStatus.BAD_REQUEST,
      /limit/,
    );
    client.close();
  });

  it('a pending signature: SIGN_PENDING, POLL waits then says pending, approval -> POLL gives the signature', async () => {
    const client = await session();
    const { key } = await listed(client, 't-policy');
    const message = Buffer.from('needs approval');
    const digest = digestOf('ECDSA_SHA_256', message);
    const base = { type: 'SIGN' as const, tenant: 't-policy', keyId: key.keyId, algorithm: 'ECDSA_SHA_256' };
    const pending = await client.request({ ...base, digest, project: 'needs-approval' });
    expect(pending).toMatchObject({ type: 'SIGN_PENDING', status: 'pending_approval' });
    if (pending.type !== 'SIGN_PENDING') return;
    expect(pending.requestId).toMatch(/^[0-9a-f-]{36}$/);
    const started = Date.now();
    const still = await client.request({ type: 'POLL', tenant: 't-policy', requestId: pending.requestId, digest });
    expect(still).toMatchObject({ type: 'SIGN_PENDING', requestId: pending.requestId, status: 'pending_approval' });
    expect(Date.now() - started).toBeGreaterThanOrEqual(250); // held back for approvalWaitMs, not busy
    const approver = await svc.apiKey('approver', 't-policy');
    const decided = await callAction(svc.app, approver, 'approve_sign', {
      tenant_id: 't-policy',
      request_id: pending.requestId,
    });
    expect(decided.status, JSON.stringify(decided.body)).toBe(200);
    const done = await client.request({ type: 'POLL', tenant: 't-policy', requestId: pending.requestId, digest });
    expect(done.type, JSON.stringify(done)).toBe('SIGN_OK');
    if (done.type === 'SIGN_OK') {
      expect(done.requestId).toBe(pending.requestId);
      expect(verifyPkcs11('ECDSA_SHA_256', (await publicKey('t-policy')).public_key_pem, message, done.signature)).toBe(
        true,
      );
    }
    // A wrong digest is refused by the daemon (it remembers the SIGN) ...
    const wrong = { type: 'POLL' as const, tenant: 't-policy', requestId: pending.requestId, digest: Buffer.alloc(32) };
    expectError(await client.request(wrong), WireStatus.BAD_REQUEST);
    // ... and a daemon that never saw the SIGN (restarted) collects with the digest the POLL carries.
    const restarted = await startTestDaemon(
      remoteConfig(url, [{ tenantId: 't-policy', apiKey: signers.get('t-policy') as string }]),
    );
    try {
      const other = await session(restarted.socketPath);
      const again = await other.request({ type: 'POLL', tenant: 't-policy', requestId: pending.requestId, digest });
      expect(again.type, JSON.stringify(again)).toBe('SIGN_OK');
      if (again.type === 'SIGN_OK') {
        expect(again.signature.length).toBe(64);
        expect(
          verifyPkcs11('ECDSA_SHA_256', (await publicKey('t-policy')).public_key_pem, message, again.signature),
        ).toBe(true);
      }
      expectError(await other.request(wrong), WireStatus.BAD_REQUEST, /hash_mismatch/);
      other.close();
    } finally {
      await restarted.close();
    }
    client.close();
  });

  it('a rejected pending signature is REJECTED; an unknown request id is BAD_REQUEST', async () => {
    const client = await session();
    const { key } = await listed(client, 't-policy');
    const pending = await client.request({
      type: 'SIGN',
      tenant: 't-policy',
      keyId: key.keyId,
      algorithm: 'ECDSA_SHA_256',
      digest: Buffer.alloc(32, 5),
      project: 'needs-approval',
    });
    if (pending.type !== 'SIGN_PENDING') throw new Error(JSON.stringify(pending));
    const approver = await svc.apiKey('approver', 't-policy');
    const decided = await callAction(svc.app, approver, 'approve_sign', {
      tenant_id: 't-policy',
      request_id: pending.requestId,
      decision: 'reject',
      reason: 'not this one',
    });
    expect(decided.status, JSON.stringify(decided.body)).toBe(200);
    const res = await client.request({
      type: 'POLL',
      tenant: 't-policy',
      requestId: pending.requestId,
      digest: Buffer.alloc(32, 5),
    });
    expectError(res, WireStatus.REJECTED, /rejected/);
    if (res.type === 'ERROR') expect(res.requestId).toBe(pending.requestId);
    expectError(
      await client.request({
        type: 'POLL',
        tenant: 't-policy',
        requestId: '00000000-0000-4000-8000-000000000000',
        digest: Buffer.alloc(32),
      }),
      WireStatus.BAD_REQUEST,
    );
    client.close();
  });
});

describe('rotation', () => {
  it('a rotated key appears with a new KEY_ID; the old one is KEY_CHANGED at once, nothing signed', async () => {
    const client = await session();
    const before = (await listed(client, 't-rot')).key;
    const rotated = await callAction(svc.app, admins.get('t-rot'), 'rotate_key', { tenant_id: 't-rot' });
    expect(rotated.status, JSON.stringify(rotated.body)).toBe(200);
    const digest = Buffer.alloc(32, 9);
    const old = await client.request({
      type: 'SIGN',
      tenant: 't-rot',
      keyId: before.keyId,
      algorithm: 'ECDSA_SHA_256',
      digest,
    });
    // Within the cache lifetime the daemon still believes the old key is current and sends it as key_id; the service
    // refuses it (key_changed) before signing anything, instead of signing with the new key (issue 45).
    expectError(old, WireStatus.KEY_CHANGED, /key_changed: .*rotated/);
    const after = (await listed(client, 't-rot')).key;
    expect(after.keyId).not.toEqual(before.keyId);
    expect(after.keyId).toEqual(ckaIdFor(rotated.body.key_id as string));
    const message = Buffer.from('after rotation');
    const res = await client.request({
      type: 'SIGN',
      tenant: 't-rot',
      keyId: after.keyId,
      algorithm: 'ECDSA_SHA_256',
      digest: digestOf('ECDSA_SHA_256', message),
    });
    expect(res.type).toBe('SIGN_OK');
    if (res.type === 'SIGN_OK') {
      expect(verifyPkcs11('ECDSA_SHA_256', (await publicKey('t-rot')).public_key_pem, message, res.signature)).toBe(
        true,
      );
    }
    client.close();
  });
});

describe('credentials and reachability', () => {
  it('a revoked API key is UNAUTHENTICATED', async () => {
    const client = await session();
    const { key } = await listed(client, 't-revoked');
    const token = signers.get('t-revoked') as string;
    const id = /^sbk_([0-9a-f]{16})_/.exec(token)?.[1] as string;
    expect(await svc.store.apiKeys.revoke(id, new Date().toISOString())).toBe(true);
    const res = await client.request({
      type: 'SIGN',
      tenant: 't-revoked',
      keyId: key.keyId,
      algorithm: 'ECDSA_SHA_256',
      digest: Buffer.alloc(32),
    });
    expectError(res, WireStatus.UNAUTHENTICATED, /unauthorized/);
    client.close();
  });

  it("one tenant's revoked key fails its own token only; `signbridge status` names the tenant and why", async () => {
    const tenants = ['iso-ok', 'iso-revoked'];
    const keys = new Map<string, string>();
    for (const tenant of tenants) {
      const created = await callAction(svc.app, svc.operator, 'create_tenant', {
        tenant_id: tenant,
        key_spec: 'ECC_NIST_P256',
      });
      expect(created.status, JSON.stringify(created.body)).toBe(201);
      keys.set(tenant, await svc.apiKey('signer', tenant));
    }
    const revoked = /^sbk_([0-9a-f]{16})_/.exec(keys.get('iso-revoked') as string)?.[1] as string;
    expect(await svc.store.apiKeys.revoke(revoked, new Date().toISOString())).toBe(true);
    // A new daemon (nothing cached), as a new build host process would meet it.
    const fresh = await startTestDaemon(
      remoteConfig(
        url,
        tenants.map((tenantId) => ({ tenantId, apiKey: keys.get(tenantId) as string })),
      ),
    );
    try {
      const client = await session(fresh.socketPath);
      const list = await client.request({ type: 'LIST' });
      expect(list.type, JSON.stringify(list)).toBe('LIST_OK');
      if (list.type !== 'LIST_OK') return;
      const ok = list.tokens.find((t) => t.tenant === 'iso-ok');
      expect(ok?.keys).toHaveLength(1);
      expect(ok?.status).toBeUndefined();
      const bad = list.tokens.find((t) => t.tenant === 'iso-revoked');
      expect(bad).toMatchObject({ keys: [], status: WireStatus.UNAUTHENTICATED });
      expect(bad?.message).toMatch(/unauthorized/);
      // The working tenant still signs.
      const digest = digestOf('ECDSA_SHA_256', Buffer.from('isolated'));
      const signed = await client.request({
        type: 'SIGN',
        tenant: 'iso-ok',
        keyId: ok?.keys[0]?.keyId as Buffer,
        algorithm: 'ECDSA_SHA_256',
        digest,
      });
      expect(signed.type, JSON.stringify(signed)).toBe('SIGN_OK');
      client.close();
      // `signbridge status`: exit 1, the failing tenant named with the reason, the other one listed with its key.
      const status = await new Promise<{ code: number | null; stdout: string }>((resolve) => {
        execFile(
          process.execPath,
          [packagePath('bin', 'signbridge.js'), 'status', '--socket', fresh.socketPath],
          { encoding: 'utf8' },
          (err, stdout) => resolve({ code: err ? ((err as { code?: number }).code ?? -1) : 0, stdout }),
        );
      });
      expect(status.code, status.stdout).toBe(1);
      expect(status.stdout).toMatch(
        /token "iso-revoked" \(tenant iso-revoked\): no keys, tenant iso-revoked failed: UNAUTHENTICATED: .*unauthorized/,
      );
      expect(status.stdout).toMatch(/token "iso-ok" \(tenant iso-ok\):\n {2}key [0-9a-f-]+ {2}ECC_NIST_P256/);
      expect(status.stdout).toMatch(/service: reachable/);
    } finally {
      await fresh.close();
    }
  });

  it('a service that is down is UNAVAILABLE; one that does not answer is TIMEOUT', async () => {
    const closedPort = await new Promise<number>((resolve) => {
      const s = createServer();
      s.listen(0, '127.0.0.1', () => {
        const { port } = s.address() as { port: number };
        s.close(() => resolve(port));
      });
    });
    const silent: Server = createServer(() => undefined);
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', () => resolve()));
    const silentPort = (silent.address() as { port: number }).port;
    const tenants = [{ tenantId: 't-p256', apiKey: signers.get('t-p256') as string }];
    const down = await startTestDaemon(remoteConfig(`http://127.0.0.1:${closedPort}`, tenants));
    const stuck = await startTestDaemon(remoteConfig(`http://127.0.0.1:${silentPort}`, tenants, { timeoutMs: 300 }));
    try {
      const a = await session(down.socketPath);
      expectError(await a.request({ type: 'LIST' }), WireStatus.UNAVAILABLE, /ECONNREFUSED/);
      const sign = {
        type: 'SIGN' as const,
        tenant: 't-p256',
        keyId: Buffer.from([1]),
        algorithm: 'ECDSA_SHA_256',
        digest: Buffer.alloc(32),
      };
      expectError(await a.request(sign), WireStatus.UNAVAILABLE);
      const b = await session(stuck.socketPath);
      expectError(await b.request({ type: 'LIST' }), WireStatus.TIMEOUT, /300 ms/);
      a.close();
      b.close();
    } finally {
      await down.close();
      await stuck.close();
      silent.close();
    }
  });
});

describe('broken clients', () => {
  const broken: Array<[string, Buffer]> = [
    ['length 0', Buffer.from('00000000', 'hex')],
    ['length above 1 MiB', Buffer.from('00100001', 'hex')],
    ['length 4 GiB', Buffer.from('ffffffff01', 'hex')],
    ['unknown type', frameBytes(0x55, Buffer.alloc(0))],
    ['a response type', frameBytes(MessageType.HELLO_OK, Buffer.alloc(0))],
    ['field past the end', frameBytes(MessageType.LIST, Buffer.from('000100000010aabb', 'hex'))],
    [
      'u32 of 3 bytes',
      frameBytes(
        MessageType.HELLO,
        Buffer.from('0001000000030000010002000000040000000100030000000178000400000004000000ff', 'hex'),
      ),
    ],
    ['duplicate tag', frameBytes(MessageType.POLL, Buffer.from('001200000001610012000000016200230000000172', 'hex'))],
  ];

  it.each(broken)('%s: the connection is closed without an answer; others keep being served', async (_name, bytes) => {
    const bystander = await session();
    const client = await session();
    await expect(client.send(bytes)).rejects.toThrow(/closed/);
    await client.closed();
    const res = await bystander.request({ type: 'LIST' });
    expect(res.type).toBe('LIST_OK');
    const fresh = await session();
    expect((await fresh.request({ type: 'LIST' })).type).toBe('LIST_OK');
    bystander.close();
    fresh.close();
  });

  it('a connection that never says HELLO is closed after the hello timeout', async () => {
    const config = remoteConfig(url, [{ tenantId: 't-p256', apiKey: signers.get('t-p256') as string }]);
    const impatient = await startTestDaemon(config, { helloTimeoutMs: 150 });
    try {
      const idle = await DaemonClient.connect(impatient.socketPath);
      const started = Date.now();
      await idle.closed();
      expect(Date.now() - started).toBeLessThan(30_000); // closed by the hello time-out, not by the test's
      const { client } = await DaemonClient.open(impatient.socketPath); // a prompt HELLO is served
      await new Promise((r) => setTimeout(r, 300));
      expect((await client.request({ type: 'LIST' })).type).toBe('LIST_OK');
      client.close();
    } finally {
      await impatient.close();
    }
  });

  it('a frame cut in the middle is waited for, not misread', async () => {
    const client = await session();
    const whole = frameBytes(MessageType.LIST, Buffer.alloc(0));
    const answer = client.send(whole.subarray(0, 3));
    await new Promise((r) => setTimeout(r, 50));
    const socket = (client as unknown as { socket: import('node:net').Socket }).socket;
    socket.write(whole.subarray(3));
    expect((await answer).type).toBe('LIST_OK');
    client.close();
  });

  it('pipelined requests are answered in order', async () => {
    const client = await session();
    const answers = await Promise.all([
      client.request({ type: 'LIST' }),
      client.request({ type: 'POLL', tenant: 't', requestId: 'a', digest: Buffer.alloc(32) }),
      client.request({ type: 'LIST' }),
    ]);
    expect(answers.map((a) => a.type)).toEqual(['LIST_OK', 'ERROR', 'LIST_OK']);
    client.close();
  });
});

describe('socket', () => {
  it('folder 0700 and socket 0600, owned by the daemon user', () => {
    expect(statSync(daemon.socketPath).mode & 0o777).toBe(0o600);
    expect(statSync(dirname(daemon.socketPath)).mode & 0o777).toBe(0o700);
    expect(statSync(daemon.socketPath).uid).toBe(process.getuid?.());
  });

  it('a peer whose uid is not allowed is disconnected before any answer', async () => {
    const config = remoteConfig(url, [{ tenantId: 't-p256', apiKey: signers.get('t-p256') as string }]);
    const strict = await startTestDaemon(config, { allowedUids: [54321] });
    try {
      await expect(DaemonClient.open(strict.socketPath)).rejects.toThrow(/closed|EPIPE|ECONNRESET/);
    } finally {
      await strict.close();
    }
  });

  // Switching to another uid needs root (and setpriv, from util-linux); elsewhere the allowedUids test above stands in.
  const canSwitchUser = process.getuid?.() === 0 && existsSync('/usr/bin/setpriv');
  it.skipIf(!canSwitchUser)(
    'a client running as another user (nobody) is disconnected; the same client as root is served',
    async () => {
      const dir = tempDir('sbd-peer-');
      chmodSync(dir, 0o755);
      const script = join(dir, 'client.cjs');
      // Self-contained (nobody cannot read this repository): send HELLO, report what comes back.
      writeFileSync(
        script,
        `const net = require('node:net');
const s = net.connect(process.argv[2]);
let got = Buffer.alloc(0);
s.on('connect', () => s.write(Buffer.from(process.argv[3], 'hex')));
s.on('data', (d) => { got = Buffer.concat([got, d]); if (got.length >= 4 && got.length >= 4 + got.readUInt32BE(0)) { console.log('DATA ' + got.toString('hex')); process.exit(0); } });
s.on('error', (e) => { console.log('ERROR ' + e.code); process.exit(0); });
s.on('close', () => { console.log(got.length ? 'DATA ' + got.toString('hex') : 'CLOSED'); process.exit(0); });
`,
        { mode: 0o755 },
      );
      const hello = encodeMessage({ type: 'HELLO', versionMin: 1, versionMax: 1, client: 'nobody', pid: 1 }).toString(
        'hex',
      );
      // Open the folders and the socket to everyone for this test, so only the SO_PEERCRED check stands in the way.
      chmodSync(dirname(dirname(daemon.socketPath)), 0o711);
      chmodSync(dirname(daemon.socketPath), 0o711);
      chmodSync(daemon.socketPath, 0o666);
      try {
        // Asynchronously: the daemon under test runs in this very process.
        const run = async (asNobody: boolean) => {
          const argv = [process.execPath, script, daemon.socketPath, hello];
          const [cmd, ...args] = asNobody
            ? ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', ...argv]
            : argv;
          const { stdout } = await promisify(execFile)(cmd as string, args, { encoding: 'utf8', timeout: 20_000 });
          return stdout.trim();
        };
        expect(await run(false)).toMatch(/^DATA [0-9a-f]{8}81/); // HELLO_OK
        expect(await run(true)).toMatch(/^(CLOSED|ERROR ECONNRESET|ERROR EPIPE)$/);
      } finally {
        chmodSync(daemon.socketPath, 0o600);
        chmodSync(dirname(daemon.socketPath), 0o700);
        chmodSync(dirname(dirname(daemon.socketPath)), 0o700);
      }
    },
  );

  it('refuses a second daemon on a live socket, replaces a stale one, and removes its socket on close', async () => {
    const config = remoteConfig(url, [{ tenantId: 't-p256', apiKey: signers.get('t-p256') as string }]);
    const first = await startTestDaemon(config);
    await expect(startTestDaemon(config)).rejects.toThrow(/already listening/);
    await first.close();
    expect(existsSync(config.socketPath)).toBe(false);
    // A stale socket file (its daemon died): bound by a process that exits without unlinking it.
    execFileSync('python3', [
      '-c',
      'import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])',
      config.socketPath,
    ]);
    expect(existsSync(config.socketPath)).toBe(true);
    const second = await startTestDaemon(config);
    const client = await session(second.socketPath);
    client.close();
    await second.close();
  });

  it('refuses a socket folder open to others or owned by another user', async () => {
    const config = remoteConfig(url, [{ tenantId: 't-p256', apiKey: signers.get('t-p256') as string }]);
    const dir = dirname(config.socketPath);
    const { mkdirSync, chownSync } = await import('node:fs');
    mkdirSync(dir, { mode: 0o700 });
    chmodSync(dir, 0o755);
    await expect(startTestDaemon(config)).rejects.toThrow(/mode 755/);
    chmodSync(dir, 0o700);
    if (process.getuid?.() !== 0) return; // giving a folder away needs root
    chownSync(dir, 65534, 65534);
    await expect(startTestDaemon(config)).rejects.toThrow(/owned by uid 65534/);
  });
});
