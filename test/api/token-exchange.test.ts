// POST /oauth/token: a CI job's ID token from a real HTTPS issuer (test/helpers/ci-issuer.ts: discovery, JWKS,
// rotation, stop/start) exchanged for a short-lived signer key that signs through /v1/pkcs11_sign on SoftHSM; every
// refusal of issue 22's list with the check it names, the issuer going down and coming back, outbound checks, and
// one use per token across two instances on PostgreSQL. The service's clock is virtual (real time plus an offset
// the tests move) and tokens are minted at that time, so nothing depends on how fast the machine is.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Ajv } from 'ajv';
import formats from 'ajv-formats';
import type BetterSqlite3 from 'better-sqlite3';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AppOptions, buildApp } from '../../src/app.js';
import type { NewTrustRule } from '../../src/auth/workload/trust-rule.js';
import { parsePolicyDocument } from '../../src/policy/policy-file.js';
import { RulesPolicyEngine } from '../../src/policy/rules-engine.js';
import type { KyselyStore } from '../../src/store/kysely-store.js';
import type { CiIssuer } from '../helpers/ci-issuer.js';
import { digestOf, verifyWithNode } from '../helpers/crypto.js';
import { createTestDatabase, testPostgresUrl } from '../helpers/postgres.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';
import { KEY_CACHE, PUBLIC_URL, WorkloadStand } from '../helpers/workload-stand.js';

const GRANT = 'urn:ietf:params:oauth:grant-type:token-exchange';
const JWT_TYPE = 'urn:ietf:params:oauth:token-type:jwt';

let stand: WorkloadStand;
let issuer: CiIssuer;
const now = () => stand.now();
const nowS = () => stand.nowS();
const advance = (ms: number) => stand.advance(ms);
const workloadOptions = (extra: Partial<NonNullable<AppOptions['workload']>> = {}) => stand.options(extra);
const addRule = (store: KyselyStore, rule: Omit<NewTrustRule, 'issuer'> & { issuer?: string }) =>
  stand.addRule(store, rule);
const mint = (claims: Record<string, unknown> = {}, opts: Parameters<CiIssuer['mint']>[1] = {}) =>
  stand.mint(claims, opts);

let svc: TestService;
// biome-ignore lint/suspicious/noExplicitAny: OpenAPI responses are untyped JSON
let documentedResponses: Record<string, any>;
const ajv = new Ajv({ strict: false, allErrors: true });
// ajv-formats is CommonJS: its plugin is the module's default export.
(formats as unknown as { default: (ajv: Ajv) => Ajv }).default(ajv);
let publicKeyPem: string;

interface Answer {
  status: number;
  body: Record<string, string | number>;
  headers: Record<string, unknown>;
}

async function exchange(
  app: FastifyInstance,
  token: string,
  tenant = 'ci',
  fields: Record<string, string> = {},
  remoteAddress = '127.0.0.1',
): Promise<Answer> {
  const res = await app.inject({
    method: 'POST',
    remoteAddress,
    url: '/oauth/token',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    payload: new URLSearchParams({
      grant_type: GRANT,
      subject_token: token,
      subject_token_type: JWT_TYPE,
      tenant_id: tenant,
      ...fields,
    }).toString(),
  });
  // No answer ever carries the token or any part of it (its signature, its payload).
  for (const part of token.split('.').filter((p) => p.length > 8)) expect(res.body).not.toContain(part);
  // Every answer is one the OpenAPI document lists, with the body its schema says (the fuzzer sends JSON only).
  const documented = documentedResponses[String(res.statusCode)];
  expect(documented, `status ${res.statusCode} documented`).toBeDefined();
  const validate = ajv.compile(documented.content['application/json'].schema);
  expect(validate(res.json()), ajv.errorsText(validate.errors)).toBe(true);
  if (res.statusCode >= 400) expect(documented.description).toContain(res.json().error);
  return { status: res.statusCode, body: res.json(), headers: res.headers };
}

/** A refusal as RFC 6749 §5.2 says, with the reason that names the failed check. */
function expectRefused(answer: Answer, reason: RegExp, error = 'invalid_grant', status = 400) {
  expect(answer.status, JSON.stringify(answer.body)).toBe(status);
  expect(answer.body.error).toBe(error);
  expect(answer.body.error_description).toMatch(reason);
  expect(answer.body.reason).toBe(answer.body.error_description);
  expect(answer.headers['cache-control']).toBe('no-store');
}

