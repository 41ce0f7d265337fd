// The STS door's conformance: AssumeRoleWithWebIdentity and GetCallerIdentity on signbridge (POST /, the query
// protocol), called by clients nobody here wrote, one `describe` a client and then the errors they read:
// boto3's `sts` client, boto3's own credential chain from AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE +
// AWS_ENDPOINT_URL_STS, the AWS CLI, and @aws-sdk/client-kms's default chain. The web identity token is a CI job's
// OIDC token from the local HTTPS issuer (test/helpers/ci-issuer.ts); the temporary credentials then authenticate on
// the KMS endpoint (X-Amz-Security-Token). Every refusal gets STS's code, the exchange's audit entry (with
// `via: sts`) where the exchange audits one, and mints nothing. The service's clock is virtual (real time plus an
// offset the tests move), kept within SigV4's 5-minute window of the real clock the clients sign with.
// The KMS side: ListKeys names the tenant's key, and Sign makes a signature that verifies with node:crypto, whose
// audit entry carries the job's verified facts (the policy's inputs).
import { execFile, execFileSync } from 'node:child_process';
import { createHash, randomBytes, verify } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import fastify from 'fastify';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { awsEndpointRoutes } from '../../src/api/aws/endpoint.js';
import { stsHandler } from '../../src/api/aws/sts/sts-handler.js';
import { webIdentityRequest } from '../../src/api/aws/sts/web-identity-request.js';
import { buildApp } from '../../src/app.js';
import { NO_SEALER } from '../../src/auth/aws-credentials/aws-credentials.js';
import { awsRequestVerifier } from '../../src/auth/aws-credentials/aws-request-verifier.js';
import { parseAccessKeyId } from '../../src/auth/aws-credentials/credential-format.js';
import { IssuerKeys } from '../../src/auth/workload/issuer-keys.js';
import { TokenExchange } from '../../src/auth/workload/token-exchange.js';
import type { NewTrustRule } from '../../src/auth/workload/trust-rule.js';
import { sealerAmong } from '../../src/keys/sealer.js';
import type { Store } from '../../src/store/store.js';
import { AWS_CLI, botocoreMissing, isolatedAwsEnv, PYTHON } from '../helpers/botocore.js';
import type { CiIssuer } from '../helpers/ci-issuer.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';
import { KEY_CACHE, PUBLIC_URL, WorkloadStand } from '../helpers/workload-stand.js';

const missing = botocoreMissing();

/** `python3` on PATH when its botocore reads AWS_ENDPOINT_URL_<SERVICE> (1.31+) and it is not Debian's. */
function newerBotocorePython(): string[] {
  try {
    const version = execFileSync('python3', ['-c', 'import boto3, botocore; print(botocore.__version__)'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    }).trim();
    const [major, minor] = version.split('.').map(Number) as [number, number];
    return major > 1 || minor >= 31 ? ['python3'] : [];
  } catch {
    return [];
  }
}
const CLIENTS = join(import.meta.dirname, '..', 'fixtures', 'kms-api', 'sts_clients.py');
const SDK_SCRIPT = join(import.meta.dirname, '..', 'fixtures', 'kms-api', 'sdk_web_identity.mjs');

let stand: WorkloadStand;
let issuer: CiIssuer;
const now = () => stand.now();
const nowS = () => stand.nowS();
let svc: TestService;
let endpoint: string;
const publicPem: Record<string, string> = {};
const ruleIds: Record<string, string> = {};

interface Outcome {
  ok: boolean;
  code?: string;
  type?: string;
  message?: string;
  status?: number;
  // biome-ignore lint/suspicious/noExplicitAny: the clients' answers are untyped JSON
  [field: string]: any;
}

/** The exchange limit per address is raised: every client here calls from 127.0.0.1 (its own test is below). */
const workloadOptions = () => stand.options({ exchangeLimit: { max: 10_000, windowMs: 60_000 } });

/** A rule of `tenantId` that admits a push to main of acme/app (what `mint` makes), unless `rule` says otherwise. */
function addRule(tenantId: string, rule: Partial<Omit<NewTrustRule, 'tenantId'>> = {}): Promise<string> {
  return stand.addRule(svc.store, {
    tenantId,
    conditions: { repository_id: '100200300', ref: 'refs/heads/main' },
    ...rule,
  });
}

/** A GitHub-like token of a push to main of acme/app, for the service's public URL, minted at the service's time. */
const mint = (claims: Record<string, unknown> = {}, opts: Parameters<CiIssuer['mint']>[1] = {}) =>
  stand.mint(claims, opts);

const roleArn = (tenant: string, role = 'signer') => `arn:aws:iam::${tenant}:role/${role}`;

function python(job: unknown, env: Record<string, string> = {}, interpreter = PYTHON): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    const child = execFile(
      interpreter,
      [CLIENTS],
      { env: isolatedAwsEnv(env), timeout: 60_000 },
      (error, stdout, stderr) => {
        if (error) reject(new Error(`${error.message}\n${stderr}`));
        else resolve(JSON.parse(stdout) as Outcome);
      },
    );
    child.stdin?.end(JSON.stringify(job));
  });
}

