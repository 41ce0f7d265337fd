// The refusals of src/auth/sigv4/verify-request.ts that no SDK sends by itself (a malformed Authorization header,
// a scope date not the request's, `host` unsigned, a payload hash header that lies), the Date header in place of
// X-Amz-Date, STS's names for the same refusals, and a rotated secret: each starts from a request botocore signed.

import { createHash, createHmac, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { HeaderValues } from '../../src/auth/sigv4/canonical-request.js';
import { deriveSigningKey, PreparedHmac } from '../../src/auth/sigv4/signing-key.js';
import { type SigV4Request, SigV4Verifier } from '../../src/auth/sigv4/verify-request.js';
import { botocoreMissing, runBotocore } from '../helpers/botocore.js';

const missing = botocoreMissing();
const SECRET = 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY';
const BODY = '{"KeyId": "alias/acme"}';
const EMPTY_SHA256 = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855';
const BODY_SHA256 = createHash('sha256').update(BODY).digest('hex');

function sharedVerifier(state: { secret: string }) {
  return new SigV4Verifier({
    secretFor: async (id) => (id === 'AKIDEXAMPLE' ? { secret: state.secret, principal: 'acme' } : undefined),
  });
}

/** A verifier of one credential, as a door of `service` uses it. */
function verifier(service: 'kms' | 'sts', secret = SECRET) {
  const state = { secret };
  const shared = sharedVerifier(state);
  return { state, verifier: { verify: (request: SigV4Request) => shared.verify(request, service) } };
}

async function signed(
  service: string,
  headers: [string, string][] = [],
): Promise<SigV4Request & { headers: Record<string, string[]> }> {
  const [answer] = await runBotocore<{ url: string; headers: Record<string, string[]> }[]>({
    mode: 'canonical',
    cases: [
      {
        method: 'POST',
        url: 'https://kms.example.test/',
        headers: [['X-Amz-Target', 'TrentService.DescribeKey'], ...headers],
        body: BODY,
        access_key: 'AKIDEXAMPLE',
        secret_key: SECRET,
        service,
        region: 'eu-west-3',
      },
    ],
  });
  return { method: 'POST', url: '/', headers: answer!.headers, body: BODY };
}

function withHeaders(request: SigV4Request, changes: HeaderValues): SigV4Request {
  return { ...request, headers: { ...request.headers, ...changes } };
}

function authorization(request: SigV4Request): string {
  return String(request.headers.authorization);
}

it("derives AWS's documented signing key (IAM example, 20120215/us-east-1/iam)", () => {
  expect(deriveSigningKey(SECRET, '20120215', 'us-east-1', 'iam').toString('hex')).toBe(
    'f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d',
  );
});

describe.skipIf(missing)(`SigV4 refusals no SDK sends by itself ${missing ?? ''}`, () => {
  it('refuses malformed Authorization headers with IncompleteSignatureException', async () => {
    const request = await signed('kms');
    const { verifier: kms } = verifier('kms');
    const refusal = async (changes: HeaderValues) => {
      const result = await kms.verify(withHeaders(request, changes));
      return result.ok ? 'verified' : `${result.refusal.type} ${result.refusal.status}: ${result.refusal.message}`;
    };
    const auth = authorization(request);
    expect(await refusal({})).toBe('verified');
    expect(await refusal({ authorization: 'Bearer sbk_0123' })).toBe(
      "IncompleteSignatureException 400: Unsupported AWS 'algorithm': 'Bearer'.",
    );
    expect(await refusal({ authorization: auth.replace(/, Signature=.*/, '') })).toBe(
      "IncompleteSignatureException 400: Authorization header requires 'Signature' parameter.",
    );
    expect(await refusal({ authorization: 'AWS4-HMAC-SHA256', 'x-amz-date': undefined })).toMatch(
      /requires 'Credential' parameter\. .*requires 'Signature' parameter\. .*requires 'SignedHeaders' parameter\. .*either a 'X-Amz-Date' or a 'Date' header\.$/,
    );
    expect(await refusal({ authorization: auth.replace('/eu-west-3/', '/') })).toMatch(
      /^IncompleteSignatureException 400: Credential must have exactly 5 slash-delimited elements/,
    );
    expect(await refusal({ authorization: auth.replace('aws4_request', 'aws5_request') })).toBe(
      "IncompleteSignatureException 400: Credential should be scoped with a valid terminator: 'aws4_request', not 'aws5_request'.",
    );
    expect(await refusal({ authorization: auth.replace('/eu-west-3/', '/EU WEST/') })).toBe(
      'IncompleteSignatureException 400: Credential should be scoped to a valid region.',
    );
    expect(await refusal({ authorization: auth.replace('SignedHeaders=host;', 'SignedHeaders=') })).toBe(
      "IncompleteSignatureException 400: 'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization.",
    );
    for (const badDate of ['2026-11-28T13:44:11Z', '20260230T000000Z', '20261128T240000Z']) {
      expect(await refusal({ 'x-amz-date': [badDate] }), badDate).toMatch(
        /^IncompleteSignatureException 400: Date must be in ISO-8601 'basic format'/,
      );
    }
    const date = String(request.headers['x-amz-date']);
    const scopeDate = date.slice(0, 8);
    expect(await refusal({ authorization: auth.replace(`/${scopeDate}/`, '/20200101/') })).toBe(
      'IncompleteSignatureException 400: Date in Credential scope does not match YYYYMMDD from ISO-8601 version of ' +
        `date from HTTP: '20200101' != '${scopeDate}', from '${date}'.`,
    );
    expect(await refusal({ authorization: auth.replace(/Signature=[0-9a-f]+/, 'Signature=zz') })).toMatch(
      /^InvalidSignatureException 400: The request signature we calculated does not match/,
    );
  });

  it('checks X-Amz-Content-SHA256 against the body, and never takes UNSIGNED-PAYLOAD', async () => {
    const { verifier: kms } = verifier('kms');
    const honest = await signed('kms', [['X-Amz-Content-SHA256', BODY_SHA256]]);
    expect((await kms.verify(honest)).ok).toBe(true);
    const lying = await signed('kms', [['X-Amz-Content-SHA256', EMPTY_SHA256]]);
    const unsigned = await signed('kms', [['X-Amz-Content-SHA256', 'UNSIGNED-PAYLOAD']]);
    for (const request of [lying, unsigned]) {
      const result = await kms.verify(request);
      expect(result.ok ? 'verified' : `${result.refusal.type}: ${result.refusal.message}`).toBe(
        "InvalidSignatureException: The provided 'x-amz-content-sha256' header does not match what was computed.",
      );
    }
  });

  it('accepts a request botocore dated with Date instead of X-Amz-Date', async () => {
    const request = await signed('kms', [['Date', 'Thu, 01 Jan 1970 00:00:00 GMT']]);
    expect(request.headers['x-amz-date']).toBeUndefined();
    const result = await verifier('kms').verifier.verify(request);
    expect(result.ok && result.identity).toMatchObject({ accessKeyId: 'AKIDEXAMPLE', region: 'eu-west-3' });
  });

  it("answers in STS's names on the STS endpoint", async () => {
    const request = await signed('sts');
    const sts = verifier('sts');
    expect((await sts.verifier.verify(request)).ok).toBe(true);
    const cases: [SigV4Request, string][] = [
      [withHeaders(request, { authorization: undefined }), 'MissingAuthenticationToken 403'],
      [
        withHeaders(request, { authorization: authorization(request).replace('AKIDEXAMPLE', 'AKIDOTHER') }),
        'InvalidClientTokenId 403',
      ],
      [withHeaders(request, { 'x-amz-target': 'TrentService.Sign' }), 'SignatureDoesNotMatch 403'],
    ];
    for (const [variant, expected] of cases) {
      const result = await sts.verifier.verify(variant);
      expect(result.ok ? 'verified' : `${result.refusal.type} ${result.refusal.status}`).toBe(expected);
    }
  });

  it("serves both doors from one verifier: each request checked for its door's service, refused in its words", async () => {
    const shared = sharedVerifier({ secret: SECRET });
    const [kmsRequest, stsRequest] = [await signed('kms'), await signed('sts')];
    expect((await shared.verify(kmsRequest, 'kms')).ok).toBe(true);
    expect((await shared.verify(stsRequest, 'sts')).ok).toBe(true);
    const crossed = await shared.verify(stsRequest, 'kms');
    expect(crossed.ok ? 'verified' : `${crossed.refusal.type}: ${crossed.refusal.message}`).toBe(
      "IncompleteSignatureException: Credential should be scoped to correct service: 'kms'.",
    );
    const unsigned = await shared.verify(withHeaders(kmsRequest, { authorization: undefined }), 'sts');
    expect(unsigned.ok ? 'verified' : `${unsigned.refusal.type} ${unsigned.refusal.status}`).toBe(
      'MissingAuthenticationToken 403',
    );
  });

  it('does not keep a signing key derived from a secret that has since changed', async () => {
    const request = await signed('kms');
    const kms = verifier('kms');
    expect((await kms.verifier.verify(request)).ok).toBe(true);
    kms.state.secret = 'rotated';
    const result = await kms.verifier.verify(request);
    expect(result.ok ? 'verified' : result.refusal.type).toBe('InvalidSignatureException');
  });
});

it('PreparedHmac is HMAC-SHA256 (node:crypto) for keys and messages of every length up to a block', () => {
  for (const keyLength of [0, 1, 31, 32, 33, 63, 64]) {
    const key = randomBytes(keyLength);
    const prepared = new PreparedHmac(key);
    for (const message of ['', 'a', 'é'.repeat(100), randomBytes(300).toString('base64')]) {
      expect(prepared.digest(message).toString('hex')).toBe(createHmac('sha256', key).update(message).digest('hex'));
    }
  }
});