beforeAll(async () => {
  stand = await WorkloadStand.start();
  issuer = stand.issuer;
  svc = await startTestService(workloadOptions());
  documentedResponses = (await svc.app.inject({ method: 'GET', url: '/api/openapi.json' })).json().paths['/oauth/token']
    .post.responses;
  const created = await callAction(svc.app, svc.operator, 'create_tenant', {
    tenant_id: 'ci',
    key_spec: 'ECC_NIST_P256',
  });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  const signer = await svc.apiKey('signer', 'ci');
  publicKeyPem = (await callAction(svc.app, signer, 'get_public_key', { tenant_id: 'ci' })).body
    .public_key_pem as string;
  for (const tenant of ['edges', 'other']) {
    const made = await callAction(svc.app, svc.operator, 'create_tenant', {
      tenant_id: tenant,
      key_spec: 'ECC_NIST_P256',
    });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
  }
  await addRule(svc.store, {
    tenantId: 'ci',
    conditions: { repository_id: '100200300', ref: 'refs/heads/main', runner_environment: 'github-hosted' },
  });
});
afterAll(async () => {
  await svc?.close();
  await stand?.close();
});

describe('a good exchange', () => {
  it('returns a short-lived signer key (RFC 8693 response) that signs through /v1/pkcs11_sign', async () => {
    const answer = await exchange(svc.app, await mint());
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
    expect(answer.headers['cache-control']).toBe('no-store');
    expect(answer.body).toMatchObject({
      issued_token_type: 'urn:ietf:params:oauth:token-type:access_token',
      token_type: 'Bearer',
      tenant_id: 'ci',
      role: 'signer',
    });
    expect(answer.body.access_token).toMatch(/^sbk_/);
    // The rule's default key lifetime: 15 minutes.
    expect(answer.body.expires_in).toBe(15 * 60);
    expect(Date.parse(answer.body.expires_at as string) - now().getTime()).toBeGreaterThan(14 * 60_000);

    const artifact = Buffer.from('release artifact signed by a CI job');
    const signed = await callAction(svc.app, answer.body.access_token as string, 'pkcs11_sign', {
      tenant_id: 'ci',
      hash: digestOf('ECDSA_SHA_256', artifact).toString('base64'),
    });
    expect(signed.status, JSON.stringify(signed.body)).toBe(200);
    const signature = Buffer.from(signed.body.signature as string, 'base64');
    expect(verifyWithNode('ECDSA_SHA_256', publicKeyPem, artifact, signature)).toBe(true);

    const issued = (await exchangeAudit()).find((e) => e.outcome === 'issued');
    expect(issued?.details).toMatchObject({
      issuer: issuer.url,
      subject: 'repo:acme/app:ref:refs/heads/main',
      project: 'acme/app',
      ref: 'refs/heads/main',
      run_id: '9000000001',
    });
  });

  it('accepts the id_token subject type and a token fetched with GitHub’s token request protocol', async () => {
    const res = await fetchGithubToken(PUBLIC_URL);
    const answer = await exchange(svc.app, res, 'ci', {
      subject_token_type: 'urn:ietf:params:oauth:token-type:id_token',
    });
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
  });
});

