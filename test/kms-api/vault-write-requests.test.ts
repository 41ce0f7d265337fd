// Vault transit writes as the curl examples of Vault's transit docs send them (the real curl, or byte for byte on a
// bare socket). Vault takes a write as PUT or POST and reads its body as JSON whatever the Content-Type; the transit
// routes do too, and stay strict otherwise. The `signed` audit entry of a transit signature names the door and the
// API key. Vault's Go client, the vault CLI and cosign's hashivault:// are test/conformance/vault-transit.test.ts's.
// On SQLite, and on PostgreSQL with SIGNBRIDGE_TEST_STORE=postgres.
import { execFile } from 'node:child_process';
import { createHash, createPublicKey, verify } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rawExchange } from '../helpers/raw-http.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

const run = promisify(execFile);

let svc: TestService;
let port: number;
let host: string;
const signers: Record<string, string> = {};
const pems: Record<string, string> = {};
const TENANTS = { 'w-ec': 'ECC_NIST_P256' } as const;
const BODY_LIMIT = 16 * 1024;

beforeAll(async () => {
  svc = await startTestService({
    bodyLimit: BODY_LIMIT,
    kmsApi: { enabled: true, heldWaitMs: 0, vaultMount: 'transit' },
  });
  const url = await svc.app.listen({ host: '127.0.0.1', port: 0 });
  port = Number(new URL(url).port);
  host = `127.0.0.1:${port}`;
  for (const [tenant, spec] of Object.entries(TENANTS)) {
    const made = await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: tenant, key_spec: spec });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    signers[tenant] = await svc.apiKey('signer', tenant);
    const admin = await svc.apiKey('admin', tenant);
    pems[tenant] = (await callAction(svc.app, admin, 'get_public_key', { tenant_id: tenant })).body
      .public_key_pem as string;
  }
}, 120_000);
afterAll(async () => svc?.close());

const b64 = (data: Buffer | string) => Buffer.from(data).toString('base64');
const sha256 = (data: string) => createHash('sha256').update(data).digest();
const sigBytes = (text: string) => Buffer.from(text.split(':')[2] as string, 'base64');
/** The API key's id: the part between `sbk_` and the secret. */
const keyIdOf = (token: string) => token.split('_')[1] as string;