/** boto3's sts.assume_role_with_web_identity, one call per entry. */
async function assume(
  calls: Record<string, { token: string; tenant?: string; roleArn?: string; session?: string; duration?: number }>,
): Promise<Record<string, Outcome>> {
  return (await python({
    mode: 'assume',
    endpoint,
    calls: Object.entries(calls).map(([name, c]) => ({
      name,
      RoleArn: c.roleArn ?? roleArn(c.tenant ?? 'ci'),
      RoleSessionName: c.session ?? 'release-job',
      WebIdentityToken: c.token,
      ...(c.duration !== undefined && { DurationSeconds: c.duration }),
    })),
  })) as Record<string, Outcome>;
}

const MESSAGE = Buffer.from('artifact signed by a CI job through STS credentials');
const digest = createHash('sha256').update(MESSAGE).digest();

/** boto3's kms client with the temporary credentials: list_keys and sign. */
function kmsWith(credentials: Record<string, string>, tenant = 'ci'): Promise<Outcome> {
  return python({ mode: 'kms', endpoint, credentials, tenant, digest: digest.toString('hex') });
}

/**
 * The credentials authenticated and acted for the job: ListKeys lists the tenant's key, and Sign made a signature
 * that verifies, whose audit entry carries the job's verified facts (the policy's inputs).
 */
async function expectAuthenticated(calls: Record<string, Outcome>, tenant: string, accessKeyId: string) {
  const { list_keys: list, sign } = calls as { list_keys: Outcome; sign: Outcome };
  expect(list.ok, JSON.stringify(list)).toBe(true);
  expect(list.keyArns.length).toBeGreaterThan(0);
  for (const arn of list.keyArns) expect(arn).toMatch(new RegExp(`^arn:aws:kms:[a-z0-9-]+:${tenant}:key/`));
  expect(sign.ok, JSON.stringify(sign)).toBe(true);
  // DIGEST with ECDSA_SHA_256: a DER signature of the message whose SHA-256 was sent.
  expect(verify('sha256', MESSAGE, publicPem[tenant] as string, Buffer.from(sign.signature, 'base64'))).toBe(true);
  const signed = (await svc.store.audit.read(0, 100_000))
    .filter((e) => e.tenantId === tenant && e.outcome === 'signed')
    .at(-1);
  expect(signed?.actor).toBe(parseAccessKeyId(accessKeyId)?.id);
  expect(signed?.details.workload).toMatchObject({ issuer: issuer.url, project: 'acme/app', run_id: '9000000001' });
}

async function exchangeAudit() {
  return (await svc.store.audit.read(0, 100_000)).filter((e) => e.action === 'workload_exchange');
}

async function workloadKeys(): Promise<number> {
  const rows = await svc.run(
    sql<{
      n: number | string;
    }>`select count(*) as n from api_keys where created_via = 'workload' and revoked_at is null`,
  );
  return Number(rows[0]?.n);
}

/** A refusal by STS: its code, status, and nothing minted. */
function expectRefused(outcome: Outcome, code: string, status: number, message: RegExp) {
  expect(outcome.ok, JSON.stringify(outcome)).toBe(false);
  expect(outcome.code).toBe(code);
  expect(outcome.status).toBe(status);
  expect(outcome.message).toMatch(message);
}

beforeAll(async () => {
  if (missing) return;
  stand = await WorkloadStand.start();
  issuer = stand.issuer;
  svc = await startTestService(workloadOptions());
  for (const tenant of ['ci', 'short', 'bystander']) {
    const made = await callAction(svc.app, svc.operator, 'create_tenant', {
      tenant_id: tenant,
      key_spec: 'ECC_NIST_P256',
    });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    const admin = await svc.apiKey('admin', tenant);
    publicPem[tenant] = (await callAction(svc.app, admin, 'get_public_key', { tenant_id: tenant })).body
      .public_key_pem as string;
  }
  // 60 minutes: the SDKs refresh credentials 5 (JS) to 15 (botocore) minutes before they expire, and a token is
  // exchanged once, so a shorter key would send them back to STS with a used token (docs/kms-api.md).
  ruleIds.ci = await addRule('ci', { keyMinutes: 60 });
  ruleIds.short = await addRule('short', { keyMinutes: 1 });
  endpoint = await svc.app.listen({ host: '127.0.0.1', port: 0 });
});
afterAll(async () => {
  await svc?.close();
  await stand?.close();
});

