// `signbridge admin trust add|list|remove`, run as the real CLI against a store in a temp data dir, or with
// SIGNBRIDGE_TEST_STORE=postgres against a database of the run's PostgreSQL cluster (`--database`; the test
// command's PostgreSQL pass runs this file too). The console's side of the same rules: test/web/console-trust.test.ts.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { matchTrustRules } from '../../src/auth/workload/trust-rule.js';
import { eventDataProblem } from '../../src/events/event-schemas.js';
import { packagePath } from '../../src/paths.js';
import type { KyselyStore } from '../../src/store/kysely-store.js';
import { openPostgresStore } from '../../src/store/postgres/postgres-store.js';
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { type ExportedAuditEntry, exportAudit, runCliAsync } from '../helpers/cli.js';
import { runSnippetInBackground } from '../helpers/doc-snippets.js';
import { createTestDatabase } from '../helpers/postgres.js';
import { makeTempDir } from '../helpers/service.js';
import { keyRecord } from '../helpers/store-records.js';

const GITHUB = 'https://token.actions.githubusercontent.com';
const GITLAB = 'https://gitlab.example.com';

let dataDir: string;
const database = process.env.SIGNBRIDGE_TEST_STORE === 'postgres' ? createTestDatabase('trust') : undefined;
// Asynchronous: these tests run the CLI dozens of times in a row (test/helpers/cli.ts, runCliAsync).
const cli = (...args: string[]) =>
  runCliAsync(['admin', ...args, '--data-dir', dataDir, ...(database ? ['--database', database] : [])]);
const trust = (...args: string[]) => cli('trust', ...args);

async function withStore<T>(fn: (store: KyselyStore) => Promise<T>): Promise<T> {
  const store = database ? openPostgresStore(database) : openSqliteStore(join(dataDir, 'signbridge.db'));
  await store.migrate();
  try {
    return await fn(store);
  } finally {
    await store.close();
  }
}

interface ListedRule {
  id: string;
  tenant_id: string;
  issuer: string;
  audience: string | null;
  conditions: Record<string, string>;
  role: string;
  key_minutes: number;
  created_by: string;
}

async function listed(tenant = 'acme'): Promise<ListedRule[]> {
  const res = await trust('list', '--tenant', tenant, '--json');
  expect(res.code, res.stderr).toBe(0);
  return JSON.parse(res.stdout) as ListedRule[];
}

/** The audit log as `admin audit export` writes it. */
const auditLog = (): ExportedAuditEntry[] =>
  exportAudit(['--data-dir', dataDir, ...(database ? ['--database', database] : [])]);

beforeAll(async () => {
  dataDir = makeTempDir();
  // A tenant row is all these commands need (no signing here): its key record points at nothing.
  await withStore((store) =>
    store.tenants.create('acme', { ...keyRecord('key-1', 'acme'), keyRef: 'none', publicKeyPem: '' }),
  );
});
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

