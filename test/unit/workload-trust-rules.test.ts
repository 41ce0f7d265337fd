// Claim patterns and trust-rule validation (src/auth/workload/): the edges issue 22 names, each of which a looser
// matcher (Vault's glob, an unanchored regular expression, a prefix test) gets wrong.
import { describe, expect, it } from 'vitest';
import {
  matchTrustRules,
  parseTokenLifetime,
  type TrustRule,
  TrustRuleInvalid,
  validateTrustRule,
} from '../../src/auth/workload/trust-rule.js';
import { trustRuleWarnings } from '../../src/auth/workload/trust-rules-service.js';
import { factsFromClaims, issuerKind, runUrlOf, stableIdentityOf } from '../../src/auth/workload/workload-identity.js';
import { claimMatches, matchesPattern, patternProblem } from '../../src/policy/claim-pattern.js';

const GITHUB = 'https://token.actions.githubusercontent.com';

describe('claim patterns', () => {
  it.each([
    ['acme/app', 'acme/app', true],
    ['acme/app', 'acme/app-evil', false],
    ['acme/app', 'acme/ap', false],
    ['acme/app', 'xacme/app', false],
    ['refs/heads/main', 'refs/heads/main2', false],
    ['refs/heads/main', 'refs/heads/main/x', false],
    ['refs/tags/v*', 'refs/tags/v1.2.3', true],
    ['refs/tags/v*', 'refs/tags/v', true],
    ['refs/tags/v*', 'refs/tags/v1/evil', false],
    ['refs/tags/v*', 'refs/heads/v1', false],
    ['refs/tags/**', 'refs/tags/release/v1', true],
    ['acme/*', 'acme/app', true],
    ['acme/*', 'acme/app/sub', false],
    ['acme/**', 'acme/app/sub', true],
    ['acme/**', 'acme', false],
    // `**` never crosses ':', so a subject pattern cannot absorb the ref or environment part.
    ['repo:acme/**', 'repo:acme/app:ref:refs/heads/main', false],
    ['repo:acme/*:ref:refs/heads/main', 'repo:acme/app:ref:refs/heads/main', true],
    ['repo:acme/*:ref:refs/heads/main', 'repo:acme/app:environment:prod', false],
    ['a.b', 'axb', false],
    ['(x)+', '(x)+', true],
    ['(x)+', 'xx', false],
  ])('%s against %s is %s', (pattern, value, expected) => {
    expect(matchesPattern(pattern, value)).toBe(expected);
  });

  it('takes linear time on patterns that make a backtracking matcher slow', () => {
    const value = `${'a'.repeat(1000)}`;
    expect(matchesPattern('*a*a*a*a*a*a*a*a*a*a*b', value)).toBe(false);
  });

  it.each(['', '*', '**', '*/**', '**:**', '***', 'x'.repeat(513), 'a\nb'])('refuses the pattern %j', (pattern) => {
    expect(patternProblem(pattern)).toBeDefined();
  });

  it('matches numbers, booleans, list entries and JSON pointers; a missing claim never', () => {
    const claims = {
      repository_id: 123,
      flag: true,
      aud: ['x', 'https://svc'],
      'kubernetes.io': { namespace: 'ci', serviceaccount: { name: 'builder' } },
    };
    expect(claimMatches(claims, 'repository_id', '123')).toBe(true);
    expect(claimMatches(claims, 'repository_id', '12')).toBe(false);
    expect(claimMatches(claims, 'flag', 'true')).toBe(true);
    expect(claimMatches(claims, 'aud', 'https://svc')).toBe(true);
    expect(claimMatches(claims, '/kubernetes.io/serviceaccount/name', 'builder')).toBe(true);
    expect(claimMatches(claims, '/kubernetes.io/namespace', 'prod')).toBe(false);
    expect(claimMatches(claims, 'environment', 'x*')).toBe(false);
  });
});