describe.skipIf(missing)('boto3: sts.assume_role_with_web_identity', () => {
  it('answers temporary credentials for the tenant the role ARN names, which authenticate on the KMS endpoint', async () => {
    const before = await workloadKeys();
    const { job } = await assume({ job: { token: await mint(), session: 'release-42' } });
    expect(job?.ok, JSON.stringify(job)).toBe(true);
    const credentials = job?.Credentials as Record<string, string>;
    expect(credentials.AccessKeyId).toMatch(/^SBTK[0-9A-F]{16}$/);
    expect(credentials.SecretAccessKey).toHaveLength(40);
    expect(credentials.SessionToken).toMatch(/^sbst_[0-9a-f]{16}_[A-Za-z0-9_-]{43}$/);
    // The rule's key lifetime (60 minutes), to the second, as STS writes it.
    const expiresIn = Date.parse(credentials.Expiration as string) - now().getTime();
    expect(expiresIn).toBeGreaterThan(60 * 60_000 - 5_000);
    expect(expiresIn).toBeLessThanOrEqual(60 * 60_000);
    expect(job).toMatchObject({
      SubjectFromWebIdentityToken: 'repo:acme/app:ref:refs/heads/main',
      AssumedRoleUser: {
        Arn: 'arn:aws:sts::ci:assumed-role/signer/release-42',
        AssumedRoleId: `${ruleIds.ci}:release-42`,
      },
      Audience: PUBLIC_URL,
      Provider: issuer.url,
    });
    expect(await workloadKeys()).toBe(before + 1);

    // The exchange's audit entry, as for POST /oauth/token, saying it came through STS.
    const issued = (await exchangeAudit()).filter((e) => e.outcome === 'issued').at(-1);
    expect(issued?.details).toMatchObject({
      via: 'sts',
      role_arn: 'arn:aws:iam::ci:role/signer',
      role_session_name: 'release-42',
      api_key_id: parseAccessKeyId(credentials.AccessKeyId as string)?.id,
      rule_id: ruleIds.ci,
      project: 'acme/app',
      ref: 'refs/heads/main',
      run_id: '9000000001',
    });
    // The key is the job's: tenant, signer role, its verified identity (the policy's inputs when it signs).
    const record = await svc.store.apiKeys.get(parseAccessKeyId(credentials.AccessKeyId as string)?.id as string);
    expect(record).toMatchObject({ tenantId: 'ci', role: 'signer', createdVia: 'workload' });
    expect(record?.workload).toMatchObject({ issuer: issuer.url, facts: { project: 'acme/app', runId: '9000000001' } });

    const calls = await kmsWith(credentials);
    await expectAuthenticated(calls, 'ci', credentials.AccessKeyId as string);
    // STS's GetCallerIdentity with them (aws-actions/configure-aws-credentials exports Account from it).
    expect(calls.caller).toEqual({
      ok: true,
      Account: 'ci',
      Arn: `arn:aws:sts::ci:assumed-role/${ruleIds.ci}/${credentials.AccessKeyId}`,
      UserId: `${ruleIds.ci}:${credentials.AccessKeyId}`,
    });
    const badSecret = await kmsWith({ ...credentials, SecretAccessKey: randomBytes(30).toString('base64') });
    expect(badSecret.caller).toMatchObject({ ok: false, code: 'SignatureDoesNotMatch', status: 403 });
    // Another session token of the right shape is not this key's: as at AWS, the key is then unknown.
    const wrong = await kmsWith({
      ...credentials,
      SessionToken: `sbst_${parseAccessKeyId(credentials.AccessKeyId as string)?.id}_${randomBytes(32).toString('base64url')}`,
    });
    expect(wrong.list_keys).toMatchObject({ ok: false, code: 'UnrecognizedClientException', status: 400 });
    expect(wrong.caller).toMatchObject({ ok: false, code: 'InvalidClientTokenId', status: 403 });
  });

  it('DurationSeconds shortens the session, never lengthens it past the rule’s key lifetime', async () => {
    const { short, long } = await assume({
      short: { token: await mint(), duration: 900 },
      long: { token: await mint({ jti: `other-${randomBytes(4).toString('hex')}` }), duration: 43_200 },
    });
    const expiresIn = (o: Outcome | undefined) => Date.parse(o?.Credentials.Expiration) - now().getTime();
    expect(short?.ok, JSON.stringify(short)).toBe(true);
    expect(expiresIn(short)).toBeGreaterThan(900_000 - 5_000);
    expect(expiresIn(short)).toBeLessThanOrEqual(900_000);
    expect(long?.ok, JSON.stringify(long)).toBe(true);
    expect(expiresIn(long)).toBeLessThanOrEqual(60 * 60_000);
    expect(expiresIn(long)).toBeGreaterThan(60 * 60_000 - 5_000);
  });
});

