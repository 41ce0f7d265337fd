// The audit log: every decision and administrative action is appended, hash-chained; tampering is found by
// `signbridge admin audit verify`, which names the entry; `audit export` writes JSON lines.
import { createHash } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parsePolicyDocument } from '../../src/policy/policy-file.js';
import { RulesPolicyEngine } from '../../src/policy/rules-engine.js';
import { openSqlite } from '../../src/store/sqlite/sqlite-driver.js';
import type { AuditEntry } from '../../src/store/store.js';
import { runCli } from '../helpers/cli.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

const lodash = {
  vulnId: 'GHSA-35jh-r3h4-6jhm',
  severity: 'HIGH' as const,
  fixVersion: '4.17.21',
  component: 'lodash@4.17.20',
};
const policy = new RulesPolicyEngine(
  parsePolicyDocument('version: 1\nrules:\n  environments: { requireApproval: [production] }\n', 't'),
  { scan: (sbom) => (sbom.includes('lodash') ? [lodash] : []) },
);

let svc: TestService;
const hashOf = (m: string) => createHash('sha256').update(m).digest('base64');
let all: AuditEntry[];

beforeAll(async () => {
  svc = await startTestService({ policy });
  await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'au', key_spec: 'ECC_NIST_P256' });
  const signer = await svc.apiKey('signer', 'au');
  const approver = await svc.apiKey('approver', 'au');
  const admin = await svc.apiKey('admin', 'au');
  const sign = (m: string, extra = {}) =>
    callAction(svc.app, signer, 'sign', { tenant_id: 'au', algorithm: 'ECDSA_SHA_256', hash: hashOf(m), ...extra });
  expect((await sign('ok')).status).toBe(200);
  expect((await sign('vuln', { sbom: 'lodash' })).status).toBe(403);
  const p1 = await sign('p1', { environment: 'production' });
  const p2 = await sign('p2', { environment: 'production' });
  expect(
    (await callAction(svc.app, approver, 'approve_sign', { tenant_id: 'au', request_id: p1.body.request_id })).status,
  ).toBe(200);
  expect(
    (
      await callAction(svc.app, approver, 'approve_sign', {
        tenant_id: 'au',
        request_id: p2.body.request_id,
        decision: 'reject',
      })
    ).status,
  ).toBe(200);
  const exc = await callAction(svc.app, admin, 'create_exception', {
    tenant_id: 'au',
    vuln_id: lodash.vulnId,
    reason: 'accepted risk',
    expires_at: new Date(Date.now() + 86_400_000).toISOString(),
  });
  expect((await sign('vuln but excepted', { sbom: 'lodash' })).status).toBe(200);
  await callAction(svc.app, admin, 'revoke_exception', { tenant_id: 'au', exception_id: exc.body.exception_id });
  await callAction(svc.app, admin, 'rotate_key', { tenant_id: 'au' });
  all = await svc.store.audit.read(0, 1000);
});
afterAll(async () => svc?.close());

