// src/auth/sigv4/verify-request.ts behind a small node:http server speaking KMS's JSON 1.1, called by real clients:
// boto3's `kms` client (botocore signs) and the AWS CLI. Each refusal is a real client's request made wrong: wrong
// secret, unknown key id, a tampered body or signed header (changed by a botocore before-send hook, after signing),
// a scope for another service, no signature at all. botocore signs with this machine's clock, so the clock cases
// shift the verifier's `now` instead (the endpoint's path prefix /skew-ahead or /skew-behind says which way).

import { execFile } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AwsJsonError, sendAwsJsonError } from '../../src/api/aws/kms/errors.js';
import { type SigV4Identity, SigV4Verifier } from '../../src/auth/sigv4/verify-request.js';
import { AWS_CLI, botocoreMissing, isolatedAwsEnv, runBotocore } from '../helpers/botocore.js';

const missing = botocoreMissing();

const KEYS: Record<string, { secret: string; tenant: string }> = {
  AKIASIGNBRIDGE0001: { secret: 'c2VjcmV0IGZvciB0ZXN0cyBvbmx5IDAwMDAwMDAwMDA', tenant: 'acme' },
  ASIASIGNBRIDGETEMP: { secret: 'dGVtcG9yYXJ5IHNlY3JldCBmb3IgdGVzdHMgMDAwMDA', tenant: 'ci' },
};
const SIX_MINUTES = 6 * 60 * 1000;

function verifierFor(offset: number): SigV4Verifier<string> {
  return new SigV4Verifier({
    now: () => Date.now() + offset,
    secretFor: async (id) => {
      const key = KEYS[id];
      return key && { secret: key.secret, principal: key.tenant };
    },
  });
}

const verifiers = { plain: verifierFor(0), ahead: verifierFor(SIX_MINUTES), behind: verifierFor(-SIX_MINUTES) };
const verified: SigV4Identity<string>[] = [];
let server: Server;
let endpoint: string;