describe.skipIf(missing)('the SDKs’ own credential chains from a web identity token file', () => {
  function chainEnv(token: string, name: string): Record<string, string> {
    const file = join(svc.dataDir, `${name}-token`);
    writeFileSync(file, token, { mode: 0o600 });
    return {
      AWS_ROLE_ARN: roleArn('ci'),
      AWS_WEB_IDENTITY_TOKEN_FILE: file,
      AWS_ROLE_SESSION_NAME: `${name}-session`,
      AWS_ENDPOINT_URL_STS: endpoint,
      AWS_ENDPOINT_URL_KMS: endpoint,
      AWS_REGION: 'eu-central-1',
      AWS_DEFAULT_REGION: 'eu-central-1',
    };
  }

  it('boto3: a kms client with no credentials given assumes the role through signbridge’s STS and signs', async () => {
    // Debian's boto3 (/usr/bin/python3), and a newer one where the machine has it (botocore >= 1.31 reads
    // AWS_ENDPOINT_URL_STS itself; bookworm's 1.29 does not, and the fixture says so in endpointsFromEnv).
    const interpreters = [PYTHON, ...newerBotocorePython()];
    for (const interpreter of interpreters) {
      const out = await python(
        { mode: 'chain', tenant: 'ci', digest: digest.toString('hex') },
        chainEnv(await mint(), 'boto3'),
        interpreter,
      );
      const [major, minor] = String(out.botocore).split('.').map(Number) as [number, number];
      expect(out.endpointsFromEnv, out.botocore).toBe(major > 1 || minor >= 31);
      expect(out.method).toBe('assume-role-with-web-identity');
      expect(out.accessKeyId).toMatch(/^SBTK[0-9A-F]{16}$/);
      await expectAuthenticated(out, 'ci', out.accessKeyId);
      const issued = (await exchangeAudit()).filter((e) => e.outcome === 'issued').at(-1);
      expect(issued?.details).toMatchObject({ via: 'sts', role_session_name: 'boto3-session' });
    }
  });

  it('@aws-sdk/client-kms: the default chain (fromTokenFile) calls AWS_ENDPOINT_URL_STS', async () => {
    const env = isolatedAwsEnv(chainEnv(await mint(), 'jssdk'));
    const out = await new Promise<Outcome>((resolve, reject) => {
      execFile(
        process.execPath,
        [SDK_SCRIPT, 'ci', digest.toString('hex')],
        { env, timeout: 60_000 },
        (error, stdout, stderr) => {
          if (error) reject(new Error(`${error.message}\n${stderr}`));
          else resolve(JSON.parse(stdout) as Outcome);
        },
      );
    });
    expect(out.credentials, JSON.stringify(out)).toMatchObject({ ok: true });
    expect(out.credentials.accessKeyId).toMatch(/^SBTK[0-9A-F]{16}$/);
    expect(Date.parse(out.credentials.expiration) - now().getTime()).toBeGreaterThan(59 * 60_000);
    await expectAuthenticated(out, 'ci', out.credentials.accessKeyId);
    const issued = (await exchangeAudit()).filter((e) => e.outcome === 'issued').at(-1);
    expect(issued?.details).toMatchObject({ via: 'sts', role_session_name: 'jssdk-session' });
  });
});

describe.skipIf(missing)('the AWS CLI: aws sts assume-role-with-web-identity --endpoint-url', () => {
  const cli = (args: string[]) =>
    new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      execFile(
        AWS_CLI,
        ['--endpoint-url', endpoint, '--output', 'json', 'sts', 'assume-role-with-web-identity', ...args],
        { env: isolatedAwsEnv({ AWS_DEFAULT_REGION: 'eu-central-1', AWS_MAX_ATTEMPTS: '1' }), timeout: 120_000 },
        (error, stdout, stderr) =>
          resolve({ code: error ? (typeof error.code === 'number' ? error.code : -1) : 0, stdout, stderr }),
      );
    });

  it('prints the credentials, and the same token a second time is InvalidIdentityToken', async () => {
    const token = await mint();
    const args = [
      '--role-arn',
      roleArn('ci', 'ci/release'),
      '--role-session-name',
      'cli',
      '--web-identity-token',
      token,
    ];
    const first = await cli(args);
    expect(first.code, first.stderr).toBe(0);
    const answer = JSON.parse(first.stdout);
    expect(answer.Credentials.AccessKeyId).toMatch(/^SBTK[0-9A-F]{16}$/);
    expect(answer.AssumedRoleUser.Arn).toBe('arn:aws:sts::ci:assumed-role/release/cli');
    const second = await cli(args);
    expect(second.code).toBe(254);
    expect(second.stderr).toMatch(
      /An error occurred \(InvalidIdentityToken\) when calling the AssumeRoleWithWebIdentity operation( \(reached max retries: 0\))?: token already used/,
    );
    expect(second.stderr).not.toContain(token.split('.')[2]);
  });
});