describe("the curl examples of Vault's transit docs (--data @payload.json: a form Content-Type)", () => {
  it('signs with the real curl, POST and PUT, and a form body that is not JSON is refused in Vault shape', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'vault-curl-'));
    const payload = join(dir, 'payload.json');
    // As the docs' payload file: pretty-printed; curl's --data drops the newlines.
    writeFileSync(payload, `{\n  "input": "${b64('curl payload')}"\n}\n`);
    const token = signers['w-ec'] as string;
    for (const method of ['POST', 'PUT']) {
      const { stdout } = await run('/usr/bin/curl', [
        '--silent',
        '--show-error',
        '--header',
        `X-Vault-Token: ${token}`,
        '--request',
        method,
        '--data',
        `@${payload}`,
        '--write-out',
        '\n%{http_code}',
        `http://${host}/v1/transit/sign/w-ec`,
      ]);
      const [body = '', status] = stdout.split('\n');
      expect(status, body).toBe('200');
      const pem = pems['w-ec'] as string;
      expect(
        verify('sha256', Buffer.from('curl payload'), createPublicKey(pem), sigBytes(JSON.parse(body).data.signature)),
      ).toBe(true);
    }
    // A Content-Type that is no media type (Go's mime.ParseMediaType fails, so Vault reads JSON): read as JSON.
    for (const type of ['garbage', '']) {
      const body = JSON.stringify({ input: b64('curl payload') });
      const odd = await rawExchange(port, [
        `PUT /v1/transit/sign/w-ec HTTP/1.1\r\nHost: ${host}\r\nX-Vault-Token: ${token}\r\n` +
          `Content-Type: ${type}\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
      ]);
      expect(odd.status, `${JSON.stringify(type)}: ${odd.body}`).toBe(200);
    }
    // `curl -d input=...`: a real form, which Vault would read as one; signbridge reads JSON only and says so.
    const form = await rawExchange(port, [
      `POST /v1/transit/sign/w-ec HTTP/1.1\r\nHost: ${host}\r\nX-Vault-Token: ${token}\r\n` +
        `Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 14\r\n\r\ninput=AAAAAAA=`,
    ]);
    expect(form.status).toBe(400);
    expect(JSON.parse(form.body)).toEqual({
      errors: ['form-encoded bodies are not supported; send the fields as a JSON object'],
    });
  });
});

describe('still strict on the transit routes, and the JSON API unchanged', () => {
  it('invalid JSON, an oversized body, a prototype key: Vault-shaped 400 and 413, nothing signed', async () => {
    const token = signers['w-ec'] as string;
    const before = (await svc.store.audit.read(0, 1_000_000)).length;
    const send = (body: string) =>
      rawExchange(port, [
        `PUT /v1/transit/sign/w-ec HTTP/1.1\r\nHost: ${host}\r\nX-Vault-Token: ${token}\r\n` +
          `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
      ]);
    const broken = await send('{"input": ');
    expect(broken.status).toBe(400);
    expect(broken.headers['content-type']).toBe('application/json');
    expect(JSON.parse(broken.body).errors[0]).toMatch(/^body is not valid JSON/);
    const big = await send(JSON.stringify({ input: b64(Buffer.alloc(BODY_LIMIT)) }));
    expect(big.status).toBe(413);
    expect(JSON.parse(big.body)).toEqual({ errors: ['request body is larger than the limit'] });
    const poison = await send(`{"input":"${b64('x')}","__proto__":{"prehashed":true}}`);
    expect(poison.status).toBe(400);
    expect(JSON.parse(poison.body).errors[0]).toMatch(/__proto__/);
    const empty = await send('');
    expect(empty.status).toBe(400);
    expect(JSON.parse(empty.body).errors).toHaveLength(1);
    expect((await svc.store.audit.read(0, 1_000_000)).length).toBe(before);
  });

  it('POST /v1/sign without application/json is still 415, and PUT /v1/sign still 405', async () => {
    const token = signers['w-ec'] as string;
    const body = JSON.stringify({
      action: 'sign',
      tenant_id: 'w-ec',
      algorithm: 'ECDSA_SHA_256',
      hash: b64(sha256('x')),
    });
    const noType = await rawExchange(port, [
      `POST /v1/sign HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${token}\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    ]);
    expect(noType.status).toBe(415);
    const put = await rawExchange(port, [
      `PUT /v1/sign HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    ]);
    expect(put.status).toBe(405);
  });
});

describe('where a transit signature came from', () => {
  it("the `signed` entry names the Vault door and the API key's id (never the token), single and batch", async () => {
    const token = signers['w-ec'] as string;
    // POST with application/json, as hvac and jsign send (the door itself is not what is tested here).
    const post = async (body: object) => {
      const res = await fetch(`http://${host}/v1/transit/sign/w-ec`, {
        method: 'POST',
        headers: { 'x-vault-token': token, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      expect(res.status).toBe(200);
      // biome-ignore lint/suspicious/noExplicitAny: Vault's answers are untyped JSON
      return { index: Number(res.headers.get('signbridge-log-index')), json: (await res.json()) as any };
    };
    const single = await post({ input: b64('audited') });
    const batch = await post({ batch_input: [{ input: b64('one') }, { input: b64('two') }] });
    const indexes = [single.index, ...batch.json.data.batch_results.map((r: { log_index: number }) => r.log_index)];
    for (const at of indexes) {
      const [entry] = await svc.store.audit.read(at, 1);
      expect(entry).toMatchObject({ tenantId: 'w-ec', outcome: 'signed' });
      expect(entry?.details.via).toEqual({ api: 'vault-transit', api_key_id: keyIdOf(token) });
      expect(JSON.stringify(entry)).not.toContain(token.split('_')[2] as string);
    }
  });
});