describe('audit log', () => {
  it('records every decision and administrative action, in order', () => {
    expect(all.map((e) => `${e.action}:${e.outcome}`)).toEqual([
      'create_tenant:created',
      'sign:signed',
      'sign:denied',
      'sign:pending_approval',
      'sign:pending_approval',
      'approve_sign:signed',
      'approve_sign:rejected',
      'create_exception:created',
      'sign:signed',
      'revoke_exception:revoked',
      'rotate_key:rotated',
    ]);
    const denied = all.find((e) => e.outcome === 'denied');
    expect(denied?.details).toMatchObject({
      rule: 'sbom-vulnerable',
      vuln_id: lodash.vulnId,
      fix_version: '4.17.21',
      hash: hashOf('vuln'),
    });
    expect(denied?.details.inputs_digest).toMatch(/^sha256:/);
    expect(all.every((e) => e.tenantId === 'au')).toBe(true);
    expect(all.map((e) => e.seq)).toEqual(all.map((_, i) => i + 1));
  });

  it('verifies intact, and exports JSON lines to a 0600 file', () => {
    const ok = runCli(['admin', 'audit', 'verify', ...svc.storeArgs]);
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout).toContain(`audit log intact: ${all.length + 0} entries`);
    const out = join(svc.dataDir, 'audit.jsonl');
    const exp = runCli(['admin', 'audit', 'export', ...svc.storeArgs, '--out', out]);
    expect(exp.code, exp.stderr).toBe(0);
    const lines = readFileSync(out, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines).toHaveLength(all.length);
    expect(lines[0]).toMatchObject({ seq: 1, action: 'create_tenant', prev_hash: '0'.repeat(64) });
    expect(statSync(out).mode & 0o777).toBe(0o600);
    const bad = runCli([
      'admin',
      'audit',
      'export',
      '--data-dir',
      svc.dataDir,
      '--out',
      join(svc.dataDir, 'no', 'such', 'dir'),
    ]);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain('ENOENT');
  });

  it.each([
    ['an edited entry', 'UPDATE audit_log SET outcome = ? WHERE seq = 3', ['signed'], 3, /edited/],
    ['a removed entry', 'DELETE FROM audit_log WHERE seq = 5', [], 6, /missing/],
    [
      'reordered entries',
      'UPDATE audit_log SET seq = CASE seq WHEN 7 THEN 8 ELSE 7 END WHERE seq IN (7, 8)',
      [],
      7,
      /predecessor/,
    ],
  ])('finds %s and names where', (_name, sql, params, seq, problem) => {
    // Work on a copy, so each case tampers with a pristine log.
    const copyDir = join(svc.dataDir, `copy-${seq}`);
    // Creates and migrates an empty store there (a failure says why: a loaded run once found no directory after it).
    const made = runCli(['admin', 'api-key', 'list', '--data-dir', copyDir]);
    expect(made.code, made.stderr).toBe(0);
    const db = openSqlite(join(copyDir, 'signbridge.db'));
    db.prepare('DELETE FROM audit_log').run();
    const insert = db.prepare(
      'INSERT INTO audit_log (seq, at, tenant_id, actor, action, outcome, details, prev_hash, hash) VALUES (?,?,?,?,?,?,?,?,?)',
    );
    for (const e of all)
      insert.run(e.seq, e.at, e.tenantId, e.actor, e.action, e.outcome, JSON.stringify(e.details), e.prevHash, e.hash);
    const intact = runCli(['admin', 'audit', 'verify', '--data-dir', copyDir]);
    expect(intact.code, intact.stderr).toBe(0);
    if (sql.startsWith('UPDATE audit_log SET seq')) {
      // swap two rows' positions (SQLite checks the primary key per row, so go through a free seq)
      db.prepare('UPDATE audit_log SET seq = 1000 WHERE seq = 7').run();
      db.prepare('UPDATE audit_log SET seq = 7 WHERE seq = 8').run();
      db.prepare('UPDATE audit_log SET seq = 8 WHERE seq = 1000').run();
    } else {
      db.prepare(sql).run(...params);
    }
    db.close();
    const res = runCli(['admin', 'audit', 'verify', '--data-dir', copyDir]);
    expect(res.code).not.toBe(0);
    expect(res.stderr).toMatch(new RegExp(`audit log broken at entry ${seq}:`));
    expect(res.stderr).toMatch(problem);
  });

  it('fails the request, and hands out no signature and no record, when the audit write fails', async () => {
    const signer = await svc.apiKey('signer', 'au');
    const before = (await svc.store.signatures.list('au', 1000)).length;
    // A real failure of the audit insert (as a full disk would fail it), made by the database itself.
    if (svc.database) {
      await svc.run(
        sql`CREATE FUNCTION audit_fails() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'disk full'; END $$ LANGUAGE plpgsql`,
      );
      await svc.run(
        sql`CREATE TRIGGER audit_fails BEFORE INSERT ON audit_log FOR EACH ROW EXECUTE FUNCTION audit_fails()`,
      );
    } else {
      await svc.run(
        sql`CREATE TRIGGER audit_fails BEFORE INSERT ON audit_log BEGIN SELECT RAISE(ABORT, 'disk full'); END`,
      );
    }
    try {
      const res = await callAction(svc.app, signer, 'sign', {
        tenant_id: 'au',
        algorithm: 'ECDSA_SHA_256',
        hash: hashOf('unaudited'),
      });
      expect(res.status).toBe(500);
      expect(res.body.signature).toBeUndefined();
      // The record shared the entry's transaction: it is gone with it.
      expect((await svc.store.signatures.list('au', 1000)).length).toBe(before);
    } finally {
      await svc.run(svc.database ? sql`DROP TRIGGER audit_fails ON audit_log` : sql`DROP TRIGGER audit_fails`);
    }
  });
});
