// Issue 44: a secret sent where a credential id belongs must not be written down. The audit log, the transparency
// log (whose entries are the audit entries) and the service log are kept for good and read by people who hold no
// credential, and nobody needs a credential to be refused. Live secrets are sent in the wrong places, by boto3 with
// the two fields of a credentials file swapped and by raw HTTP, at every door that refuses a caller: KMS (SigV4), STS,
// the /v1 API's Bearer check, Vault's token check, POST /oauth/token and the trial endpoint. Then no secret's text
// is in `admin audit export`, in any row of the database (the log's tiles, the event outbox) or in the service's log
// output at trace level; and each KMS refusal is still audited, with only a signbridge-form access key id.

import { createHash } from 'node:crypto';
import { Writable } from 'node:stream';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REDACT_PATHS, serializeRequest } from '../../src/app.js';
import { createAwsApiKey } from '../../src/auth/aws-credentials/aws-credentials.js';
import { UNRECOGNIZED_CREDENTIAL } from '../../src/auth/credential-echo.js';
import { type Boto3Call, botocoreMissing, runBoto3Kms } from '../helpers/botocore.js';
import { exportAudit } from '../helpers/cli.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

const missing = botocoreMissing();
const TENANT = 'echo-team';

let svc: TestService;
let endpoint: string;
let serviceLog = '';
/** Every secret sent in the wrong place: none of them may be written anywhere. */
const secrets: string[] = [];
/** AWS-format keys whose secrets have each shape a client's swapped file can put in `Credential=`. */
const swapped: { accessKeyId: string; secret: string; shape: string }[] = [];
let bearer: string;

/** A signbridge-made AWS secret of each shape: with '/', with '+' but no '/', with neither (base64's 64 letters). */
async function awsKeysOfEachShape() {
  const shapes: Record<string, (s: string) => boolean> = {
    slash: (s) => s.includes('/'),
    plus: (s) => s.includes('+') && !s.includes('/'),
    plain: (s) => !s.includes('+') && !s.includes('/'),
  };
  for (let tries = 0; tries < 500 && swapped.length < 3; tries++) {
    const made = await createAwsApiKey(svc.store, svc.keyStore, 'signer', TENANT, 'swapped');
    for (const [shape, fits] of Object.entries(shapes)) {
      if (fits(made.secretAccessKey) && !swapped.some((k) => k.shape === shape)) {
        swapped.push({ accessKeyId: made.accessKeyId, secret: made.secretAccessKey, shape });
      }
    }
  }
  expect(swapped.map((k) => k.shape).sort()).toEqual(['plain', 'plus', 'slash']);
}

function amzDate(at = new Date()): string {
  return at
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d{3}/, '');
}

/** POST / as a KMS call with this Authorization header (unsigned: every one of these is refused before that). */
async function kmsCall(authorization: string, operation = 'Sign') {
  const response = await fetch(endpoint, {
    method: 'POST',
    headers: {
      authorization,
      'x-amz-date': amzDate(),
      'x-amz-target': `TrentService.${operation}`,
      'content-type': 'application/x-amz-json-1.1',
    },
    body: '{}',
  });
  return { status: response.status, body: (await response.json()) as { __type: string; message: string } };
}

async function everyDatabaseRow(): Promise<string> {
  const tables = await svc.run<{ name: string }>(
    svc.database
      ? sql`SELECT table_name AS name FROM information_schema.tables WHERE table_schema = current_schema()`
      : sql`SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`,
  );
  const dump: string[] = [];
  for (const { name } of tables) {
    for (const row of await svc.run<Record<string, unknown>>(sql`SELECT * FROM ${sql.table(name)}`)) {
      for (const value of Object.values(row)) {
        dump.push(
          Buffer.isBuffer(value) || value instanceof Uint8Array ? Buffer.from(value).toString('latin1') : String(value),
        );
      }
    }
  }
  return dump.join('\n');
}

beforeAll(async () => {
  if (missing) return;
  const captured = new Writable({
    write(chunk, _encoding, done) {
      serviceLog += chunk.toString();
      done();
    },
  });
  // The service's own logger configuration (src/server.ts), at its most talkative level.
  svc = await startTestService({
    logger: {
      level: 'trace',
      stream: captured,
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      serializers: { req: serializeRequest },
    },
    kmsApi: { enabled: true, heldWaitMs: 1000, vaultMount: 'transit' },
    log: { checkpointEveryEntries: 1, checkpointEverySeconds: 3600, public: false, intervalMs: 20 },
  });
  expect(
    (await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: TENANT, key_spec: 'ECC_NIST_P256' })).status,
  ).toBe(201);
  bearer = await svc.apiKey('signer', TENANT);
  await awsKeysOfEachShape();
  secrets.push(bearer, bearer.slice('sbk_'.length + 17), ...swapped.map((k) => k.secret));
  endpoint = await svc.app.listen({ host: '127.0.0.1', port: 0 });
});
afterAll(async () => svc?.close());