beforeAll(async () => {
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', async () => {
      const url = req.url ?? '/';
      const verifier = url.startsWith('/skew-ahead')
        ? verifiers.ahead
        : url.startsWith('/skew-behind')
          ? verifiers.behind
          : verifiers.plain;
      const body = Buffer.concat(chunks);
      const result = await verifier.verify(
        { method: req.method ?? 'GET', url, headers: req.headersDistinct, body },
        'kms',
      );
      if (!result.ok) {
        sendAwsJsonError(res, new AwsJsonError(result.refusal.type, result.refusal.message, result.refusal.status));
        return;
      }
      verified.push(result.identity);
      const { accessKeyId, region, sessionToken, principal } = result.identity;
      const keyId = `${principal}/${accessKeyId}/${region}/${sessionToken ?? '-'}`;
      const answer =
        req.headers['x-amz-target'] === 'TrentService.Sign'
          ? { KeyId: keyId, Signature: Buffer.from('signature').toString('base64'), SigningAlgorithm: 'ECDSA_SHA_256' }
          : { Keys: [{ KeyId: keyId, KeyArn: `arn:aws:kms:${region}:${principal}:key/${keyId}` }], Truncated: false };
      res.writeHead(200, { 'content-type': 'application/x-amz-json-1.1' }).end(JSON.stringify(answer));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

interface Outcome {
  ok: boolean;
  keyId?: string;
  exception?: string;
  code?: string;
  message?: string;
  status?: number;
}

const good = { access_key: 'AKIASIGNBRIDGE0001', secret_key: KEYS.AKIASIGNBRIDGE0001!.secret, region: 'eu-west-3' };
const temporary = {
  access_key: 'ASIASIGNBRIDGETEMP',
  secret_key: KEYS.ASIASIGNBRIDGETEMP!.secret,
  token: 'session-token-from-sts',
  region: 'us-east-1',
};

const SCENARIOS = [
  { name: 'list_keys', op: 'list_keys', ...good },
  { name: 'sign', op: 'sign', ...good, region: 'ap-southeast-2' },
  { name: 'temporary credentials', op: 'sign', ...temporary },
  { name: 'wrong secret', op: 'list_keys', ...good, secret_key: `${good.secret_key}x` },
  { name: 'unknown key id', op: 'list_keys', ...good, access_key: 'AKIAUNKNOWN0000000' },
  { name: 'clock 6 minutes behind the service', op: 'list_keys', ...good, path: '/skew-ahead' },
  { name: 'clock 6 minutes ahead of the service', op: 'list_keys', ...good, path: '/skew-behind' },
  { name: 'tampered body', op: 'sign', ...good, tamper: 'body' },
  { name: 'tampered signed header', op: 'list_keys', ...good, tamper: 'signed_header' },
  {
    name: 'header added after signing, listed in SignedHeaders',
    op: 'list_keys',
    ...good,
    tamper: 'added_signed_header',
  },
  { name: 'security token not signed', op: 'list_keys', ...temporary, tamper: 'unsigned_token' },
  { name: 'scope for another service', op: 'list_keys', ...good, tamper: 'other_service' },
  { name: 'no signature at all', op: 'list_keys', ...good, unsigned: true },
];

describe.skipIf(missing)(`SigV4 with boto3 and the AWS CLI ${missing ?? ''}`, () => {
  let outcomes: Record<string, Outcome>;

  beforeAll(async () => {
    outcomes = await runBotocore<Record<string, Outcome>>({ mode: 'kms', endpoint, scenarios: SCENARIOS });
  });

  it('accepts what botocore signed, with the identity it signed as', () => {
    expect(outcomes['list_keys']).toEqual({ ok: true, keyId: 'acme/AKIASIGNBRIDGE0001/eu-west-3/-' });
    expect(outcomes['sign']).toMatchObject({ ok: true, keyId: 'acme/AKIASIGNBRIDGE0001/ap-southeast-2/-' });
    expect(outcomes['temporary credentials']).toMatchObject({
      ok: true,
      keyId: 'ci/ASIASIGNBRIDGETEMP/us-east-1/session-token-from-sts',
    });
    expect(verified.map((identity) => identity.service)).toEqual(['kms', 'kms', 'kms']);
  });

  it.each([
    ['wrong secret', 'InvalidSignatureException', /^The request signature we calculated does not match/],
    ['tampered body', 'InvalidSignatureException', /^The request signature we calculated does not match/],
    ['tampered signed header', 'InvalidSignatureException', /^The request signature we calculated does not match/],
    [
      'header added after signing, listed in SignedHeaders',
      'InvalidSignatureException',
      /^The request signature we calculated does not match/,
    ],
    ['unknown key id', 'UnrecognizedClientException', /^The security token included in the request is invalid\.$/],
    [
      'clock 6 minutes behind the service',
      'InvalidSignatureException',
      /^Signature expired: \d{8}T\d{6}Z is now earlier than \d{8}T\d{6}Z \(\d{8}T\d{6}Z - 5 min\.\)$/,
    ],
    [
      'clock 6 minutes ahead of the service',
      'InvalidSignatureException',
      /^Signature not yet current: \d{8}T\d{6}Z is still later than \d{8}T\d{6}Z \(\d{8}T\d{6}Z \+ 5 min\.\)$/,
    ],
    ['security token not signed', 'IncompleteSignatureException', /'X-Amz-Security-Token' must be a 'SignedHeader'/],
    [
      'scope for another service',
      'IncompleteSignatureException',
      /^Credential should be scoped to correct service: 'kms'\.$/,
    ],
    ['no signature at all', 'MissingAuthenticationTokenException', /^Missing Authentication Token$/],
  ])('%s: boto3 raises ClientError %s', (name, code, message) => {
    const outcome = outcomes[name]!;
    expect(outcome).toMatchObject({ ok: false, exception: 'ClientError', code, status: 400 });
    expect(outcome.message).toMatch(message);
    for (const key of Object.values(KEYS)) expect(outcome.message).not.toContain(key.secret);
  });

  it('the AWS CLI lists keys, and prints a bad signature as InvalidSignatureException with a failing exit status', async () => {
    const cli = (secret: string) =>
      new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
        execFile(
          AWS_CLI,
          ['kms', 'list-keys', '--endpoint-url', endpoint, '--region', 'eu-north-1', '--output', 'json'],
          {
            timeout: 30_000,
            env: isolatedAwsEnv({
              AWS_ACCESS_KEY_ID: good.access_key,
              AWS_SECRET_ACCESS_KEY: secret,
              AWS_MAX_ATTEMPTS: '1',
            }),
          },
          (error, stdout, stderr) => resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
        );
      });
    const [right, wrong] = await Promise.all([cli(good.secret_key), cli('not-the-secret')]);
    expect(right.code, right.stderr).toBe(0);
    expect(JSON.parse(right.stdout).Keys[0].KeyId).toBe('acme/AKIASIGNBRIDGE0001/eu-north-1/-');
    // 254: the CLI's exit status for an error the service answered.
    expect(wrong.code).toBe(254);
    expect(wrong.stderr).toMatch(
      /An error occurred \(InvalidSignatureException\) when calling the ListKeys operation.*: The request signature we calculated does not match/,
    );
  });
});
