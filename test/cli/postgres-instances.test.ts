// Two `signbridge server` processes on one PostgreSQL database (and one SoftHSM token: instances on one machine),
// as two instances behind a load balancer: a tenant made through one signs through the other, a key revoked with
// `signbridge admin ... --database` fails on both from the next request, and the audit chain both wrote verifies.
import { createHash, createPublicKey, verify } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packagePath } from '../../src/paths.js';
import { postAction, runCli, type ServerProcess, startServerProcess } from '../helpers/cli.js';
import { createTestDatabase, testPostgresUrl } from '../helpers/postgres.js';
import { makeTempDir } from '../helpers/service.js';

const enabled = testPostgresUrl() !== undefined;
let database: string;
const dataDir = makeTempDir();
let one: ServerProcess;
let two: ServerProcess;
let three: ServerProcess;

/** What the instances logged, for a failure's message: a key one instance cannot find is explained there. */
function serverLogs(): string {
  return [one, two, three].map((s, i) => `--- instance ${i + 1}:\n${s?.output().slice(-4000)}`).join('\n');
}

function admin(...args: string[]) {
  return runCli(['admin', ...args, '--database', database]);
}

beforeAll(async () => {
  if (!enabled) return;
  database = createTestDatabase('instances');
  // Production signatures wait for an approver: the approval tests below go through all three instances.
  const policy = join(dataDir, 'policy.yaml');
  writeFileSync(policy, 'version: 1\nrules:\n  environments:\n    requireApproval: [production]\n');
  const config = join(dataDir, 'config.yaml');
  writeFileSync(config, `policyFile: ${policy}\n`);
  [one, two, three] = await Promise.all([
    startServerProcess(['--config', config, '--data-dir', dataDir, '--database', database]),
    startServerProcess(['--config', config, '--data-dir', dataDir], { SIGNBRIDGE_DATABASE_URL: database }),
    startServerProcess(['--config', config, '--data-dir', dataDir, '--database', database]),
  ]);
});
afterAll(async () => {
  await Promise.all([one?.stop(), two?.stop(), three?.stop()]);
});

