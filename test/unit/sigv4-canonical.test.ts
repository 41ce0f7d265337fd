// The canonical request of src/auth/sigv4/canonical-request.ts against botocore's own (SigV4Auth.canonical_request)
// for the same request, never a hand-written expectation; and each request botocore signed verifies.

import { describe, expect, it } from 'vitest';
import { canonicalPath, canonicalRequest, type HeaderValues } from '../../src/auth/sigv4/canonical-request.js';
import { SigV4Verifier } from '../../src/auth/sigv4/verify-request.js';
import { botocoreMissing, runBotocore } from '../helpers/botocore.js';

const missing = botocoreMissing();

interface Case {
  name: string;
  method: string;
  url: string;
  params?: [string, string][];
  headers?: [string, string][];
  body?: string;
}

const CASES: Case[] = [
  {
    name: 'repeated query keys, sorted by name then value',
    method: 'GET',
    url: 'https://kms.example.test/',
    params: [
      ['b', '2'],
      ['a', 'z'],
      ['a', '10'],
      ['a', '1'],
      ['A', 'upper'],
    ],
  },
  {
    name: 'reserved and unicode characters in query names and values',
    method: 'GET',
    url: 'https://kms.example.test/',
    params: [
      ['key with space', "a b+c/d?e&f=g!*'()~._-"],
      ['é', 'ü€𝄞'],
      ['empty', ''],
      ['%', '100%'],
    ],
  },
  { name: 'a query already in the URL', method: 'GET', url: 'https://kms.example.test/?z=1&y=%2F&x=&w=a%20b' },
  {
    name: 'a path with spaces and unicode (sent encoded, signed encoded again)',
    method: 'GET',
    url: 'https://kms.example.test/a%20b/caf%C3%A9/%E2%82%AC',
  },
  {
    name: 'a path with dot segments and empty segments',
    method: 'POST',
    url: 'https://kms.example.test/a/./b/../c//d/',
    body: '{}',
  },
  { name: 'a path with reserved characters', method: 'GET', url: "https://kms.example.test/~user/x%2Fy/!$&'()*+,;=:@" },
  { name: 'the root path', method: 'POST', url: 'https://kms.example.test', body: '{"Limit": 5}' },
  {
    name: 'header values with runs of spaces, tabs, and repeated header lines',
    method: 'POST',
    url: 'https://kms.example.test/',
    headers: [
      ['X-Amz-Target', 'TrentService.ListKeys'],
      ['Content-Type', 'application/x-amz-json-1.1'],
      ['X-Custom', '   a    b \t\t c   '],
      ['X-Multi', ' first   value '],
      ['X-Multi', 'second'],
      ['X-Quoted', '"a    b"'],
    ],
    body: '{"é": "ü"}',
  },
];

describe.skipIf(missing)(`SigV4 canonical request against botocore's ${missing ?? ''}`, () => {
  it('matches botocore for every case, and botocore-signed requests verify', async () => {
    const answers = await runBotocore<{ canonical: string; url: string; headers: HeaderValues }[]>({
      mode: 'canonical',
      cases: CASES.map((c) => ({
        ...c,
        access_key: 'AKIDEXAMPLE',
        secret_key: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY',
        service: 'kms',
        region: 'eu-west-3',
      })),
    });
    for (const [index, testCase] of CASES.entries()) {
      const answer = answers[index]!;
      const target = answer.url.replace(/^https:\/\/[^/?]*/, '') || '/';
      const query = target.indexOf('?');
      const authorization = String(answer.headers.authorization);
      const signedHeaders = /SignedHeaders=([^,]*)/.exec(authorization)![1]!.split(';');
      const { createHash } = await import('node:crypto');
      const ours = canonicalRequest({
        method: testCase.method,
        rawPath: query < 0 ? target : target.slice(0, query),
        rawQuery: query < 0 ? '' : target.slice(query + 1),
        headers: answer.headers,
        signedHeaders,
        payloadHash: createHash('sha256')
          .update(testCase.body ?? '')
          .digest('hex'),
      });
      expect(ours, testCase.name).toBe(answer.canonical);

      const signedAt = String(answer.headers['x-amz-date']);
      const when = Date.UTC(
        +signedAt.slice(0, 4),
        +signedAt.slice(4, 6) - 1,
        +signedAt.slice(6, 8),
        +signedAt.slice(9, 11),
        +signedAt.slice(11, 13),
        +signedAt.slice(13, 15),
      );
      const verifier = new SigV4Verifier({
        now: () => when,
        secretFor: async (id) =>
          id === 'AKIDEXAMPLE' ? { secret: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY', principal: null } : undefined,
      });
      const result = await verifier.verify(
        { method: testCase.method, url: target, headers: answer.headers, body: testCase.body },
        'kms',
      );
      expect(result.ok ? 'verified' : result.refusal.message, testCase.name).toBe('verified');
    }
  });

  it('encodes a raw unicode path as botocore does', async () => {
    const [answer] = await runBotocore<{ canonical: string }[]>({
      mode: 'canonical',
      cases: [
        {
          method: 'GET',
          url: 'https://kms.example.test/café/ü x',
          access_key: 'A',
          secret_key: 's',
          service: 'kms',
          region: 'r',
        },
      ],
    });
    expect(canonicalPath('/café/ü x')).toBe(answer!.canonical.split('\n')[1]);
  });
});