describe.skipIf(missing)('refusals: STS’s code, the audit entry, nothing minted', () => {
  it('a token of an issuer the tenant does not trust: InvalidIdentityToken, not audited (anyone can forge one)', async () => {
    const [before, entries] = [await workloadKeys(), (await exchangeAudit()).length];
    const { foreign } = await assume({
      foreign: { token: await mint({ iss: 'https://token.actions.githubusercontent.com' }) },
    });
    expectRefused(foreign as Outcome, 'InvalidIdentityToken', 400, /tenant ci does not trust the issuer/);
    expect(foreign?.type).toBe('Sender');
    expect(await workloadKeys()).toBe(before);
    expect((await exchangeAudit()).length).toBe(entries);
  });

  it('a self-made token gets the same answer for a tenant that exists and one that does not (no tenant oracle)', async () => {
    const selfMade = await stand.selfMadeToken();
    const tenants = ['bystander', 'ci', 'no-such-tenant'];
    // boto3's sts client: the code, type, status and message it raises, the tenant's name taken out.
    const outcomes = await assume(Object.fromEntries(tenants.map((tenant) => [tenant, { token: selfMade, tenant }])));
    const seen = tenants.map((tenant) => JSON.stringify(outcomes[tenant]).replaceAll(tenant, '<tenant>'));
    expect(new Set(seen).size).toBe(1);
    expectRefused(
      outcomes['no-such-tenant'] as Outcome,
      'InvalidIdentityToken',
      400,
      /^tenant no-such-tenant does not trust the issuer "https:\/\/self-made\.example"$/,
    );
    // The bytes on the wire: the same but for the tenant's name and the request id.
    const raw = async (tenant: string) => {
      const res = await fetch(endpoint, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({
          Action: 'AssumeRoleWithWebIdentity',
          Version: '2011-06-15',
          RoleArn: roleArn(tenant),
          RoleSessionName: 'release-job',
          WebIdentityToken: selfMade,
        }).toString(),
      });
      const requestId = res.headers.get('x-amzn-requestid') as string;
      return `${res.status} ${res.headers.get('content-type')}\n${(await res.text()).replaceAll(requestId, '<id>').replaceAll(tenant, '<tenant>')}`;
    };
    const bodies = await Promise.all(tenants.map(raw));
    expect(bodies[0]).toMatch(/^400 text\/xml.*\n<ErrorResponse/);
    expect(new Set(bodies).size).toBe(1);
  });

  it('a token no rule admits: IDPRejectedClaim (403), audited with the rule’s reason', async () => {
    const before = await workloadKeys();
    const { rejected } = await assume({ rejected: { token: await mint({ ref: 'refs/heads/dev' }) } });
    expectRefused(rejected as Outcome, 'IDPRejectedClaim', 403, /no trust rule of tenant ci admits the token/);
    expect(rejected?.message).toMatch(/ref is "refs\/heads\/dev", the rule wants "refs\/heads\/main"/);
    expect(await workloadKeys()).toBe(before);
    const refused = (await exchangeAudit()).at(-1);
    expect(refused).toMatchObject({ outcome: 'refused', tenantId: 'ci' });
    expect(refused?.details).toMatchObject({ via: 'sts', role_arn: roleArn('ci'), role_session_name: 'release-job' });
    expect(refused?.details.reason).toMatch(/no trust rule/);
  });

  it('an expired token: ExpiredTokenException, audited', async () => {
    const before = await workloadKeys();
    const { expired } = await assume({
      expired: { token: await mint({}, { issuedAt: nowS() - 900, expiresInS: 300 }) },
    });
    expectRefused(expired as Outcome, 'ExpiredTokenException', 400, /the token has expired/);
    expect(await workloadKeys()).toBe(before);
    expect((await exchangeAudit()).at(-1)?.details).toMatchObject({
      via: 'sts',
      reason: expect.stringMatching(/expired/),
    });
  });

  it('a token used twice: InvalidIdentityToken the second time, audited, one key only', async () => {
    const token = await mint();
    const before = await workloadKeys();
    const { first } = await assume({ first: { token } });
    expect(first?.ok).toBe(true);
    const { second } = await assume({ second: { token } });
    expectRefused(second as Outcome, 'InvalidIdentityToken', 400, /token already used/);
    expect(await workloadKeys()).toBe(before + 1);
    expect((await exchangeAudit()).at(-1)?.details).toMatchObject({ via: 'sts', reason: 'token already used' });
  });

  it('a role ARN that names no role, or a tenant that does not exist (as one that trusts no issuer): refused before the token is used', async () => {
    const token = await mint();
    const [before, entries] = [await workloadKeys(), (await exchangeAudit()).length];
    const { user, account, nobody } = await assume({
      user: { token, roleArn: 'arn:aws:iam::ci:user/release-bot' },
      account: { token, roleArn: 'arn:aws:iam::not a tenant:role/x' },
      nobody: { token, tenant: 'no-such-tenant' },
    });
    expectRefused(user as Outcome, 'ValidationError', 400, /^Request ARN is invalid$/);
    expectRefused(account as Outcome, 'ValidationError', 400, /^Request ARN is invalid$/);
    expectRefused(nobody as Outcome, 'InvalidIdentityToken', 400, /^tenant no-such-tenant does not trust the issuer/);
    expect(await workloadKeys()).toBe(before);
    expect((await exchangeAudit()).length).toBe(entries);
    // None of these used the token up.
    expect((await assume({ good: { token } })).good?.ok).toBe(true);
  });

  it('the issuer cannot be reached: IDPCommunicationError (400, which botocore retries)', async () => {
    // An instance that has never fetched the issuer's keys.
    const second = await buildApp({ store: svc.store, keyStore: svc.keyStores, ...workloadOptions() });
    await second.ready();
    await issuer.stop();
    try {
      const answer = await second.inject({
        method: 'POST',
        url: '/',
        headers: { 'content-type': 'application/x-www-form-urlencoded; charset=utf-8' },
        payload: form({ RoleArn: roleArn('ci'), RoleSessionName: 'down', WebIdentityToken: await mint() }),
      });
      expect(answer.statusCode).toBe(400);
      expect(xmlField(answer.body, 'Code')).toBe('IDPCommunicationError');
      expect(xmlField(answer.body, 'Message')).toMatch(/issuer's keys cannot be fetched/);
    } finally {
      await issuer.start();
      await second.close();
    }
  });
});