describe.skipIf(!enabled)('two service instances on one PostgreSQL database', () => {
  it('share tenants, keys and API keys, and revocation reaches both at the next request', async () => {
    const op = admin('api-key', 'create', '--role', 'operator');
    expect(op.code, op.stderr).toBe(0);
    const operator = op.stdout.trim();
    const created = await postAction(one.url, 'create_tenant', operator, {
      tenant_id: 'pg-acme',
      key_spec: 'ECC_NIST_P256',
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const signer = admin('api-key', 'create', '--role', 'signer', '--tenant', 'pg-acme').stdout.trim();
    const keyAdmin = admin('api-key', 'create', '--role', 'admin', '--tenant', 'pg-acme').stdout.trim();
    const pub = await postAction(two.url, 'get_public_key', keyAdmin, { tenant_id: 'pg-acme' });
    expect(pub.status).toBe(200);
    const message = Buffer.from('built on instance one, signed through instance two');
    const hash = createHash('sha256').update(message).digest('base64');
    for (const instance of [one, two]) {
      const res = await postAction(instance.url, 'sign', signer, {
        tenant_id: 'pg-acme',
        hash,
        algorithm: 'ECDSA_SHA_256',
      });
      expect(res.status, `${JSON.stringify(res.body)}\n${serverLogs()}`).toBe(200);
      const key = createPublicKey(pub.body.public_key_pem as string);
      expect(verify('sha256', message, key, Buffer.from(res.body.signature as string, 'base64'))).toBe(true);
    }
    const list = admin('api-key', 'list');
    const signerId = signer.slice(4, 20);
    expect(list.stdout).toContain(signerId);
    expect(admin('api-key', 'revoke', signerId).code).toBe(0);
    for (const instance of [one, two]) {
      const res = await postAction(instance.url, 'sign', signer, {
        tenant_id: 'pg-acme',
        hash,
        algorithm: 'ECDSA_SHA_256',
      });
      expect(res.status).toBe(401);
    }
  });

  it('takes a request on one instance, an approval on another, hands the signature out on a third', async () => {
    const signer = admin('api-key', 'create', '--role', 'signer', '--tenant', 'pg-acme').stdout.trim();
    const approvers = [1, 2].map(() =>
      admin('api-key', 'create', '--role', 'approver', '--tenant', 'pg-acme').stdout.trim(),
    );
    const hash = createHash('sha256').update('release 1.0').digest('base64');
    const asked = { tenant_id: 'pg-acme', hash, algorithm: 'ECDSA_SHA_256', environment: 'production' };
    const pending = await postAction(one.url, 'sign', signer, asked);
    expect(pending.status, JSON.stringify(pending.body)).toBe(202);
    const requestId = pending.body.request_id;
    // Two approvers at the same moment, through two instances: exactly one decision moves the request on.
    const decisions = await Promise.all(
      [two, three].map((instance, i) =>
        postAction(instance.url, 'approve_sign', approvers[i] as string, {
          tenant_id: 'pg-acme',
          request_id: requestId,
        }),
      ),
    );
    expect(
      decisions.map((d) => d.status).sort(),
      `${JSON.stringify(decisions.map((d) => d.body))}\n${serverLogs()}`,
    ).toEqual([200, 409]);
    const collected = await postAction(three.url, 'sign', signer, { ...asked, request_id: requestId });
    expect(collected.status, JSON.stringify(collected.body)).toBe(200);
    const again = await postAction(one.url, 'sign', signer, { ...asked, request_id: requestId });
    expect(again.body.signature).toBe(collected.body.signature);
    // One signature record for the request, whichever instance made it.
    const exported = admin('audit', 'export');
    const signed = exported.stdout
      .split('\n')
      .filter((line) => line.includes(String(requestId)) && line.includes('"signed"'));
    expect(signed).toHaveLength(1);
  });

  it('keeps one audit chain that both instances wrote, and admin audit verify proves it', async () => {
    const verified = admin('audit', 'verify');
    expect(verified.code, verified.stderr).toBe(0);
    expect(verified.stdout).toMatch(/\b\d+ entries\b|intact|verified/i);
  });

  it('imports the vulnerability database into PostgreSQL (admin vulndb import --database)', () => {
    const records = packagePath('test', 'fixtures', 'osv', 'db', 'npm');
    const first = admin('vulndb', 'import', records);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toMatch(/imported 2 OSV records .* \(2 new or changed\)/);
    // Kept in the database: the same records again change nothing.
    const again = admin('vulndb', 'import', records);
    expect(again.stdout).toMatch(/imported 2 OSV records .* \(0 new or changed\)/);
  });

  it('refuses a database URL that is not one, naming the setting and hiding the password', () => {
    const res = runCli(['admin', 'api-key', 'list', '--database', 'mysql://u:hunter2@db/x']);
    expect(res.code).not.toBe(0);
    expect(res.stderr).toMatch(/postgres:\/\/user:password@host:port\/dbname/);
    expect(res.stderr).not.toContain('hunter2');
  });

  it('waits for a database it cannot reach, with a line of progress, then fails naming it', () => {
    // A port nothing listens on: the server is "not up yet" (a restart, a failover).
    const unreachable = new URL(database);
    unreachable.port = '1';
    const res = runCli(['admin', 'api-key', 'list', '--database', unreachable.toString()], {
      SIGNBRIDGE_DATABASE_WAIT_SECONDS: '3',
    });
    expect(res.code).not.toBe(0);
    expect(res.stderr).toMatch(
      /waiting for the database postgresql:postgres:\/\/postgres@127\.0\.0\.1:1\/\S+ \(database connection ECONNREFUSED\); giving up in \d s/,
    );
    expect(res.stderr).toMatch(/cannot use the database .*:1\//);
    const bad = runCli(['admin', 'api-key', 'list', '--database', database], {
      SIGNBRIDGE_DATABASE_WAIT_SECONDS: 'soon',
    });
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toMatch(/SIGNBRIDGE_DATABASE_WAIT_SECONDS must be whole seconds from 0 to 600, got "soon"/);
  });

  it('fails clearly at start when the database does not exist, without waiting', () => {
    const missing = new URL(database);
    missing.pathname = '/no_such_database';
    const res = runCli(['admin', 'api-key', 'list', '--database', missing.toString()]);
    expect(res.code).not.toBe(0);
    expect(res.stderr).toMatch(/cannot use the database .*no_such_database.*does not exist/);
  });
});
