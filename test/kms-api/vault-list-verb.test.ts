// hvac's `LIST /v1/transit/keys`, which Node's parser refuses and the rescue (src/api/vault-transit/list-verb.ts,
// list-head.ts) answers: only for a head Node itself would have accepted, read whole even when it comes in several
// packets. Every head is sent byte for byte on a bare socket (node:net); hvac's own LIST still lists.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hvacMissing, runHvac } from '../helpers/hvac.js';
import { rawExchange } from '../helpers/raw-http.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

let svc: TestService;
let port: number;
let token: string;
/** Answers of the service that list nothing: a refusal in Node's (the service's) shape, or Vault's. */
const LISTED = '{"data":{"keys":["l-ec"]}}';

beforeAll(async () => {
  // A short request timeout: a head that never ends is cut within a few seconds, not a minute.
  svc = await startTestService({
    requestTimeoutMs: 4000,
    kmsApi: { enabled: true, heldWaitMs: 0, vaultMount: 'transit' },
  });
  const url = await svc.app.listen({ host: '127.0.0.1', port: 0 });
  port = Number(new URL(url).port);
  const made = await callAction(svc.app, svc.operator, 'create_tenant', {
    tenant_id: 'l-ec',
    key_spec: 'ECC_NIST_P256',
  });
  expect(made.status, JSON.stringify(made.body)).toBe(201);
  token = await svc.apiKey('signer', 'l-ec');
}, 120_000);
afterAll(async () => svc?.close());

const head = (...lines: string[]) => `LIST /v1/transit/keys HTTP/1.1\r\n${lines.map((l) => `${l}\r\n`).join('')}\r\n`;

describe('the LIST rescue reads heads as strictly as Node', () => {
  it('a valid head is answered as GET ?list=true, and the connection closes', async () => {
    const answer = await rawExchange(port, [head('Host: signbridge', `X-Vault-Token: ${token}`)]);
    expect(answer.status).toBe(200);
    expect(answer.body).toBe(LISTED);
    expect(answer.headers.connection).toBe('close');
    const bearer = await rawExchange(port, [head('Host: signbridge', `Authorization: Bearer ${token}`)]);
    expect(bearer.body).toBe(LISTED);
  });

  // Built when the test runs: the token exists only after beforeAll.
  const refused: Array<[string, () => string]> = [
    ['whitespace before the colon', () => head('Host: signbridge', `X-Vault-Token : ${token}`)],
    ['a tab before the colon', () => head('Host: signbridge', `X-Vault-Token\t: ${token}`)],
    [
      'a folded line (obs-fold) that looks like a header',
      () => head('Host: signbridge', 'X-Note: a', ` X-Vault-Token: ${token}`),
    ],
    ['no Host', () => head(`X-Vault-Token: ${token}`)],
    ['two Hosts', () => head('Host: signbridge', 'Host: elsewhere', `X-Vault-Token: ${token}`)],
    [
      'two X-Vault-Token headers',
      () => head('Host: signbridge', 'X-Vault-Token: sbk_wrong', `X-Vault-Token: ${token}`),
    ],
    [
      'two Authorization headers',
      () => head('Host: signbridge', 'Authorization: Bearer sbk_wrong', `Authorization: Bearer ${token}`),
    ],
    ['a control character in a value', () => head('Host: signbridge', `X-Vault-Token: ${token}`, 'X-Note: a\x01b')],
    ['a name that is no token', () => head('Host: signbridge', `X-Vault-Token: ${token}`, 'X(Note): a')],
    ['a body', () => head('Host: signbridge', `X-Vault-Token: ${token}`, 'Content-Length: 2').concat('{}')],
  ];
  for (const [what, request] of refused) {
    it(`refuses ${what} with the ordinary 400, listing nothing`, async () => {
      const answer = await rawExchange(port, [request()]);
      expect(answer.status, answer.text).toBe(400);
      expect(JSON.parse(answer.body)).toEqual({
        error: 'invalid_request',
        reason: 'the request is not valid HTTP/1.1',
      });
      expect(answer.headers.connection).toBe('close');
    });
  }
});

describe('a head in several packets', () => {
  it('is gathered and answered once whole', async () => {
    const whole = head('Host: signbridge', 'User-Agent: python-requests/2.28.1', `X-Vault-Token: ${token}`);
    // Cut after the method, inside a header name, and inside the final CRLF CRLF; each write its own packet.
    const cuts = [12, 40, whole.length - 2];
    const chunks = [0, ...cuts].map((from, i) => whole.slice(from, cuts[i] ?? whole.length));
    expect(chunks.join('')).toBe(whole);
    const answer = await rawExchange(port, chunks, 50);
    expect(answer.status).toBe(200);
    expect(answer.body).toBe(LISTED);
  });

  it('a head cut inside the method cannot be read back: 400 and the connection closes', async () => {
    const answer = await rawExchange(port, ['LI', head('Host: signbridge', `X-Vault-Token: ${token}`).slice(2)], 50);
    expect(answer.status).toBe(400);
    expect(answer.headers.connection).toBe('close');
  });

  it('a head that never ends is refused within the request timeout, not left hanging', async () => {
    const answer = await rawExchange(port, ['LIST /v1/transit/keys HTTP/1.1\r\n', 'Host: signbridge\r\n'], 50);
    expect(answer.status).toBe(408);
    expect(answer.headers.connection).toBe('close');
  });
});

describe.skipIf(hvacMissing())("hvac's LIST", () => {
  it('still lists, and the session goes on after the closed connection', async () => {
    const results = await runHvac(`http://127.0.0.1:${port}`, token, [
      { method: 'list_keys' },
      { method: 'read_key', kwargs: { name: 'l-ec' } },
      { method: 'list_keys' },
    ]);
    expect(results[0]?.ok.data.keys).toEqual(['l-ec']);
    expect(results[1]?.ok.data.type).toBe('ecdsa-p256');
    expect(results[2]?.ok.data.keys).toEqual(['l-ec']);
  });
});
