// Issue 44: every KMS answer carries `Content-Type: application/x-amz-json-1.1` exactly, without `; charset=utf-8`,
// as AWS sends it: successes, SigV4 refusals, an unknown X-Amz-Target, a body that is no JSON, a body over the
// limit, a wrong path or method, the 5xx path, and requests that arrive while the service shuts down. Calls that
// must be signed are made by the AWS SDK for JavaScript (@aws-sdk/client-kms), read at the raw HTTP response under
// its deserializer; the others are plain HTTP requests.

import { createHash } from 'node:crypto';
import { DescribeKeyCommand, EncryptCommand, KMSClient, type KMSClientConfig, SignCommand } from '@aws-sdk/client-kms';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { createAwsApiKey } from '../../src/auth/aws-credentials/aws-credentials.js';
import type { PolicyDecision, PolicyEngine } from '../../src/policy/policy.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

const EXACT = 'application/x-amz-json-1.1';

/** The 5xx path: a policy that fails for one tenant (an unexpected error: KMSInternalException, 500). */
const policy: PolicyEngine = {
  async evaluate(input): Promise<PolicyDecision> {
    if (input.tenantId === 'broken-team') throw new Error('the policy engine failed');
    return { outcome: 'allow', rule: 'default', reason: 'allowed' };
  },
};

let svc: TestService;
let endpoint: string;
const credentials: Record<string, { accessKeyId: string; secretAccessKey: string }> = {};

interface Seen {
  status: number;
  contentType: string | undefined;
  error?: string;
}

/**
 * The SDK's client with a middleware just under its deserializer, which records the raw answer's status and
 * Content-Type; `body` replaces the serialized body before it is signed (a client that sends broken JSON).
 */
function client(tenant: string, seen: Seen[], body?: string): KMSClient {
  const config: KMSClientConfig = {
    endpoint,
    region: 'eu-central-1',
    credentials: credentials[tenant]!,
    maxAttempts: 1,
  };
  const kms = new KMSClient(config);
  kms.middlewareStack.add(
    (next) => async (args) => {
      const out = await next(args);
      const response = out.response as { statusCode: number; headers: Record<string, string> };
      seen.push({ status: response.statusCode, contentType: response.headers['content-type'] });
      return out;
    },
    { step: 'deserialize', priority: 'low', name: 'recordContentType' },
  );
  if (body !== undefined) {
    kms.middlewareStack.add(
      (next) => async (args) => {
        (args.request as { body: string; headers: Record<string, string> }).body = body;
        (args.request as { headers: Record<string, string> }).headers['content-length'] = String(
          Buffer.byteLength(body),
        );
        return next(args);
      },
      { step: 'build', priority: 'low', name: 'brokenBody' },
    );
  }
  return kms;
}

async function sdkCall(kms: KMSClient, call: (kms: KMSClient) => Promise<unknown>, seen: Seen[]): Promise<Seen> {
  let error: string | undefined;
  try {
    await call(kms);
  } catch (err) {
    error = (err as Error).name;
  } finally {
    kms.destroy();
  }
  const last = seen.at(-1) as Seen;
  return { ...last, ...(error !== undefined && { error }) };
}

async function raw(init: { method?: string; path?: string; headers?: Record<string, string>; body?: string }) {
  const response = await fetch(new URL(init.path ?? '/', endpoint), {
    method: init.method ?? 'POST',
    headers: init.headers ?? {},
    ...(init.body !== undefined && { body: init.body }),
  });
  const body = (await response.json()) as { __type?: string };
  return {
    status: response.status,
    contentType: response.headers.get('content-type') ?? undefined,
    error: body.__type,
  };
}

const kmsHeaders = (extra: Record<string, string> = {}) => ({
  'content-type': EXACT,
  'x-amz-target': 'TrentService.Sign',
  ...extra,
});

beforeAll(async () => {
  svc = await startTestService({ policy, kmsApi: { enabled: true, heldWaitMs: 1000, vaultMount: 'transit' } });
  for (const tenant of ['plain-team', 'broken-team']) {
    expect(
      (await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: tenant, key_spec: 'ECC_NIST_P256' }))
        .status,
    ).toBe(201);
    const made = await createAwsApiKey(svc.store, svc.keyStore, 'signer', tenant, 'content type');
    credentials[tenant] = { accessKeyId: made.accessKeyId, secretAccessKey: made.secretAccessKey };
  }
  endpoint = await svc.app.listen({ host: '127.0.0.1', port: 0 });
});
afterAll(async () => svc?.close());