describe('every refusal names the check that failed (RFC 6749 §5.2 invalid_grant)', () => {
  it('wrong iss: issuers match exactly (a trailing slash is another issuer), and discovery must name the issuer', async () => {
    const slash = `${issuer.url}/`;
    expectRefused(await exchange(svc.app, await mint({ iss: slash })), /tenant ci does not trust the issuer/);
    // Trusted under that spelling, the issuer's own discovery names the other spelling: refused.
    await addRule(svc.store, { tenantId: 'other', issuer: slash, conditions: { repository_id: '100200300' } });
    expectRefused(await exchange(svc.app, await mint({ iss: slash }), 'other'), /discovery document names issuer/);
  });

  it('wrong or missing aud', async () => {
    expectRefused(await exchange(svc.app, await mint({ aud: 'https://github.com/acme' })), /aud is missing or not one/);
    expectRefused(await exchange(svc.app, await mint({ aud: undefined })), /aud is missing or not one/);
  });

  it('expired, not yet valid, too old, no iat, no sub', async () => {
    // exp 10 minutes ago: past the 60 s leeway.
    const expired = await mint({}, { issuedAt: nowS() - 900, expiresInS: 300 });
    expectRefused(await exchange(svc.app, expired), /expired/);
    expectRefused(await exchange(svc.app, await mint({ nbf: nowS() + 600 })), /not yet valid/);
    // Issued 2 hours ago and still unexpired: older than the 3600 s maximum token age.
    const old = await mint({}, { issuedAt: nowS() - 7200, expiresInS: 3 * 3600 });
    expectRefused(await exchange(svc.app, old), /too old \(issued more than 3600 s ago\)/);
    expectRefused(await exchange(svc.app, await mint({ iat: undefined })), /no iat/);
    expectRefused(await exchange(svc.app, await mint({ sub: undefined })), /no sub/);
  });

  it('alg none and HS256 MACed with the public key are refused as algorithms, not tried', async () => {
    expectRefused(await exchange(svc.app, await mint({}, { alg: 'none' })), /signing algorithm is not allowed/);
    expectRefused(await exchange(svc.app, await mint({}, { alg: 'HS256' })), /signing algorithm is not allowed/);
  });

  it('a key not in the JWKS under a published kid: the signature does not verify', async () => {
    expectRefused(await exchange(svc.app, await mint({}, { key: 'unpublished' })), /signature does not verify/);
  });

  it('an unknown kid refetches the JWKS once (not again within the floor), then is refused', async () => {
    advance(KEY_CACHE.refetchFloorMs + 60_000);
    const before = issuer.fetches;
    const forged = await mint({}, { key: 'unpublished', kid: 'kid-nobody-published' });
    expectRefused(
      await exchange(svc.app, forged),
      /no key of the issuer matches .* also after fetching its keys again/,
    );
    expect(issuer.fetches).toBe(before + 1);
    const again = await mint({}, { key: 'unpublished', kid: 'kid-nobody-published' });
    expectRefused(await exchange(svc.app, again), /fetched less than 300 s ago/);
    expect(issuer.fetches).toBe(before + 1);
  });

  it('a rotated key is found by refetching on its new kid', async () => {
    advance(KEY_CACHE.refetchFloorMs + 60_000);
    await issuer.rotate();
    const before = issuer.fetches;
    const answer = await exchange(svc.app, await mint());
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
    expect(issuer.fetches).toBe(before + 1);
  });

  it('a replayed token: the second exchange is refused, and audited', async () => {
    const token = await mint();
    expect((await exchange(svc.app, token)).status).toBe(200);
    expectRefused(await exchange(svc.app, token), /token already used/);
    const refused = (await exchangeAudit()).filter((e) => e.outcome === 'refused');
    expect(refused.at(-1)?.details).toMatchObject({ issuer: issuer.url, reason: 'token already used' });
  });

  it('a token without jti is used once too (its signed claims are the replay key)', async () => {
    const token = await mint({ jti: undefined });
    expect((await exchange(svc.app, token)).status).toBe(200);
    expectRefused(await exchange(svc.app, token), /token already used/);
  });

  it('a jti-less token exchanged by the version before the upgrade stays used (its replay key was the token text’s hash)', async () => {
    // Until 2026-11-28 a token without jti was recorded as `sha256:<hex of its text>`, and is now recorded by its
    // signed claims. A token a job exchanged on the old version moments before the upgrade has only the old key on
    // record: here that row is written as the old version's exchange wrote it, and the new version refuses the token.
    advance(1000);
    const token = await mint({ jti: undefined });
    const usedAt = now();
    await svc.store.workload.useToken({
      issuer: issuer.url,
      tokenId: `sha256:${createHash('sha256').update(token).digest('hex')}`,
      tenantId: 'ci',
      usedAt: usedAt.toISOString(),
      expiresAt: new Date(usedAt.getTime() + 3_600_000).toISOString(),
    });
    expectRefused(await exchange(svc.app, token), /token already used/);
    // A token of the next second has no row of either kind, and is exchanged.
    advance(1000);
    expect((await exchange(svc.app, await mint({ jti: undefined }))).status).toBe(200);
  });

  it('issue 31: a jti-less token re-spelled in its signature’s last character is refused, and never a second key', async () => {
    // An RS256 token of an issuer that sets no jti (Kubernetes, generic issuers), exchanged once. A second later
    // than the test before's: a token of the same claims (the same iat) would be that one.
    advance(1000);
    const token = await mint({ jti: undefined });
    expect((await exchange(svc.app, token)).status).toBe(200);
    const issuedBefore = (await exchangeAudit()).filter((e) => e.outcome === 'issued').length;

    const variants = sameBytesSpellings(token);
    // 256 signature bytes in 342 characters leave 4 unused bits: 15 other spellings of the same bytes.
    expect(variants).toHaveLength(15);
    for (const variant of variants) {
      const [, , signature] = variant.split('.') as [string, string, string];
      expect(Buffer.from(signature, 'base64url')).toEqual(Buffer.from(token.split('.')[2] as string, 'base64url'));
      const answer = await exchange(svc.app, variant);
      expectRefused(answer, /not a valid signed JWT \(its signature sets unused bits in its last character/);
      expect(answer.body.access_token).toBeUndefined();
    }
    // Padding is another spelling of the same bytes, in any segment.
    const [header, payload, signature] = token.split('.') as [string, string, string];
    expectRefused(await exchange(svc.app, `${header}.${payload}.${signature}==`), /its signature has characters/);
    expect((await exchangeAudit()).filter((e) => e.outcome === 'issued')).toHaveLength(issuedBefore);
  });

  it('an issuer the tenant does not trust is refused before anything is fetched', async () => {
    const before = issuer.fetches;
    const foreign = await mint({ iss: 'https://token.actions.githubusercontent.com' });
    expectRefused(await exchange(svc.app, foreign), /does not trust the issuer "https:\/\/token\.actions/);
    // Tenant "edges" has rules, but none for this issuer yet.
    expectRefused(await exchange(svc.app, await mint(), 'edges'), /tenant edges does not trust the issuer/);
    expectRefused(await exchange(svc.app, await mint(), 'no-such-tenant'), /tenant no-such-tenant does not trust/);
    expect(issuer.fetches).toBe(before);
  });

  it('a self-made token gets the same answer for a tenant that exists and one that does not (no tenant oracle)', async () => {
    const selfMade = await stand.selfMadeToken();
    const raw = async (tenant: string) => {
      const res = await svc.app.inject({
        method: 'POST',
        url: '/oauth/token',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        payload: new URLSearchParams({
          grant_type: GRANT,
          subject_token: selfMade,
          subject_token_type: JWT_TYPE,
          tenant_id: tenant,
        }).toString(),
      });
      // Per-request headers aside (the body's length differs with the name's).
      const { date: _date, 'x-request-id': _id, 'content-length': _length, ...headers } = res.headers;
      // The tenant's name is the one difference allowed (it is the caller's own input).
      return { status: res.statusCode, headers, body: res.body.replaceAll(tenant, '<tenant>') };
    };
    const absent = await raw('no-such-tenant');
    expect(absent.status).toBe(400);
    expect(JSON.parse(absent.body)).toMatchObject({
      error: 'invalid_grant',
      error_description: 'tenant <tenant> does not trust the issuer "https://self-made.example"',
    });
    for (const existing of ['other', 'ci']) expect(await raw(existing)).toEqual(absent);
  });
});

describe('claims that miss a rule: each pattern edge through a real rule', () => {
  beforeAll(async () => {
    await addRule(svc.store, {
      tenantId: 'edges',
      conditions: {
        repository: 'acme/app',
        ref: 'refs/tags/v*',
        job_workflow_ref: 'acme/workflows/.github/workflows/**',
      },
    });
    await addRule(svc.store, { tenantId: 'edges', conditions: { repository_id: '100200300', ref: 'refs/heads/main' } });
    await addRule(svc.store, { tenantId: 'edges', conditions: { sub: 'repo:acme/**' } });
  });
  const tagged = {
    ref: 'refs/tags/v1.2.3',
    ref_type: 'tag',
    job_workflow_ref: 'acme/workflows/.github/workflows/sign.yml@refs/heads/main',
  };

  it('admits a token that meets every condition of a rule', async () => {
    const answer = await exchange(svc.app, await mint(tagged), 'edges');
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
  });

  it.each([
    ['acme/app never matches acme/app-evil', { repository: 'acme/app-evil' }, /repository is "acme\/app-evil"/],
    ['* stays within one segment', { ref: 'refs/tags/v1/evil' }, /ref is "refs\/tags\/v1\/evil"/],
    ['the pattern is anchored at the start', { ref: 'xrefs/tags/v1' }, /ref is "xrefs\/tags\/v1"/],
    [
      '** stays within the workflow folder',
      { job_workflow_ref: 'acme/other/.github/workflows/sign.yml@refs/heads/main' },
      /job_workflow_ref is "acme\/other/,
    ],
    ['a missing claim never matches', { job_workflow_ref: undefined }, /job_workflow_ref is missing/],
  ])('%s', async (_name, claims, reason) => {
    const answer = await exchange(svc.app, await mint({ ...tagged, ...claims }), 'edges');
    expectRefused(answer, /no trust rule of tenant edges admits the token/);
    expect(answer.body.error_description).toMatch(reason);
  });

  it('refs/heads/main never matches refs/heads/main2, and ** never crosses ":"', async () => {
    // The second rule wants ref refs/heads/main; the third sub repo:acme/**, but GitHub's sub has ":" after the repository.
    const answer = await exchange(svc.app, await mint({ ref: 'refs/heads/main2' }), 'edges');
    expectRefused(answer, /no trust rule/);
    expect(answer.body.error_description).toMatch(/ref is "refs\/heads\/main2", the rule wants "refs\/heads\/main"/);
    expect(answer.body.error_description).toMatch(
      /sub is "repo:acme\/app:ref:refs\/heads\/main", the rule wants "repo:acme\/\*\*"/,
    );
  });

  it('audits the refusal of a signed token with the per-rule reasons', async () => {
    const refused = (await exchangeAudit()).filter((e) => e.outcome === 'refused' && e.tenantId === 'edges');
    expect(JSON.stringify(refused.at(-1)?.details)).toMatch(/rule tr_[0-9a-f]{16}: /);
  });
});

describe('issue 31: a token that lives longer than the rule allows', () => {
  const TEN_YEARS_S = 3650 * 86_400;
  beforeAll(async () => {
    const made = await callAction(svc.app, svc.operator, 'create_tenant', {
      tenant_id: 'decade',
      key_spec: 'ECC_NIST_P256',
    });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
  });

  it('a ten-year token is refused under the default bound (a day); a rule with a larger bound admits it', async () => {
    const ruleId = await addRule(svc.store, { tenantId: 'decade', conditions: { repository_id: '100200300' } });
    const decade = await mint({}, { expiresInS: TEN_YEARS_S });
    expectRefused(
      await exchange(svc.app, decade, 'decade'),
      new RegExp(
        `no trust rule of tenant decade admits the token: rule ${ruleId}: the token lives 315360000 s \\(exp - iat\\), longer than the rule's max token lifetime of 86400 s \\(1d\\)`,
      ),
    );
    const refused = (await exchangeAudit()).filter((e) => e.outcome === 'refused' && e.tenantId === 'decade');
    expect(refused.at(-1)?.details.reason).toMatch(/max token lifetime/);
    // A day exactly is within the bound.
    expect((await exchange(svc.app, await mint({}, { expiresInS: 86_400 }), 'decade')).status).toBe(200);

    await addRule(svc.store, {
      tenantId: 'decade',
      conditions: { repository_id: '100200300' },
      maxTokenLifetimeS: TEN_YEARS_S,
    });
    const answer = await exchange(svc.app, decade, 'decade');
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
  });
});

describe('issue 31: velocity per identity counts one workload across its tags', () => {
  let release: TestService;
  const DOCS_RELEASE_TENANT = 'acme-release';

  /** The `--claim`s of the GitHub Actions release rule in docs/ci.md ("GitHub Actions: sign a JAR ..."). */
  function docsReleaseRuleClaims(): Record<string, string> {
    const doc = readFileSync(new URL('../../docs/ci.md', import.meta.url), 'utf8');
    const section = doc.slice(doc.indexOf('### GitHub Actions: sign a JAR'));
    const command = /```sh\n(signbridge admin trust add --tenant acme-release[\s\S]*?)```/.exec(section)?.[1] ?? '';
    const claims = [...command.matchAll(/--claim '?([^=\s]+)=([^'\s]+)'?/g)].map((m) => [m[1], m[2]]);
    expect(claims.length, 'the release rule of docs/ci.md').toBeGreaterThan(2);
    return Object.fromEntries(claims);
  }

  beforeAll(async () => {
    release = await startTestService({
      ...workloadOptions(),
      policy: new RulesPolicyEngine(
        parsePolicyDocument(
          `version: 1\ntenants:\n  ${DOCS_RELEASE_TENANT}:\n    velocity: { perIdentity: { max: 3, windowSeconds: 3600 } }\n`,
          'issue-31',
        ),
      ),
    });
    const made = await callAction(release.app, release.operator, 'create_tenant', {
      tenant_id: DOCS_RELEASE_TENANT,
      key_spec: 'ECC_NIST_P256',
    });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    await addRule(release.store, { tenantId: DOCS_RELEASE_TENANT, conditions: docsReleaseRuleClaims() });
  }, 120_000);
  afterAll(async () => release?.close());

  /** The token of the release workflow's run for tag `tag` of acme/app (each tag its own run and sub). */
  const tagToken = (tag: string, runId: string, workflow = 'release.yml') => {
    const ref = `refs/tags/${tag}`;
    const workflowRef = `acme/app/.github/workflows/${workflow}@${ref}`;
    return mint({
      sub: `repo:acme/app:ref:${ref}`,
      ref,
      ref_type: 'tag',
      workflow_ref: workflowRef,
      job_workflow_ref: workflowRef,
      run_id: runId,
    });
  };

  const signOnce = (key: string, message: string) =>
    callAction(release.app, key, 'pkcs11_sign', {
      tenant_id: DOCS_RELEASE_TENANT,
      hash: digestOf('ECDSA_SHA_256', Buffer.from(message)).toString('base64'),
    });

  it('3 per hour with tags v1.0.0, v1.0.1, v1.0.2 of one repository and workflow: 3 signatures, the 4th is 429', async () => {
    const statuses: number[] = [];
    let limited: Awaited<ReturnType<typeof signOnce>> | undefined;
    for (const [index, tag] of ['v1.0.0', 'v1.0.1', 'v1.0.2'].entries()) {
      const answer = await exchange(release.app, await tagToken(tag, `77000${index}`), DOCS_RELEASE_TENANT);
      expect(answer.status, JSON.stringify(answer.body)).toBe(200);
      for (let i = 0; i < 3; i++) {
        const signed = await signOnce(answer.body.access_token as string, `${tag} artifact ${i}`);
        statuses.push(signed.status);
        if (signed.status === 429) limited ??= signed;
      }
    }
    // Before, each tag's sub was a new identity: 9 signatures.
    expect(statuses).toEqual([200, 200, 200, 429, 429, 429, 429, 429, 429]);
    expect(limited?.body.error).toBe('rate_limited');
    expect(limited?.body.reason).toContain('velocity.perIdentity');
    expect(Number(limited?.headers['retry-after'])).toBeGreaterThan(0);
    const entry = (await release.store.audit.read(0, 100_000))
      .filter((e) => e.tenantId === DOCS_RELEASE_TENANT && e.outcome === 'rate_limited')
      .at(0);
    expect(entry?.details).toMatchObject({
      limit: 'perIdentity',
      counted: `${issuer.url} repository_id="100200300" job_workflow_ref="acme/app/.github/workflows/release.yml"`,
    });

    // Another workflow of the repository is another workload, with its own allowance.
    const nightly = await exchange(
      release.app,
      await tagToken('v1.0.2', '7700099', 'nightly.yml'),
      DOCS_RELEASE_TENANT,
    );
    expect(nightly.status, JSON.stringify(nightly.body)).toBe(200);
    expect((await signOnce(nightly.body.access_token as string, 'nightly')).status).toBe(200);
  });
});

describe('requests that are not a token exchange', () => {
  it('another grant type, a missing field, a repeated field, JSON, or a token that is no JWT', async () => {
    const token = await mint();
    expectRefused(
      await exchange(svc.app, token, 'ci', { grant_type: 'password' }),
      /grant_type must be/,
      'unsupported_grant_type',
    );
    expectRefused(
      await exchange(svc.app, token, 'ci', { subject_token_type: 'urn:ietf:params:oauth:token-type:saml2' }),
      /subject_token_type must be/,
      'invalid_request',
    );
    expectRefused(await exchange(svc.app, 'not-a-jwt'), /subject_token is not a JWT/, 'invalid_request');
    const missing = await svc.app.inject({
      method: 'POST',
      url: '/oauth/token',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      payload: `grant_type=${encodeURIComponent(GRANT)}&tenant_id=ci&subject_token_type=${encodeURIComponent(JWT_TYPE)}`,
    });
    expect(missing.statusCode).toBe(400);
    expect(missing.json()).toMatchObject({ error: 'invalid_request', error_description: 'subject_token is required' });
    // Fields named like Object properties are unknown parameters, ignored as RFC 6749 says (the shared form reader).
    const objectNames = await svc.app.inject({
      method: 'POST',
      url: '/oauth/token',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      payload: `__proto__=x&constructor=y&grant_type=${encodeURIComponent(GRANT)}&tenant_id=ci&subject_token_type=${encodeURIComponent(JWT_TYPE)}`,
    });
    expect(objectNames.statusCode).toBe(400);
    expect(objectNames.json()).toMatchObject({
      error: 'invalid_request',
      error_description: 'subject_token is required',
    });
    const twice = await svc.app.inject({
      method: 'POST',
      url: '/oauth/token',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      payload: `tenant_id=ci&tenant_id=edges&grant_type=${encodeURIComponent(GRANT)}`,
    });
    expect(twice.json()).toMatchObject({
      error: 'invalid_request',
      error_description: 'tenant_id is given more than once',
    });
    const json = await svc.app.inject({
      method: 'POST',
      url: '/oauth/token',
      payload: { grant_type: GRANT, subject_token: token, subject_token_type: JWT_TYPE, tenant_id: 'ci' },
    });
    expect(json.statusCode).toBe(400);
    expect(json.json().error_description).toMatch(/x-www-form-urlencoded/);
    // None of these used the token: it still exchanges.
    expect((await exchange(svc.app, token)).status).toBe(200);
  });
});

describe('the OpenAPI document', () => {
  it('describes POST /oauth/token with its form body, its answer and its RFC 6749 errors', async () => {
    const doc = (await svc.app.inject({ method: 'GET', url: '/api/openapi.json' })).json();
    const op = doc.paths['/oauth/token'].post;
    expect(op.requestBody.content['application/x-www-form-urlencoded'].schema.required).toEqual(
      expect.arrayContaining(['grant_type', 'subject_token', 'subject_token_type', 'tenant_id']),
    );
    expect(Object.keys(op.responses)).toEqual(expect.arrayContaining(['200', '400', '429', '503']));
    expect(JSON.stringify(op.responses['400'])).toContain('error_description');
  });
});

describe('the key a token became', () => {
  it('expires after the rule’s key minutes: then 401', async () => {
    await addRule(svc.store, { tenantId: 'other', conditions: { repository_id: '100200300' }, keyMinutes: 1 });
    const answer = await exchange(svc.app, await mint(), 'other');
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
    expect(answer.body.expires_in).toBe(60);
    const key = answer.body.access_token as string;
    const publicKey = () => callAction(svc.app, key, 'get_public_key', { tenant_id: 'other' });
    expect((await publicKey()).status).toBe(200);
    advance(61_000);
    const late = await publicKey();
    expect(late.status).toBe(401);
    expect(late.body.error).toBe('unauthorized');
  });
});

describe('outbound safety', () => {
  it('an issuer on a private address is refused without workload.allow, and allowed by a CIDR that holds it', async () => {
    for (const allow of [[], ['10.0.0.0/8', 'issuer.example.com']]) {
      const strict = await startTestService(workloadOptions({ allow }));
      try {
        await callAction(strict.app, strict.operator, 'create_tenant', { tenant_id: 'ci', key_spec: 'ECC_NIST_P256' });
        await addRule(strict.store, { tenantId: 'ci', conditions: { repository_id: '100200300' } });
        const before = issuer.fetches;
        const answer = await exchange(strict.app, await mint());
        expectRefused(
          answer,
          /resolves to 127\.0\.0\.1, a loopback, private or other special-use address.*workload\.allow/,
        );
        expect(issuer.fetches).toBe(before);
      } finally {
        await strict.close();
      }
    }
    const cidr = await startTestService(workloadOptions({ allow: ['127.0.0.0/8'] }));
    try {
      await callAction(cidr.app, cidr.operator, 'create_tenant', { tenant_id: 'ci', key_spec: 'ECC_NIST_P256' });
      await addRule(cidr.store, { tenantId: 'ci', conditions: { repository_id: '100200300' } });
      expect((await exchange(cidr.app, await mint())).status).toBe(200);
    } finally {
      await cidr.close();
    }
  });

  it('a host name is checked by the addresses it resolves to (localhost), and allowed by its name', async () => {
    const viaName = `https://localhost:${new URL(issuer.url).port}`;
    for (const allow of [[], ['localhost']]) {
      const named = await startTestService(workloadOptions({ allow }));
      try {
        await callAction(named.app, named.operator, 'create_tenant', { tenant_id: 'ci', key_spec: 'ECC_NIST_P256' });
        await addRule(named.store, { tenantId: 'ci', issuer: viaName, conditions: { repository_id: '100200300' } });
        const answer = await exchange(named.app, await mint({ iss: viaName }));
        if (allow[0] === 'localhost') {
          // Fetched (TLS checked against the name localhost): the issuer's discovery names its other URL.
          expectRefused(answer, /discovery document names issuer/);
        } else {
          // Nothing allowed: localhost resolves to a loopback address.
          expectRefused(answer, /host localhost resolves to .*special-use address/);
        }
      } finally {
        await named.close();
      }
    }
  });

  it('an issuer whose certificate the service does not trust (no workload.caFile) is refused', async () => {
    const noCa = await startTestService({ now, publicUrl: PUBLIC_URL, workload: { allow: ['127.0.0.1'] } });
    try {
      await callAction(noCa.app, noCa.operator, 'create_tenant', { tenant_id: 'ci', key_spec: 'ECC_NIST_P256' });
      await addRule(noCa.store, { tenantId: 'ci', conditions: { repository_id: '100200300' } });
      expectRefused(await exchange(noCa.app, await mint()), /TLS failed .* workload\.caFile/);
    } finally {
      await noCa.close();
    }
  });
});

describe('the issuer goes down and comes back', () => {
  it('503 + Retry-After where no cached key fits; cached keys keep working; all well when it is back', async () => {
    // A second instance on the same store that has never fetched the issuer's keys.
    const second = await buildApp({ store: svc.store, keyStore: svc.keyStores, ...workloadOptions() });
    await second.ready();
    let down = false;
    try {
      await issuer.stop();
      down = true;
      const unreachable = await exchange(second, await mint());
      expectRefused(unreachable, /issuer's keys cannot be fetched.*cannot be reached/, 'temporarily_unavailable', 503);
      expect(Number(unreachable.headers['retry-after'])).toBeGreaterThan(0);

      // The first instance holds the keys: it keeps exchanging, also past the refresh age (a failed refresh keeps them).
      expect((await exchange(svc.app, await mint())).status).toBe(200);
      advance(KEY_CACHE.refreshAfterMs + 60_000);
      const stale = await exchange(svc.app, await mint());
      expect(stale.status, JSON.stringify(stale.body)).toBe(200);

      await issuer.start();
      down = false;
      const back = await exchange(second, await mint());
      expect(back.status, JSON.stringify(back.body)).toBe(200);
    } finally {
      if (down) await issuer.start();
      await second.close();
    }
  });
});

describe('the database cannot write', () => {
  it('503 temporarily_unavailable with Retry-After (SQLITE_FULL), and the same token exchanges once there is room', async () => {
    if (svc.database) return; // SQLite's own fault here; PostgreSQL's faults have their own tests
    const sqlite = (svc.store as unknown as { sqlite: BetterSqlite3.Database }).sqlite;
    // Not one page more: SQLite answers SQLITE_FULL once the free pages are used up, as on a full disk.
    sqlite.pragma(`max_page_count = ${sqlite.pragma('page_count', { simple: true })}`);
    let full: Answer | undefined;
    let refusedToken = '';
    try {
      for (let i = 0; i < 5000 && !full; i++) {
        const token = await mint();
        const answer = await exchange(svc.app, token, 'ci', {}, `198.18.${Math.floor(i / 250)}.${i % 250}`);
        if (answer.status !== 200) {
          full = answer;
          refusedToken = token;
        }
      }
    } finally {
      sqlite.pragma('max_page_count = 1073741823');
    }
    expectRefused(
      full as Answer,
      /database cannot serve right now \(SQLITE_FULL\); retry later/,
      'temporarily_unavailable',
      503,
    );
    expect(Number((full as Answer).headers['retry-after'])).toBeGreaterThan(0);
    // The fault did not use the token up: the job's retry with it gets its key.
    expect((await exchange(svc.app, refusedToken)).status).toBe(200);
    expect((await exchange(svc.app, await mint())).status).toBe(200);
  });
});

describe('per-address rate limit', () => {
  it('answers 429 rate_limited with Retry-After past the limit', async () => {
    const limited = await buildApp({
      store: svc.store,
      keyStore: svc.keyStores,
      ...workloadOptions({ exchangeLimit: { max: 2, windowMs: 3_600_000 } }),
    });
    await limited.ready();
    try {
      // An address of its own: the counters are the store's, shared with the other tests' exchanges.
      const address = '192.0.2.7';
      for (let i = 0; i < 2; i++) expect((await exchange(limited, await mint(), 'ci', {}, address)).status).toBe(200);
      const over = await exchange(limited, await mint(), 'ci', {}, address);
      expectRefused(over, /limited to 2 per 3600 s per address/, 'rate_limited', 429);
      expect(Number(over.headers['retry-after'])).toBeGreaterThan(0);
      // Other addresses are not held back.
      expect((await exchange(limited, await mint(), 'ci', {}, '192.0.2.8')).status).toBe(200);
    } finally {
      await limited.close();
    }
  });
});

describe.skipIf(!testPostgresUrl())('PostgreSQL: one use per token across two instances', () => {
  it('a token exchanged at one instance is refused at the other, also when both race', async () => {
    const database = createTestDatabase('exchange');
    const first = await startTestService(workloadOptions(), { database });
    const otherStore = await first.openSameStore();
    const second = await buildApp({ store: otherStore, keyStore: first.keyStores, ...workloadOptions() });
    await second.ready();
    try {
      await callAction(first.app, first.operator, 'create_tenant', { tenant_id: 'ci', key_spec: 'ECC_NIST_P256' });
      await addRule(first.store, { tenantId: 'ci', conditions: { repository_id: '100200300' } });
      const token = await mint();
      expect((await exchange(first.app, token)).status).toBe(200);
      expectRefused(await exchange(second, token), /token already used/);

      const raced = await mint();
      const answers = await Promise.all([exchange(first.app, raced), exchange(second, raced)]);
      expect(answers.map((a) => a.status).sort()).toEqual([200, 400]);
    } finally {
      await second.close();
      await otherStore.close();
      await first.close();
    }
  });
});

/**
 * Every other text of `token` whose signature decodes to the same bytes: its last character with each other value
 * of the bits base64url leaves unused (RFC 4648 §3.5), which decoders ignore.
 */
function sameBytesSpellings(token: string): string[] {
  const [header, payload, signature] = token.split('.') as [string, string, string];
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
  const bytes = Buffer.from(signature, 'base64url');
  const head = signature.slice(0, -1);
  return [...alphabet]
    .map((last) => `${head}${last}`)
    .filter((spelling) => spelling !== signature && Buffer.from(spelling, 'base64url').equals(bytes))
    .map((spelling) => `${header}.${payload}.${spelling}`);
}

/** The audit entries of exchanges, oldest first. */
async function exchangeAudit(store: KyselyStore = svc.store) {
  return (await store.audit.read(0, 100_000)).filter((e) => e.action === 'workload_exchange');
}

async function fetchGithubToken(audience: string): Promise<string> {
  const { Agent, fetch } = await import('undici');
  const dispatcher = new Agent({ connect: { ca: readFileSync(issuer.caFile, 'utf8') } });
  const res = await fetch(`${issuer.github.requestUrl}&audience=${encodeURIComponent(audience)}`, {
    headers: { authorization: `Bearer ${issuer.github.requestToken}` },
    dispatcher,
  });
  expect(res.status).toBe(200);
  const { value } = (await res.json()) as { value: string };
  await dispatcher.close();
  return value;
}