describe('trust rules', () => {
  const base = { tenantId: 't1', issuer: GITHUB };

  it('keeps a valid rule with its defaults (signer, 15 minutes, the service URL as audience)', () => {
    const rule = validateTrustRule({ ...base, conditions: { repository: 'acme/app', ref: 'refs/tags/v*' } });
    expect(rule).toMatchObject({ role: 'signer', keyMinutes: 15, audience: null });
  });

  it.each([
    [{ conditions: {} }, /at least one claim condition/],
    [{ conditions: { ref: 'refs/heads/main' } }, /must pin the workload/],
    [{ conditions: { repository: '**' } }, /pins nothing/],
    [{ conditions: { sub: '**/**' } }, /only wildcards and separators/],
    [{ conditions: { repository: '' } }, /is empty/],
    [{ conditions: { repository: 'a/b' }, role: 'admin' }, /cannot come from a workload/],
    [{ conditions: { repository: 'a/b' }, role: 'approver' }, /cannot come from a workload/],
    [{ conditions: { repository: 'a/b' }, keyMinutes: 61 }, /1 to 60/],
    [{ conditions: { repository: 'a/b' }, keyMinutes: 0 }, /1 to 60/],
    [{ conditions: { repository: 'a/b', aud: 'x' } }, /checked by the exchange/],
    [{ conditions: { repository: 'a/b', iss: 'https://evil.example' } }, /checked by the exchange/],
    [{ conditions: { repository: 'a/b' }, issuer: 'http://token.example' }, /https/],
    [{ conditions: { repository: 'a/b' }, issuer: 'https://x.example/?a=1' }, /no query/],
  ])('refuses %j', (change, message) => {
    expect(() => validateTrustRule({ ...base, ...change } as never)).toThrow(TrustRuleInvalid);
    expect(() => validateTrustRule({ ...base, ...change } as never)).toThrow(message);
  });

  const rule = (id: string, conditions: Record<string, string>, createdAt = '2026-01-01T00:00:00Z'): TrustRule => ({
    id,
    tenantId: 't1',
    issuer: GITHUB,
    audience: null,
    conditions,
    role: 'signer',
    keyMinutes: 15,
    maxTokenLifetimeS: 86_400,
    identityClaims: null,
    createdAt,
    createdBy: 'test',
  });

  it('admits on the first rule that holds and says for each rule why not', () => {
    const rules = [
      rule('tr_b', { repository: 'acme/app', ref: 'refs/tags/v*' }, '2026-01-02T00:00:00Z'),
      rule('tr_a', { repository: 'acme/app', environment: 'release' }),
    ];
    const claims = { repository: 'acme/app', ref: 'refs/heads/main2', environment: 'staging' };
    const refused = matchTrustRules(rules, claims);
    expect(refused).toEqual({
      refusals: [
        'rule tr_a: environment is "staging", the rule wants "release"',
        'rule tr_b: ref is "refs/heads/main2", the rule wants "refs/tags/v*"',
      ],
    });
    expect(matchTrustRules(rules, { ...claims, ref: 'refs/tags/v2' })).toEqual({ rule: rules[0] });
    expect(matchTrustRules(rules, { repository: 'acme/app-evil', ref: 'refs/tags/v2' })).toHaveProperty('refusals');
  });
});

describe('workload facts', () => {
  it('reads GitHub claims under the policy names and links the run', () => {
    const claims = {
      repository: 'acme/app',
      run_id: '42',
      run_attempt: '2',
      ref: 'refs/tags/v1',
      ref_type: 'tag',
      ref_protected: 'true',
      job_workflow_ref: 'acme/wf/.github/workflows/sign.yml@refs/heads/main',
      runner_environment: 'github-hosted',
    };
    const kind = issuerKind(claims);
    expect(kind).toBe('github');
    const facts = factsFromClaims(kind, claims);
    expect(facts).toMatchObject({
      project: 'acme/app',
      refProtected: true,
      runAttempt: '2',
      workflow: claims.job_workflow_ref,
    });
    expect(runUrlOf(kind, GITHUB, facts)).toBe('https://github.com/acme/app/actions/runs/42/attempts/2');
    expect(runUrlOf(kind, 'https://evil.example', facts)).toBeUndefined();
  });

  it('reads GitLab claims and links the pipeline', () => {
    const claims = { project_path: 'grp/app', pipeline_id: 7, ref: 'main', ref_protected: 'false', user_login: 'bob' };
    const facts = factsFromClaims(issuerKind(claims), claims);
    expect(facts).toMatchObject({ project: 'grp/app', runId: '7', refProtected: false, actor: 'bob' });
    expect(runUrlOf('gitlab', 'https://gitlab.example.com', facts)).toBe(
      'https://gitlab.example.com/grp/app/-/pipelines/7',
    );
  });
});