describe.skipIf(missing)('temporary credentials past their expiry on the KMS endpoint', () => {
  it('ExpiredTokenException, as AWS answers an expired session token; before that they work', async () => {
    const { job } = await assume({ job: { token: await mint(), tenant: 'short' } });
    expect(job?.ok, JSON.stringify(job)).toBe(true);
    const credentials = job?.Credentials as Record<string, string>;
    // The rule's key lifetime (1 minute) is shorter than any DurationSeconds: it wins.
    expect(Date.parse(credentials.Expiration as string) - now().getTime()).toBeLessThanOrEqual(60_000);
    await expectAuthenticated(await kmsWith(credentials, 'short'), 'short', credentials.AccessKeyId as string);
    // 61 s later by the service's clock, still well within SigV4's 5-minute window of the client's.
    stand.advance(61_000);
    const late = await kmsWith(credentials, 'short');
    expect(late.list_keys).toMatchObject({
      ok: false,
      code: 'ExpiredTokenException',
      status: 400,
      message: 'The security token included in the request is expired',
    });
    expect(late.caller).toMatchObject({ ok: false, code: 'ExpiredToken', status: 400 });
    // Expired, and a wrong secret: the signature is checked first, so only the holder learns the key expired.
    const forged = await kmsWith({ ...credentials, SecretAccessKey: randomBytes(30).toString('base64') }, 'short');
    expect(forged.list_keys).toMatchObject({ ok: false, code: 'InvalidSignatureException' });
  });
});

function form(params: Record<string, string>): string {
  return new URLSearchParams({ Action: 'AssumeRoleWithWebIdentity', Version: '2011-06-15', ...params }).toString();
}

/** An element's text, its entities decoded. */
function xmlField(body: string, name: string): string | undefined {
  const text = new RegExp(`<${name}>([^<]*)</${name}>`).exec(body)?.[1];
  return text?.replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&amp;/g, '&');
}