describe.skipIf(missing)('credentials sent in the wrong place are written nowhere', () => {
  it('boto3 with the credentials file fields swapped, and with a Bearer key as access key id: refused, audited without the text', async () => {
    const message = createHash('sha256').update('artifact').digest().toString('base64');
    const sign = (name: string, accessKey: string, secretKey: string): Boto3Call => ({
      name,
      access_key: accessKey,
      secret_key: secretKey,
      op: 'sign',
      params: { KeyId: `alias/${TENANT}`, Message: message, MessageType: 'DIGEST', SigningAlgorithm: 'ECDSA_SHA_256' },
    });
    const before = await svc.run<{ n: number }>(sql`SELECT count(*) AS n FROM audit_log WHERE action = 'kms_request'`);
    const out = await runBoto3Kms(endpoint, [
      ...swapped.map((k) => sign(`swapped ${k.shape}`, k.secret, k.accessKeyId)),
      sign('bearer as access key id', bearer, swapped[0]!.secret),
    ]);
    for (const [name, outcome] of Object.entries(out)) {
      expect(outcome.ok, name).toBe(false);
      if (outcome.ok) continue;
      // A '/' in the secret breaks the credential scope apart; otherwise the id is simply unknown.
      expect(outcome.code, name).toMatch(/^(IncompleteSignatureException|UnrecognizedClientException)$/);
    }
    expect(out['swapped plain']).toMatchObject({ code: 'UnrecognizedClientException' });
    expect(out['bearer as access key id']).toMatchObject({ code: 'UnrecognizedClientException' });
    const refusals = await svc.run<{ actor: string; tenant_id: string | null; details: string }>(
      sql`SELECT actor, tenant_id, details FROM audit_log WHERE action = 'kms_request' ORDER BY seq`,
    );
    const added = refusals.slice(Number(before[0]!.n));
    expect(added).toHaveLength(4);
    expect(added.filter((e) => JSON.parse(e.details).access_key_id === UNRECOGNIZED_CREDENTIAL)).toHaveLength(3);
    for (const entry of added) {
      expect(entry.actor).toBe('anonymous');
      expect(entry.tenant_id).toBeNull();
      const details = JSON.parse(entry.details);
      expect(details.operation).toBe('Sign');
      // null where a '/' in the secret left no access key id to read in the scope.
      expect([UNRECOGNIZED_CREDENTIAL, null]).toContain(details.access_key_id);
    }
  });

  it('raw KMS requests with a secret in the algorithm, the credential scope or its terminator', async () => {
    const secret = swapped.find((k) => k.shape === 'plain')!.secret;
    const slashed = swapped.find((k) => k.shape === 'slash')!.secret;
    const day = amzDate().slice(0, 8);
    const answers = [
      await kmsCall(bearer),
      await kmsCall(`AWS4-HMAC-SHA256 Credential=${slashed}, SignedHeaders=host, Signature=00`),
      await kmsCall(`AWS4-HMAC-SHA256 Credential=${bearer}, SignedHeaders=host, Signature=00`),
      await kmsCall(
        `AWS4-HMAC-SHA256 Credential=${swapped[0]!.accessKeyId}/${day}/us-east-1/kms/${secret}, SignedHeaders=host, Signature=00`,
      ),
      await kmsCall(
        `AWS4-HMAC-SHA256 Credential=${bearer}/${day}/us-east-1/kms/aws4_request, SignedHeaders=host, Signature=00`,
      ),
      // The secret as the operation's name: X-Amz-Target is recorded only when it names an operation served.
      await kmsCall('Bearer x', secret),
    ];
    for (const answer of answers) {
      expect(answer.status).toBe(400);
      expect(answer.body.__type).toMatch(/^(IncompleteSignatureException|UnrecognizedClientException)$/);
    }
    // The caller is told what it sent (as AWS does); only the records leave it out.
    expect(answers[0]!.body.message).toContain(bearer.slice(0, 100));
    const reasons = (
      await svc.run<{ details: string }>(sql`SELECT details FROM audit_log WHERE action = 'kms_request' ORDER BY seq`)
    ).map((row) => JSON.parse(row.details).reason as string);
    expect(reasons).toContain("Unsupported AWS 'algorithm': '(" + bearer.length + " characters, not recorded)'.");
    const [last] = await svc.run<{ details: string }>(
      sql`SELECT details FROM audit_log WHERE action = 'kms_request' ORDER BY seq DESC LIMIT 1`,
    );
    expect(JSON.parse(last!.details).operation).toBe('(not an operation signbridge serves)');
  });

  it('STS, the Bearer check, Vault, POST /oauth/token and the trial endpoint, with live secrets in their credential fields', async () => {
    const secret = swapped[0]!.secret;
    const day = amzDate().slice(0, 8);
    const form = (fields: Record<string, string>) => new URLSearchParams(fields).toString();
    const post = (path: string, headers: Record<string, string>, body: string) =>
      fetch(new URL(path, endpoint), { method: 'POST', headers, body });
    const answers = await Promise.all([
      // STS GetCallerIdentity with the secret as access key id, and a Bearer key as the web identity token.
      post(
        '/',
        {
          'content-type': 'application/x-www-form-urlencoded',
          'x-amz-date': amzDate(),
          authorization: `AWS4-HMAC-SHA256 Credential=${bearer}/${day}/us-east-1/sts/aws4_request, SignedHeaders=host, Signature=00`,
        },
        form({ Action: 'GetCallerIdentity', Version: '2011-06-15' }),
      ),
      post(
        '/',
        { 'content-type': 'application/x-www-form-urlencoded' },
        form({
          Action: 'AssumeRoleWithWebIdentity',
          Version: '2011-06-15',
          RoleArn: `arn:aws:iam::${TENANT}:role/ci`,
          RoleSessionName: 'job',
          WebIdentityToken: bearer,
        }),
      ),
      // The /v1 API with an AWS secret, and with a Bearer key without its scheme.
      post('/v1/list_keys', { authorization: `Bearer ${secret}`, 'content-type': 'application/json' }, '{}'),
      post('/v1/list_keys', { authorization: bearer, 'content-type': 'application/json' }, '{}'),
      // Vault with an AWS secret as its token.
      fetch(new URL(`/v1/transit/keys/${TENANT}`, endpoint), { headers: { 'x-vault-token': secret } }),
      // The token exchange with a Bearer key as the subject token and a secret as client_id.
      post(
        '/oauth/token',
        { 'content-type': 'application/x-www-form-urlencoded' },
        form({
          grant_type: 'urn:ietf:params:oauth:grant-type:token-exchange',
          subject_token: bearer,
          subject_token_type: 'urn:ietf:params:oauth:token-type:jwt',
          tenant_id: TENANT,
          client_id: secret,
        }),
      ),
      // The trial endpoint, which takes no key, given one anyway with a body it refuses.
      post('/trial/sign', { authorization: `Bearer ${bearer}`, 'content-type': 'application/json' }, '{"hash":"x"}'),
      // Credentials in a query string, where none is accepted (the request line is logged): a presigned KMS URL
      // with a swapped credential and a session token, and an RFC 6750 access_token on the /v1 API.
      post(
        `/?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=${encodeURIComponent(`${secret}/${day}/us-east-1/kms/aws4_request`)}&X-Amz-Security-Token=${encodeURIComponent(bearer)}&X-Amz-Signature=00`,
        { 'x-amz-target': 'TrentService.Sign', 'content-type': 'application/x-amz-json-1.1' },
        '{}',
      ),
      post(`/v1/list_keys?access_token=${bearer}`, { 'content-type': 'application/json' }, '{}'),
    ]);
    expect(answers.map((a) => a.status)).toEqual([403, 400, 401, 401, 403, 400, 400, 400, 401]);
  });

  it('no secret is in the audit export, the database (log tiles, events) or the service log', async () => {
    const exported = JSON.stringify(exportAudit(svc.storeArgs));
    expect(exported).toContain('kms_request'); // the refusals are there, just not the secrets
    const rows = await everyDatabaseRow();
    expect(serviceLog).toContain('incoming request');
    for (const secret of secrets) {
      expect(exported).not.toContain(secret);
      expect(rows).not.toContain(secret);
      expect(serviceLog).not.toContain(secret);
    }
  });
});