describe('issue 31: a workload’s stable identity (what velocity.perIdentity counts)', () => {
  const githubTag = (tag: string) => ({
    sub: `repo:acme/app:ref:refs/tags/${tag}`,
    repository: 'acme/app',
    repository_id: '100200300',
    ref: `refs/tags/${tag}`,
    run_id: String(tag.length * 1000),
    job_workflow_ref: `acme/app/.github/workflows/release.yml@refs/tags/${tag}`,
    workflow_ref: `acme/app/.github/workflows/release.yml@refs/tags/${tag}`,
  });

  it('GitHub: the repository id and the workflow file, the same for every tag and run', () => {
    const ids = ['v1.0.0', 'v1.0.1', 'v1.0.2'].map((tag) => stableIdentityOf('github', githubTag(tag), null));
    expect(new Set(ids).size).toBe(1);
    expect(ids[0]).toBe('repository_id="100200300" job_workflow_ref="acme/app/.github/workflows/release.yml"');
    // Another workflow of the repository, or another repository, is another workload.
    const nightly = { ...githubTag('v1'), job_workflow_ref: 'acme/app/.github/workflows/nightly.yml@refs/heads/main' };
    expect(stableIdentityOf('github', nightly, null)).not.toBe(ids[0]);
    expect(stableIdentityOf('github', { ...githubTag('v1'), repository_id: '7' }, null)).not.toBe(ids[0]);
  });

  it('GitLab: the project id and the pipeline definition without its ref; Kubernetes and others: sub', () => {
    const gitlab = (ref: string) => ({
      project_id: 4242,
      project_path: 'acme/app',
      pipeline_id: '55',
      ref,
      ci_config_ref_uri: `gitlab.example.com/acme/app//.gitlab-ci.yml@refs/tags/${ref}`,
    });
    expect(stableIdentityOf('gitlab', gitlab('v1'), null)).toBe(
      'project_id="4242" ci_config_ref_uri="gitlab.example.com/acme/app//.gitlab-ci.yml"',
    );
    expect(stableIdentityOf('gitlab', gitlab('v2'), null)).toBe(stableIdentityOf('gitlab', gitlab('v1'), null));
    expect(stableIdentityOf('kubernetes', { sub: 'system:serviceaccount:builds:signer' }, null)).toBe(
      'sub="system:serviceaccount:builds:signer"',
    );
    expect(stableIdentityOf('oidc', { sub: 'job-7' }, null)).toBe('sub="job-7"');
  });

  it('a rule’s identity claims replace the default; values are quoted so none passes for two', () => {
    expect(stableIdentityOf('github', githubTag('v1'), ['repository_id'])).toBe('repository_id="100200300"');
    expect(stableIdentityOf('oidc', { team: 'a" b="c' }, ['team'])).toBe('team="a\\" b=\\"c"');
    expect(
      stableIdentityOf('kubernetes', { 'kubernetes.io': { namespace: 'builds' } }, ['/kubernetes.io/namespace']),
    ).toBe('/kubernetes.io/namespace="builds"');
    // A long one (it is part of a counter's key) is kept as its digest: distinct values stay distinct.
    const long = (c: string) => stableIdentityOf('oidc', { team: c.repeat(600) }, ['team']);
    expect(long('a')).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(long('b')).not.toBe(long('a'));
  });

  it('a rule admits a token only within its max token lifetime and with every identity claim it names', () => {
    const rule = (over: Partial<TrustRule>): TrustRule => ({
      id: 'tr_1',
      tenantId: 't1',
      issuer: GITHUB,
      audience: null,
      conditions: { repository_id: '100200300' },
      role: 'signer',
      keyMinutes: 15,
      maxTokenLifetimeS: 86_400,
      identityClaims: null,
      createdAt: '2026-01-01T00:00:00Z',
      createdBy: 'test',
      ...over,
    });
    const claims = { ...githubTag('v1'), iat: 1000, exp: 1000 + 86_400 };
    expect('rule' in matchTrustRules([rule({})], claims)).toBe(true);
    expect(matchTrustRules([rule({})], { ...claims, exp: claims.exp + 1 })).toEqual({
      refusals: [
        "rule tr_1: the token lives 86401 s (exp - iat), longer than the rule's max token lifetime of 86400 s (1d)",
      ],
    });
    expect(matchTrustRules([rule({ identityClaims: ['environment'] })], claims)).toEqual({
      refusals: ["rule tr_1: the token has no environment, one of the rule's identity claims"],
    });
  });

  it('warns (without refusing) about identity claims that change per run or ref', () => {
    const warned = trustRuleWarnings({
      issuer: GITHUB,
      conditions: { repository_id: '1' },
      identityClaims: ['repository_id', 'sub', 'run_id'],
    });
    expect(warned).toEqual([expect.stringMatching(/identity claims sub, run_id change from run to run or ref to ref/)]);
    // A Kubernetes service account's sub names no ref.
    const k8s = { issuer: 'https://k8s.example.com', conditions: { sub: 'system:serviceaccount:a:b' } };
    expect(trustRuleWarnings({ ...k8s, identityClaims: ['sub'] })).toEqual([]);
    expect(trustRuleWarnings({ ...k8s, identityClaims: ['ref'] })).toHaveLength(1);
  });

  it('lifetimes as typed: whole numbers with s, m, h or d; the rule keeps 1m to 3650d', () => {
    expect(parseTokenLifetime('24h')).toBe(86_400);
    expect(parseTokenLifetime('90m')).toBe(5400);
    expect(parseTokenLifetime('3650d')).toBe(315_360_000);
    expect(parseTokenLifetime('600')).toBe(600);
    for (const bad of ['', '1.5h', '-1h', '24 hours', '1w', 'h']) {
      expect(() => parseTokenLifetime(bad), bad).toThrow(/whole number with an optional unit/);
    }
    const base = { tenantId: 't1', issuer: GITHUB, conditions: { repository_id: '1' } };
    expect(validateTrustRule(base).maxTokenLifetimeS).toBe(86_400);
    for (const seconds of [0, 59, 315_360_001, 1.5]) {
      expect(() => validateTrustRule({ ...base, maxTokenLifetimeS: seconds })).toThrow(/from 1m to 3650d/);
    }
    expect(() => validateTrustRule({ ...base, identityClaims: [] })).toThrow(/1 to 8 claim names/);
    expect(() => validateTrustRule({ ...base, identityClaims: ['iat'] })).toThrow(/differs from token to token/);
    expect(() => validateTrustRule({ ...base, identityClaims: ['a b'] })).toThrow(/"a b" is not a valid name/);
    expect(() => validateTrustRule({ ...base, identityClaims: ['repository_id', 'repository_id'] })).toThrow(
      /named twice/,
    );
  });
});