describe.skipIf(missing)('the query protocol: actions, parameters and the error document', () => {
  const post = (payload: string, contentType = 'application/x-www-form-urlencoded') =>
    svc.app.inject({ method: 'POST', url: '/', headers: { 'content-type': contentType }, payload });

  it('another action is InvalidAction; no action is MissingAction; another version is InvalidAction', async () => {
    const other = await post('Action=AssumeRole&Version=2011-06-15&RoleArn=x');
    expect(other.statusCode).toBe(400);
    expect(other.headers['content-type']).toMatch(/^text\/xml/);
    expect(other.body).toMatch(
      /^<ErrorResponse xmlns="https:\/\/sts\.amazonaws\.com\/doc\/2011-06-15\/"><Error><Type>Sender<\/Type><Code>InvalidAction<\/Code><Message>Could not find operation AssumeRole for version 2011-06-15[^<]*<\/Message><\/Error><RequestId>[^<]+<\/RequestId><\/ErrorResponse>\n$/,
    );
    expect(xmlField(other.body, 'RequestId')).toBe(other.headers['x-amzn-requestid']);
    expect(xmlField((await post('Version=2011-06-15')).body, 'Code')).toBe('MissingAction');
    const version = await post('Action=AssumeRoleWithWebIdentity&Version=2010-01-01');
    expect(xmlField(version.body, 'Code')).toBe('InvalidAction');
    expect(xmlField(version.body, 'Message')).toBe(
      'Could not find operation AssumeRoleWithWebIdentity for version 2010-01-01',
    );
    expect(xmlField((await post('Action=AssumeRoleWithWebIdentity')).body, 'Code')).toBe('MissingParameter');
  });

  it('missing and malformed parameters: ValidationError in AWS’s words, InvalidParameterValue; the token is never quoted', async () => {
    const token = await mint();
    const none = await post(form({}));
    expect(none.statusCode).toBe(400);
    expect(xmlField(none.body, 'Code')).toBe('ValidationError');
    expect(xmlField(none.body, 'Message')).toBe(
      "3 validation errors detected: Value null at 'roleArn' failed to satisfy constraint: Member must not be null; " +
        "Value null at 'roleSessionName' failed to satisfy constraint: Member must not be null; " +
        "Value null at 'webIdentityToken' failed to satisfy constraint: Member must not be null",
    );
    const cases: [Record<string, string>, string, RegExp][] = [
      [
        { RoleSessionName: 'has space' },
        'ValidationError',
        /Value 'has space' at 'roleSessionName' failed to satisfy constraint: Member must satisfy regular expression pattern: \[\\w\+=,\.@-\]\*/,
      ],
      [{ RoleSessionName: 'x' }, 'ValidationError', /Member must have length greater than or equal to 2/],
      [
        { DurationSeconds: '100' },
        'ValidationError',
        /Value '100' at 'durationSeconds' failed to satisfy constraint: Member must have value greater than or equal to 900/,
      ],
      [{ DurationSeconds: '43201' }, 'ValidationError', /less than or equal to 43200/],
      [{ DurationSeconds: 'soon' }, 'InvalidParameterValue', /Value 'soon' for parameter DurationSeconds is invalid/],
      [{ RoleArn: 'arn:aws:iam::ci:role/' }, 'ValidationError', /^Request ARN is invalid$/],
      [{ Policy: '{}' }, 'InvalidParameterValue', /Policy is not supported by signbridge/],
      [
        { 'PolicyArns.member.1.arn': 'arn:aws:iam::aws:policy/x' },
        'InvalidParameterValue',
        /PolicyArns is not supported/,
      ],
      [
        { WebIdentityToken: 'x'.repeat(20_001) },
        'ValidationError',
        /The value at 'webIdentityToken' failed to satisfy constraint: Member must have length less than or equal to 20000/,
      ],
    ];
    for (const [change, code, message] of cases) {
      const answer = await post(
        form({ RoleArn: roleArn('ci'), RoleSessionName: 'job', WebIdentityToken: token, ...change }),
      );
      expect(answer.statusCode, JSON.stringify(change)).toBe(400);
      expect(xmlField(answer.body, 'Code'), JSON.stringify(change)).toBe(code);
      expect(xmlField(answer.body, 'Message')).toMatch(message);
      for (const part of token.split('.')) expect(answer.body).not.toContain(part);
    }
    const twice = await post(
      `${form({ RoleArn: roleArn('ci'), RoleSessionName: 'job', WebIdentityToken: token })}&RoleSessionName=b`,
    );
    expect(xmlField(twice.body, 'Code')).toBe('InvalidParameterValue');
    // None of these used the token.
    expect((await assume({ good: { token } })).good?.ok).toBe(true);
  });

  it('escapes what it quotes back', async () => {
    const answer = await post(form({ RoleArn: roleArn('ci'), RoleSessionName: '<b>&"\'', WebIdentityToken: 'abcd' }));
    expect(answer.body).toContain(`Value '&lt;b&gt;&amp;"'' at 'roleSessionName'`);
    expect(xmlField(answer.body, 'Message')).toContain(`Value '<b>&"'' at 'roleSessionName'`);
  });
});

/** signbridge's AWS endpoint with only STS behind it, on the test service's store and a TokenExchange of its own. */
async function stsApp(
  store: Store,
  sealer: Parameters<typeof stsHandler>[0]['sealer'],
  limit = { max: 10_000, windowMs: 60_000 },
) {
  const app = fastify();
  const exchange = new TokenExchange({
    store,
    keys: new IssuerKeys({ allow: ['127.0.0.1'], extraCaPem: stand.caPem, ...KEY_CACHE }, now),
    now,
    publicUrl: () => PUBLIC_URL,
    clockToleranceS: 60,
    maxTokenAgeS: 3600,
  });
  await app.register(awsEndpointRoutes, {
    kms: async () => ({ status: 500, contentType: 'text/plain', body: 'not here' }),
    sts: stsHandler({ store, sealer, exchange, verifier: awsRequestVerifier(store, sealer, now), now, limit }),
  });
  await app.ready();
  return app;
}

