// `signbridge admin migrate --from sqlite:<data-dir> --to postgres://...`: a running installation moves to
// PostgreSQL with its tenants, keys, API keys, approvals, exceptions and whole audit chain; the service then runs on
// PostgreSQL with the same data dir (the same token) and everything carries on. A non-empty target is refused.
import { createHash, createPublicKey, verify } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parsePolicyDocument } from '../../src/policy/policy-file.js';
import { RulesPolicyEngine } from '../../src/policy/rules-engine.js';
import { openSqlite } from '../../src/store/sqlite/sqlite-driver.js';
import { postAction, runCli, type ServerProcess, startServerProcess } from '../helpers/cli.js';
import { logGet, parseVkey, publishCheckpoint, verifyCheckpoint } from '../helpers/log-client.js';
import { createTestDatabase, testPostgresUrl } from '../helpers/postgres.js';
import { refVerifyConsistency } from '../helpers/rfc9162-verify.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

const enabled = testPostgresUrl() !== undefined;
let svc: TestService;
let target: string;
let signer: string;
let approver: string;
let pendingId: string;
let publicKeyPem: string;
let server: ServerProcess | undefined;
let logBefore: string;
let vkeyBefore: string;
const hashOf = (m: string) => createHash('sha256').update(m).digest('base64');

beforeAll(async () => {
  if (!enabled) return;
  const policy = new RulesPolicyEngine(
    parsePolicyDocument('version: 1\nrules:\n  environments:\n    requireApproval: [production]\n', 'test'),
  );
  svc = await startTestService({
    policy,
    log: { checkpointEveryEntries: 1000, checkpointEverySeconds: 3600, public: false, intervalMs: 20 },
  });
  for (const [tenant, spec] of [
    ['mv-ec', 'ECC_NIST_P256'],
    ['mv-pq', 'ML_DSA_65'],
  ]) {
    expect(
      (await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: tenant, key_spec: spec })).status,
    ).toBe(201);
  }
  signer = await svc.apiKey('signer', 'mv-ec');
  approver = await svc.apiKey('approver', 'mv-ec');
  const admin = await svc.apiKey('admin', 'mv-ec');
  publicKeyPem = (await callAction(svc.app, admin, 'get_public_key', { tenant_id: 'mv-ec' })).body
    .public_key_pem as string;
  for (let i = 0; i < 20; i++) {
    const res = await callAction(svc.app, signer, 'sign', {
      tenant_id: 'mv-ec',
      algorithm: 'ECDSA_SHA_256',
      hash: hashOf(`a${i}`),
    });
    expect(res.status).toBe(200);
  }
  const pending = await callAction(svc.app, signer, 'sign', {
    tenant_id: 'mv-ec',
    algorithm: 'ECDSA_SHA_256',
    hash: hashOf('release'),
    environment: 'production',
  });
  expect(pending.status).toBe(202);
  pendingId = pending.body.request_id as string;
  logBefore = (await publishCheckpoint(svc.app, svc.operator)).text;
  vkeyBefore = (await logGet(svc.app, '/log/public-key', signer)).text;
  target = createTestDatabase('moved');
});
afterAll(async () => {
  await server?.stop();
  await svc?.close();
});

