// SBOM gating end to end: OSV records imported with the CLI into a running service's store, a real CycloneDX
// SBOM in the signing request, exceptions that let a finding pass until revoked.
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packagePath } from '../../src/paths.js';
import { createApiKeyCli, postAction, runCli, type ServerProcess, startServerProcess } from '../helpers/cli.js';
import { makeTempDir } from '../helpers/service.js';

const dir = makeTempDir('sb-vulndb-');
const dataDir = join(dir, 'data');
const osv = packagePath('test', 'fixtures', 'osv');
const sbom = readFileSync(packagePath('test', 'fixtures', 'sbom', 'cyclonedx-1.5-service.cdx.json'), 'utf8');
let server: ServerProcess;
let signer: string;
let admin: string;

const call = (action: string, token: string, body: object) => postAction(server.url, action, token, body);
const sign = (extra: object) =>
  call('sign', signer, {
    tenant_id: 'svc',
    algorithm: 'ECDSA_SHA_256',
    hash: createHash('sha256').update('service.jar').digest('base64'),
    project: 'orders',
    artifact_type: 'jar',
    ...extra,
  });

beforeAll(async () => {
  const policy = join(dir, 'policy.yaml');
  writeFileSync(policy, 'version: 1\nrules:\n  sbom: { denySeverity: MEDIUM }\n');
  writeFileSync(join(dir, 'server.yaml'), `dataDir: ${dataDir}\npolicyFile: ${policy}\n`);
  const first = runCli(['admin', 'vulndb', 'import', join(osv, 'db', 'npm'), '--data-dir', dataDir]);
  expect(first.code, first.stderr).toBe(0);
  expect(first.stdout).toMatch(/imported 2 OSV records .* \(2 new or changed\)/);
  server = await startServerProcess(['--config', join(dir, 'server.yaml')]);
  const operator = createApiKeyCli(dataDir, 'operator');
  expect((await call('create_tenant', operator, { tenant_id: 'svc', key_spec: 'ECC_NIST_P256' })).status).toBe(201);
  signer = createApiKeyCli(dataDir, 'signer', 'svc');
  admin = createApiKeyCli(dataDir, 'admin', 'svc');
});
afterAll(async () => {
  await server?.stop();
});

describe('SBOM gating against the imported OSV database', () => {
  it('signs while the database knows no vulnerability of the SBOM components', async () => {
    expect((await sign({ sbom })).status).toBe(200);
  });

  it('denies once an import adds a matching record, without a restart, naming vulnerability, component and fix', async () => {
    const res = runCli(['admin', 'vulndb', 'import', join(osv, 'db'), '--data-dir', dataDir]);
    expect(res.code, res.stderr).toBe(0);
    const denied = await sign({ sbom });
    expect(denied.status).toBe(403);
    expect(denied.body).toMatchObject({
      error: 'policy_denied',
      vuln_id: 'GHSA-36p3-wjmg-h94x',
      fix_version: '5.3.18',
    });
    const digest = /\[inputs (sha256:[0-9a-f]{64})\]/.exec(denied.body.reason as string)?.[1];
    expect(digest).toBeDefined();
    const audit = runCli(['admin', 'audit', 'export', '--data-dir', dataDir]).stdout;
    expect(audit).toContain(`"inputs_digest":"${digest}"`);
    expect(denied.body.reason).toMatch(
      /^sbom-vulnerable: pkg:maven\/org\.springframework\/spring-\w+@5\.3\.17 is affected by GHSA-36p3-wjmg-h94x \(\w+\); fixed in 5\.3\.18/,
    );
  });

  it('lets the finding pass under an exception scoped to the project, and denies again once it is revoked', async () => {
    const exc = await call('create_exception', admin, {
      tenant_id: 'svc',
      vuln_id: 'GHSA-36p3-wjmg-h94x',
      project: 'orders',
      reason: 'class loader access not reachable in this service',
      expires_at: new Date(Date.now() + 7 * 86_400_000).toISOString(),
    });
    expect(exc.status).toBe(201);
    // Other findings of the same SBOM may remain; cover each one the service names, then sign.
    let res = await sign({ sbom });
    const covered = ['GHSA-36p3-wjmg-h94x'];
    while (res.status === 403 && !covered.includes(res.body.vuln_id as string)) {
      covered.push(res.body.vuln_id as string);
      await call('create_exception', admin, {
        tenant_id: 'svc',
        vuln_id: res.body.vuln_id,
        reason: 'accepted for the test',
        expires_at: new Date(Date.now() + 86_400_000).toISOString(),
      });
      res = await sign({ sbom });
    }
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect((await sign({ sbom, project: 'billing' })).status).toBe(403); // the first exception is scoped to orders
    await call('revoke_exception', admin, { tenant_id: 'svc', exception_id: exc.body.exception_id });
    const again = await sign({ sbom });
    expect(again.status).toBe(403);
    expect(again.body.vuln_id).toBe('GHSA-36p3-wjmg-h94x');
  });

  it('answers an SBOM that is no SPDX or CycloneDX document with 400 invalid_sbom', async () => {
    const res = await sign({ sbom: '{"bomFormat":"Something","specVersion":"9"}' });
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('invalid_sbom');
    expect(res.body.reason).toMatch(/^body\.sbom: /);
  });

  it('refuses to import invalid OSV files, naming the file, and changes nothing', () => {
    const res = runCli([
      'admin',
      'vulndb',
      'import',
      join(osv, 'invalid', 'two-keys-event.json'),
      '--data-dir',
      dataDir,
    ]);
    expect(res.code).not.toBe(0);
    expect(res.stderr).toContain('two-keys-event.json');
  });

  it('records the imports in the audit log', () => {
    const out = runCli(['admin', 'audit', 'export', '--data-dir', dataDir]);
    const imports = out.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l))
      .filter((e) => e.action === 'vulndb_import');
    expect(imports.length).toBe(2);
    expect(runCli(['admin', 'audit', 'verify', '--data-dir', dataDir]).code).toBe(0);
  });
});