describe.skipIf(missing)('the service cannot mint: no sealer, a store fault', () => {
  it('no key store that can seal (AWS KMS alone): NotImplemented that says why, and the token is not used', async () => {
    const app = await stsApp(svc.store, undefined);
    try {
      const token = await mint();
      const answer = await app.inject({
        method: 'POST',
        url: '/',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        payload: form({ RoleArn: roleArn('ci'), RoleSessionName: 'job', WebIdentityToken: token }),
      });
      expect(answer.statusCode).toBe(501);
      expect(xmlField(answer.body, 'Type')).toBe('Receiver');
      expect(xmlField(answer.body, 'Code')).toBe('NotImplemented');
      expect(answer.body).toContain(NO_SEALER.slice(0, 40));
      expect((await assume({ good: { token } })).good?.ok).toBe(true);
    } finally {
      await app.close();
    }
  });

  it('the database cannot write: 503 ServiceUnavailable that says retry, and the same token works after', async () => {
    const full = Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' });
    const failing = new Proxy(svc.store, {
      get(target, name, receiver) {
        const part = Reflect.get(target, name, receiver);
        if (name !== 'workload') return part;
        return new Proxy(part, {
          get: (workload, method) =>
            method === 'useToken' ? async () => Promise.reject(full) : Reflect.get(workload, method).bind(workload),
        });
      },
    }) as Store;
    const app = await stsApp(failing, sealerAmong(svc.keyStores.stores));
    try {
      const token = await mint();
      const before = await workloadKeys();
      const answer = await app.inject({
        method: 'POST',
        url: '/',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        payload: form({ RoleArn: roleArn('ci'), RoleSessionName: 'job', WebIdentityToken: token }),
      });
      expect(answer.statusCode).toBe(503);
      expect(xmlField(answer.body, 'Code')).toBe('ServiceUnavailable');
      expect(xmlField(answer.body, 'Message')).toMatch(/database cannot serve right now \(SQLITE_FULL\); retry later/);
      expect(Number(answer.headers['retry-after'])).toBeGreaterThan(0);
      // The key minted on the way was withdrawn (revoked), and the token was not used up.
      expect(await workloadKeys()).toBe(before);
      expect((await assume({ good: { token } })).good?.ok).toBe(true);
    } finally {
      await app.close();
    }
  });
});

describe.skipIf(missing)('per-address limit, shared with POST /oauth/token', () => {
  it('past the limit: Throttling (which the SDKs retry with backoff), before the token is looked at', async () => {
    const app = await stsApp(svc.store, sealerAmong(svc.keyStores.stores), { max: 2, windowMs: 3_600_000 });
    try {
      const call = (address: string) =>
        app.inject({
          method: 'POST',
          url: '/',
          remoteAddress: address,
          headers: { 'content-type': 'application/x-www-form-urlencoded' },
          payload: form({ RoleArn: roleArn('ci'), RoleSessionName: 'job', WebIdentityToken: 'abcd' }),
        });
      for (let i = 0; i < 2; i++)
        expect(xmlField((await call('192.0.2.55')).body, 'Code')).toBe('InvalidIdentityToken');
      const over = await call('192.0.2.55');
      expect(over.statusCode).toBe(400);
      expect(xmlField(over.body, 'Code')).toBe('Throttling');
      expect(xmlField(over.body, 'Message')).toMatch(/^Rate exceeded: token exchanges are limited to 2 per 3600 s/);
      // POST /oauth/token counts on the same counter: two exchanges there use up this address's allowance here.
      for (let i = 0; i < 2; i++) {
        await svc.app.inject({
          method: 'POST',
          url: '/oauth/token',
          remoteAddress: '192.0.2.56',
          headers: { 'content-type': 'application/x-www-form-urlencoded' },
          payload: 'grant_type=password',
        });
      }
      expect(xmlField((await call('192.0.2.56')).body, 'Code')).toBe('Throttling');
    } finally {
      await app.close();
    }
  });
});

describe('docs/kms-api.md, "CI jobs: STS web identity"', () => {
  it('its GitHub Actions job names a role ARN this STS takes, the audience and the STS and KMS endpoints', () => {
    const doc = readFileSync(new URL('../../docs/kms-api.md', import.meta.url), 'utf8');
    const section = doc.slice(doc.indexOf('### GitHub Actions'));
    const workflow = parseYaml(/```yaml\n([\s\S]*?)```/.exec(section)?.[1] ?? '') as {
      permissions: Record<string, string>;
      jobs: { sign: { env: Record<string, string>; steps: { uses?: string; with?: Record<string, string> }[] } };
    };
    expect(workflow.permissions['id-token']).toBe('write');
    const { env, steps } = workflow.jobs.sign;
    expect(env.AWS_ENDPOINT_URL_STS).toMatch(/^https:\/\//);
    expect(env.AWS_ENDPOINT_URL_KMS).toBe(env.AWS_ENDPOINT_URL_STS);
    const action = steps.find((step) => step.uses?.startsWith('aws-actions/configure-aws-credentials@'));
    const inputs = action?.with ?? {};
    expect(inputs.audience).toBe(env.AWS_ENDPOINT_URL_STS);
    const request = webIdentityRequest(
      new Map([
        ['RoleArn', inputs['role-to-assume'] as string],
        ['RoleSessionName', 'release-9000000001'],
        ['WebIdentityToken', 'a.b.c'],
        ['DurationSeconds', String(inputs['role-duration-seconds'])],
      ]),
    );
    expect(request).toMatchObject({ tenantId: 'acme-release', roleName: 'release', durationSeconds: 3600 });
  });
});