describe('admin trust', () => {
  it(
    'adds a rule (id on stdout), lists it, removes it; each change is audited with the rule',
    { timeout: 300_000 },
    async () => {
      const added = await trust(
        'add',
        '--tenant',
        'acme',
        '--issuer',
        GITHUB,
        '--audience',
        'https://signbridge.example',
        '--claim',
        'repository_id=123456',
        '--claim',
        'repository=acme/app',
        '--claim',
        'ref=refs/tags/v*',
        '--claim',
        'event_name=push',
        '--key-minutes',
        '10',
        '--max-token-lifetime',
        '2h',
        '--identity-claim',
        'repository_id',
      );
      expect(added.code, added.stderr).toBe(0);
      const id = added.stdout.trim();
      expect(id).toMatch(/^tr_[0-9a-f]{16}$/);
      expect(added.stderr).toContain(`added trust rule ${id} to acme`);
      expect(added.stderr).toContain('repository=acme/app');
      expect(added.stderr).toContain('signer keys for 10 minutes');
      expect(added.stderr).not.toContain('warning');

      const [rule, ...others] = await listed();
      expect(others).toEqual([]);
      expect(rule).toMatchObject({
        id,
        tenant_id: 'acme',
        issuer: GITHUB,
        audience: 'https://signbridge.example',
        conditions: { repository_id: '123456', repository: 'acme/app', ref: 'refs/tags/v*', event_name: 'push' },
        role: 'signer',
        key_minutes: 10,
        max_token_lifetime_s: 7200,
        identity_claims: ['repository_id'],
      });
      expect(rule?.created_by).toMatch(/^cli:/);
      expect(added.stderr).toContain('tokens living longer than 2h are refused; velocity counts per repository_id');
      const table = await trust('list', '--tenant', 'acme');
      expect(table.stdout).toMatch(
        new RegExp(
          `^${id}\\t${GITHUB}\\thttps://signbridge.example\\tsigner\\t10\\trepository_id=123456 repository=acme/app ref=refs/tags/v\\* event_name=push\\t`,
          'm',
        ),
      );

      // The saved rule is the one the exchange will match: a name that only starts the same is another repository.
      const saved = await withStore((s) => s.workload.listTrustRules('acme', GITHUB));
      const claims = { repository_id: '123456', repository: 'acme/app', ref: 'refs/tags/v1.2', event_name: 'push' };
      expect('rule' in matchTrustRules(saved, claims)).toBe(true);
      expect('rule' in matchTrustRules(saved, { ...claims, repository: 'acme/app-evil' })).toBe(false);
      expect('rule' in matchTrustRules(saved, { ...claims, ref: 'refs/heads/v1' })).toBe(false);

      const removed = await trust('remove', id);
      expect(removed.code, removed.stderr).toBe(0);
      expect(removed.stderr).toContain(`removed trust rule ${id} of acme`);
      expect(await listed()).toEqual([]);
      expect((await trust('list', '--tenant', 'acme')).stderr).toContain('acme has no trust rules');

      const entries = auditLog().filter((e) => e.action === 'trust_rule' && e.details.rule_id === id);
      expect(entries.map((e) => e.outcome)).toEqual(['added', 'removed']);
      for (const entry of entries) {
        expect(entry.tenant_id).toBe('acme');
        expect(entry.actor).toMatch(/^cli:/);
        expect(entry.details).toMatchObject({
          issuer: GITHUB,
          audience: 'https://signbridge.example',
          conditions: rule?.conditions,
          role: 'signer',
          key_minutes: 10,
          max_token_lifetime_s: 7200,
          identity_claims: ['repository_id'],
          via: 'cli',
        });
      }
      // The trust.changed events (to subscribers) carry the whole rule, its token bounds included, and match
      // their published schema.
      const events = (await withStore((s) => s.events.readEvents(0, 1000))).filter(
        (e) => e.type === 'trust.changed' && e.data.rule_id === id,
      );
      expect(events.map((e) => e.data.change)).toEqual(['added', 'removed']);
      for (const event of events) {
        expect(eventDataProblem('trust.changed', event.data)).toBeUndefined();
        expect(event.data.rule).toEqual({
          audience: 'https://signbridge.example',
          conditions: rule?.conditions,
          role: 'signer',
          key_minutes: 10,
          max_token_lifetime_s: 7200,
          identity_claims: ['repository_id'],
        });
      }
      // The chain still verifies after the CLI's entries.
      expect((await cli('audit', 'verify')).code).toBe(0);
    },
  );

  it(
    'warns, without refusing, about a GitHub rule that pins names without repository_id or ref without the event',
    { timeout: 300_000 },
    async () => {
      const byName = await trust('add', '--tenant', 'acme', '--issuer', GITHUB, '--claim', 'repository=acme/app');
      expect(byName.code, byName.stderr).toBe(0);
      expect(byName.stderr).toMatch(/^warning: the rule pins repository by name without repository_id/m);
      const bySub = await trust(
        'add',
        '--tenant',
        'acme',
        '--issuer',
        GITHUB,
        '--claim',
        'sub=repo:acme/app:environment:release',
      );
      expect(bySub.stderr).toMatch(/^warning: the rule pins sub by name without repository_id/m);
      const refOnly = await trust(
        'add',
        '--tenant',
        'acme',
        '--issuer',
        GITHUB,
        '--claim',
        'repository_id=123456',
        '--claim',
        'ref=refs/heads/main',
      );
      expect(refOnly.code, refOnly.stderr).toBe(0);
      expect(refOnly.stderr).toMatch(
        /^warning: the rule pins ref without event_name or environment.*pull_request_target/m,
      );
      expect(refOnly.stderr).not.toContain('by name without repository_id');
      const withEnvironment = await trust(
        'add',
        '--tenant',
        'acme',
        '--issuer',
        GITHUB,
        '--claim',
        'repository_id=123456',
        '--claim',
        'ref=refs/heads/main',
        '--claim',
        'environment=release',
      );
      expect(withEnvironment.stderr).not.toContain('warning');
      // GitLab has neither repository_id nor event_name: its rules get no GitHub advice.
      const gitlab = await trust(
        'add',
        '--tenant',
        'acme',
        '--issuer',
        GITLAB,
        '--claim',
        'project_path=acme/app',
        '--claim',
        'ref=main',
      );
      expect(gitlab.code, gitlab.stderr).toBe(0);
      expect(gitlab.stderr).not.toContain('warning');
      const ids = [byName, bySub, refOnly, withEnvironment, gitlab].map((r) => r.stdout.trim());
      expect((await listed()).map((r) => r.id)).toEqual(ids);
      for (const id of ids) expect((await trust('remove', id)).code).toBe(0);
    },
  );

  // Thirteen CLI runs one after another: the time-out only catches a hang, whatever the machine's load.
  it('bad input: a clear message, exit 1, nothing saved or audited', { timeout: 300_000 }, async () => {
    const rulesBefore = await listed();
    const auditBefore = auditLog().length;
    const base = ['--tenant', 'acme', '--issuer', GITHUB];
    const pin = ['--claim', 'repository_id=123456'];
    // One refusal of each source, each shown as the CLI shows it (exit 1, the reason, nothing saved): the flags'
    // parsing, the rule's validation (its every refusal: test/unit/workload-trust-rules.test.ts), the store's tenant.
    for (const [args, message] of [
      [[...base], /a rule needs at least one claim condition/],
      [[...base, '--claim', 'repository_id'], /--claim wants NAME=PATTERN/],
      [[...base, '--claim', 'ref=refs/heads/main'], /a rule must pin the workload/],
      [[...base, ...pin, '--claim', 'repository_id=7'], /--claim repository_id is given twice/],
      [[...base, ...pin, '--role', 'admin'], /role admin cannot come from a workload identity/],
      [[...base, ...pin, '--key-minutes', '90'], /key minutes must be a whole number from 1 to 60/],
      [[...base, ...pin, '--key-minutes', 'ten'], /--key-minutes must be a whole number/],
      [['--tenant', 'nope', '--issuer', GITHUB, ...pin], /no tenant nope/],
      // Issue 31: the bound on a token's life (exp - iat), and the claims of the stable identity.
      [[...base, ...pin, '--max-token-lifetime', '30s'], /max token lifetime must be from 1m to 3650d/],
      [
        [...base, ...pin, '--max-token-lifetime', '-5h'],
        /max token lifetime must be a whole number with an optional unit/,
      ],
      [[...base, ...pin, '--identity-claim', 'jti'], /identity claim jti differs from token to token/],
    ] as const) {
      const res = await trust('add', ...args);
      expect(res.code, args.join(' ')).toBe(1);
      expect(res.stderr, args.join(' ')).toMatch(message);
      expect(res.stdout).toBe('');
    }
    const unknown = await trust('remove', 'tr_0123456789abcdef');
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain('no trust rule tr_0123456789abcdef');
    const noTenant = await trust('list', '--tenant', 'nope');
    expect(noTenant.code).toBe(1);
    expect(noTenant.stderr).toContain('no tenant nope');
    expect(await listed()).toEqual(rulesBefore);
    expect(auditLog().length).toBe(auditBefore);
  });

  it(
    "docs/ci.md's examples save rules that admit the job meant and refuse its near misses",
    { timeout: 300_000 },
    async () => {
      const env = { SIGNBRIDGE_DATA_DIR: dataDir, ...(database ? { SIGNBRIDGE_DATABASE_URL: database } : {}) };
      const saved = async (snippet: string) => {
        const id = (await runSnippetInBackground(snippet, dataDir, env, packagePath('docs', 'ci.md'))).stdout.trim();
        expect(id).toMatch(/^tr_[0-9a-f]{16}$/);
        const rule = await withStore((s) => s.workload.getTrustRule(id));
        expect(rule, snippet).toBeDefined();
        return [rule as NonNullable<typeof rule>];
      };
      const admits = (rules: Awaited<ReturnType<typeof saved>>, claims: Record<string, unknown>) =>
        'rule' in matchTrustRules(rules, claims);

      const github = await saved('trust-github');
      const release = {
        repository: 'acme/app',
        repository_id: '123456',
        repository_owner_id: '789',
        environment: 'release',
        ref: 'refs/tags/v1.2.0',
        event_name: 'push',
        runner_environment: 'github-hosted',
      };
      expect(admits(github, release)).toBe(true);
      expect(admits(github, { ...release, ref: 'refs/heads/main' })).toBe(false);
      expect(admits(github, { ...release, repository_id: '1234567' })).toBe(false);
      expect(admits(github, { ...release, runner_environment: 'self-hosted' })).toBe(false);
      expect(admits(github, { ...release, environment: undefined })).toBe(false);

      // Without --max-token-lifetime or --identity-claim: a day, and the issuer's default identity.
      expect(github[0]).toMatchObject({ maxTokenLifetimeS: 86_400, identityClaims: null });

      const gitlab = await saved('trust-gitlab');
      expect(gitlab[0]?.keyMinutes).toBe(10);
      const tagJob = {
        project_id: 4242,
        project_path: 'acme/app',
        ref: 'v1.2.0',
        ref_type: 'tag',
        ref_protected: 'true',
        ci_config_ref_uri: 'gitlab.example.com/acme/app//.gitlab-ci.yml@refs/tags/v1.2.0',
      };
      expect(admits(gitlab, tagJob)).toBe(true);
      expect(admits(gitlab, { ...tagJob, ref_protected: 'false' })).toBe(false);
      expect(
        admits(gitlab, { ...tagJob, ci_config_ref_uri: 'gitlab.example.com/evil/app//.gitlab-ci.yml@refs/tags/v1' }),
      ).toBe(false);

      const kubernetes = await saved('trust-kubernetes');
      const pod = {
        sub: 'system:serviceaccount:builds:signer',
        aud: ['https://signbridge.example.com'],
        'kubernetes.io': {
          namespace: 'builds',
          serviceaccount: { name: 'signer', uid: '0b6f4e2a-9c1d-4f3e-8a7b-2c5d6e7f8a9b' },
        },
      };
      expect(admits(kubernetes, pod)).toBe(true);
      // The same name re-created (another uid), and a neighbouring account.
      const recreated = {
        ...pod,
        'kubernetes.io': { ...pod['kubernetes.io'], serviceaccount: { name: 'signer', uid: 'x' } },
      };
      expect(admits(kubernetes, recreated)).toBe(false);
      expect(admits(kubernetes, { ...pod, sub: 'system:serviceaccount:builds:signer2' })).toBe(false);

      for (const [rule] of [github, gitlab, kubernetes]) {
        expect((await trust('remove', rule?.id as string)).code).toBe(0);
      }
    },
  );
});