describe('KMS answers carry Content-Type application/x-amz-json-1.1 exactly', () => {
  it('signed calls by the JS SDK: a success, an unknown operation, a body that is no JSON, the 5xx path', async () => {
    const digest = createHash('sha256').update('artifact').digest();
    const seen: Seen[] = [];
    const sign = (tenant: string) =>
      new SignCommand({
        KeyId: `alias/${tenant}`,
        Message: digest,
        MessageType: 'DIGEST',
        SigningAlgorithm: 'ECDSA_SHA_256',
      });
    const answers = {
      described: await sdkCall(
        client('plain-team', seen),
        (k) => k.send(new DescribeKeyCommand({ KeyId: 'alias/plain-team' })),
        seen,
      ),
      signed: await sdkCall(client('plain-team', seen), (k) => k.send(sign('plain-team')), seen),
      unsupported: await sdkCall(
        client('plain-team', seen),
        (k) => k.send(new EncryptCommand({ KeyId: 'alias/plain-team', Plaintext: Buffer.from('hi') })),
        seen,
      ),
      'not json': await sdkCall(client('plain-team', seen, '{"KeyId": '), (k) => k.send(sign('plain-team')), seen),
      internal: await sdkCall(client('broken-team', seen), (k) => k.send(sign('broken-team')), seen),
    };
    expect(answers).toEqual({
      described: { status: 200, contentType: EXACT },
      signed: { status: 200, contentType: EXACT },
      unsupported: { status: 400, contentType: EXACT, error: 'UnsupportedOperationException' },
      'not json': { status: 400, contentType: EXACT, error: 'SerializationException' },
      internal: { status: 500, contentType: EXACT, error: 'KMSInternalException' },
    });
  });

  it('unsigned requests: SigV4 refusals, a body over the limit, a wrong path and a wrong method', async () => {
    const date = new Date()
      .toISOString()
      .replace(/[-:]/g, '')
      .replace(/\.\d{3}/, '');
    const answers = {
      'no signature': await raw({ headers: kmsHeaders(), body: '{}' }),
      'not sigv4': await raw({ headers: kmsHeaders({ authorization: 'Bearer sbk_x' }), body: '{}' }),
      'unknown key': await raw({
        headers: kmsHeaders({
          'x-amz-date': date,
          authorization: `AWS4-HMAC-SHA256 Credential=SBAK0000000000000000/${date.slice(0, 8)}/eu-central-1/kms/aws4_request, SignedHeaders=host;x-amz-date, Signature=${'0'.repeat(64)}`,
        }),
        body: '{}',
      }),
      'too large': await raw({ headers: kmsHeaders(), body: `{"Message":"${'A'.repeat(70 * 1024)}"}` }),
      'wrong path': await raw({ path: '/kms', headers: kmsHeaders(), body: '{}' }),
      'wrong method': await raw({ method: 'PUT', headers: kmsHeaders(), body: '{}' }),
    };
    expect(answers).toEqual({
      'no signature': { status: 400, contentType: EXACT, error: 'MissingAuthenticationTokenException' },
      'not sigv4': { status: 400, contentType: EXACT, error: 'IncompleteSignatureException' },
      'unknown key': { status: 400, contentType: EXACT, error: 'UnrecognizedClientException' },
      'too large': { status: 413, contentType: EXACT, error: 'ValidationException' },
      'wrong path': { status: 404, contentType: EXACT, error: 'UnknownOperationException' },
      'wrong method': { status: 405, contentType: EXACT, error: 'UnknownOperationException' },
    });
    // signbridge's own API keeps its own answers on the same paths.
    const own = await fetch(new URL('/kms', endpoint), { method: 'POST', body: '{}' });
    expect(own.status).toBe(404);
    expect(own.headers.get('content-type')).toBe('application/json; charset=utf-8');
  });

  it('a KMS call that arrives while the service shuts down: DependencyTimeoutException (503), retryable', async () => {
    // Another app on the same store, whose hook asks while buildApp's own preClose hook has marked it closing.
    const app = await buildApp({
      store: svc.store,
      keyStore: svc.keyStores,
      kmsApi: { enabled: true, heldWaitMs: 1000, vaultMount: 'transit' },
    });
    let during: { status: number; contentType: string | null; error: string } | undefined;
    app.addHook('preClose', async () => {
      const response = await fetch(url, { method: 'POST', headers: kmsHeaders(), body: '{}' });
      const body = (await response.json()) as { __type: string };
      during = { status: response.status, contentType: response.headers.get('content-type'), error: body.__type };
    });
    const url = await app.listen({ host: '127.0.0.1', port: 0 });
    await app.close();
    expect(during).toEqual({ status: 503, contentType: EXACT, error: 'DependencyTimeoutException' });
  });
});