describe.skipIf(!enabled)('signbridge admin migrate', () => {
  it('moves a running installation and verifies the chain on the target', () => {
    const res = runCli(['admin', 'migrate', '--from', `sqlite:${svc.dataDir}`, '--to', target]);
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).toMatch(/tenants 2, keys 2, api_keys \d+/);
    expect(res.stdout).toMatch(/pending_requests 1/);
    // No lookup rows since migration 0030: each signature's SHA-256 is on its `signed` entry, moved with the log.
    expect(res.stdout).toMatch(/signature_lookups 0\b/);
    expect(res.stdout).toMatch(/signatures 0\b/);
    const entries = Number(/verified on the target: (\d+) entries/.exec(res.stdout)?.[1]);
    expect(entries).toBeGreaterThanOrEqual(23); // two tenants, 20 signatures, one pending request
    expect(res.stderr).toMatch(/source audit chain verified/);
  });

  it('refuses to move into a database that is not empty, and changes nothing there', () => {
    const before = runCli(['admin', 'audit', 'verify', '--database', target]).stdout;
    const res = runCli(['admin', 'migrate', '--from', `sqlite:${svc.dataDir}`, '--to', target]);
    expect(res.code).not.toBe(0);
    expect(res.stderr).toMatch(/target database is not empty \(tenants has 2 rows\); refusing to overwrite it/);
    expect(runCli(['admin', 'audit', 'verify', '--database', target]).stdout).toBe(before);
  });

  it('then runs on PostgreSQL with the same keys, API keys, pending approvals and chain', async () => {
    server = await startServerProcess(['--data-dir', svc.dataDir, '--database', target]);
    const approved = await postAction(server.url, 'approve_sign', approver, {
      tenant_id: 'mv-ec',
      request_id: pendingId,
    });
    expect(approved.status, JSON.stringify(approved.body)).toBe(200);
    const collected = await postAction(server.url, 'sign', signer, {
      tenant_id: 'mv-ec',
      algorithm: 'ECDSA_SHA_256',
      hash: hashOf('release'),
      request_id: pendingId,
    });
    expect(collected.status, JSON.stringify(collected.body)).toBe(200);
    // The seqs go on after the moved chain: the approval's signed entry comes after the 23 or more moved entries.
    const index = approved.headers.get('signbridge-log-index');
    expect(Number(index)).toBeGreaterThanOrEqual(23);
    expect(collected.headers.get('signbridge-log-index')).toBe(index);
    // The same key in the same token signed it: it verifies with the public key read before the move.
    const signature = Buffer.from(collected.body.signature as string, 'base64');
    expect(verify('sha256', Buffer.from('release'), createPublicKey(publicKeyPem), signature)).toBe(true);
    // A key made in the old SQLite file after the move is not known to the moved installation.
    const late = await postAction(server.url, 'get_public_key', await svc.apiKey('admin', 'mv-ec'), {
      tenant_id: 'mv-ec',
    });
    expect(late.status).toBe(401);
    const chain = runCli(['admin', 'audit', 'verify', '--database', target]);
    expect(chain.code, chain.stderr).toBe(0);

    // The transparency log moved too: same key and origin, and the next checkpoint extends the one signed before.
    const get = async (path: string) =>
      (await fetch(`${server?.url}${path}`, { headers: { authorization: `Bearer ${signer}` } })).text();
    expect(await get('/log/public-key')).toBe(vkeyBefore);
    const vkey = parseVkey(vkeyBefore);
    const old = verifyCheckpoint(logBefore, vkey);
    const published = await fetch(`${server.url}/log/checkpoint`, {
      method: 'POST',
      headers: { authorization: `Bearer ${svc.operator}` },
    });
    expect(published.status).toBe(200);
    const now = verifyCheckpoint(await published.text(), vkey);
    expect(now.size).toBeGreaterThan(old.size);
    const proof = JSON.parse(await get(`/log/proof/consistency?from=${old.size}&to=${now.size}`)).proof.map(
      (h: string) => Buffer.from(h, 'base64'),
    );
    expect(refVerifyConsistency(old.size, now.size, old.root, now.root, proof)).toBe(true);
  });

  it('refuses a source whose audit chain is broken', () => {
    const db = openSqlite(join(svc.dataDir, 'signbridge.db'));
    db.prepare("UPDATE audit_log SET actor = 'someone else' WHERE seq = 3").run();
    db.close();
    const res = runCli(['admin', 'migrate', '--from', `sqlite:${svc.dataDir}`, '--to', createTestDatabase('broken')]);
    expect(res.code).not.toBe(0);
    expect(res.stderr).toMatch(/source audit chain is broken at entry 3/);
  });
});
