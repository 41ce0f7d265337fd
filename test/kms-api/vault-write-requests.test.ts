// Vault transit writes as the clients that are not hvac send them, byte for byte on a bare socket (or by the real
// curl): Vault's Go client (the vault CLI, Terraform's provider and cosign's hashivault:// all write through it), the
// curl examples of Vault's transit docs, and cosign's hashivault:// signer end to end. Vault takes a write as PUT or
// POST and reads its body as JSON whatever the Content-Type; the transit routes do too, and stay strict otherwise.
// The `signed` audit entry of a transit signature names the door and the API key. On SQLite, and on PostgreSQL with
// SIGNBRIDGE_TEST_STORE=postgres.
import { execFile } from 'node:child_process';
import { createHash, createPublicKey, constants as cryptoConstants, verify } from 'node:crypto';
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
const TENANTS = { 'w-ec': 'ECC_NIST_P256', 'w-rsa': 'RSA_2048' } as const;
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

/**
 * A request as Vault's Go client (github.com/hashicorp/vault/api) puts it on the wire:
 * - api/logical.go (commit 0050583, lines 24-26): Write is `NewRequest("PUT", "/v1/"+path)` with SetJSONBody; Read
 *   is a GET with no body.
 * - api/request.go (commit dc215f9, lines 44-53): SetJSONBody is `json.Marshal(val)`: compact, map keys sorted, no
 *   trailing newline; toRetryableHTTP sets the token as `X-Vault-Token` and sets no Content-Type.
 * - api/client.go (commit 043ca62, NewRequest): the method and path as given, the token, the client's headers.
 *   `X-Vault-Request: true` (what Vault Agent's require_request_header asks for, sent by current clients) is added
 *   from memory of newer releases, not from the revision read here; the server ignores it either way.
 * - Go's net/http writes Host, User-Agent `Go-http-client/1.1`, Content-Length (for a body), the client's headers
 *   in sorted order, and `Accept-Encoding: gzip`; HTTP/1.1 keep-alive (no Connection header).
 * The body here is built as json.Marshal builds it: `JSON.stringify` of an object whose keys are already sorted.
 */
function goClientRequest(method: 'GET' | 'PUT', path: string, token: string, data?: Record<string, unknown>): string {
  const body =
    data === undefined
      ? ''
      : JSON.stringify(Object.fromEntries(Object.entries(data).sort(([a], [b]) => (a < b ? -1 : 1))));
  return (
    `${method} /v1/${path} HTTP/1.1\r\nHost: ${host}\r\nUser-Agent: Go-http-client/1.1\r\n` +
    (data === undefined ? '' : `Content-Length: ${Buffer.byteLength(body)}\r\n`) +
    `X-Vault-Request: true\r\nX-Vault-Token: ${token}\r\nAccept-Encoding: gzip\r\n\r\n${body}`
  );
}

async function goClient(method: 'GET' | 'PUT', path: string, token: string, data?: Record<string, unknown>) {
  const answer = await rawExchange(port, [goClientRequest(method, path, token, data)]);
  // biome-ignore lint/suspicious/noExplicitAny: Vault's answers are untyped JSON
  return { status: answer.status, headers: answer.headers, json: JSON.parse(answer.body) as any };
}

describe("Vault's Go client (Logical().Write is PUT, JSON with no Content-Type)", () => {
  it('signs and verifies with PUT, with and without the hash in the path; reads stay GET', async () => {
    const token = signers['w-ec'] as string;
    const key = await goClient('GET', 'transit/keys/w-ec', token);
    expect(key.status).toBe(200);
    const pem = key.json.data.keys['1'].public_key as string;
    for (const path of ['transit/sign/w-ec', 'transit/sign/w-ec/sha2-256']) {
      const signed = await goClient('PUT', path, token, { input: b64('go client release') });
      expect(signed.status, JSON.stringify(signed.json)).toBe(200);
      expect(signed.headers['content-type']).toBe('application/json');
      const signature = signed.json.data.signature as string;
      expect(verify('sha256', Buffer.from('go client release'), createPublicKey(pem), sigBytes(signature))).toBe(true);
      const verified = await goClient('PUT', path.replace('/sign/', '/verify/'), token, {
        input: b64('go client release'),
        signature,
      });
      expect(verified.status).toBe(200);
      expect(verified.json).toEqual({ data: { valid: true } });
    }
    // A read with PUT is no write transit has: Vault's own 405-less answer is an unsupported path here.
    const readWithPut = await goClient('PUT', 'transit/keys/w-ec', token, {});
    expect(readWithPut.status).toBe(404);
    expect(readWithPut.json).toEqual({ errors: ['unsupported path'] });
  });

  it("the vault CLI's `vault write transit/sign/<key> input=... prehashed=true hash_algorithm=sha2-256`: every value a string", async () => {
    // command/write.go parses each key=value into map[string]interface{} as a string and calls Logical().Write.
    const token = signers['w-rsa'] as string;
    const digest = sha256('cli artifact');
    const signed = await goClient('PUT', 'transit/sign/w-rsa', token, {
      input: b64(digest),
      prehashed: 'true',
      hash_algorithm: 'sha2-256',
      signature_algorithm: 'pkcs1v15',
    });
    expect(signed.status, JSON.stringify(signed.json)).toBe(200);
    const pem = pems['w-rsa'] as string;
    expect(
      verify('sha256', Buffer.from('cli artifact'), createPublicKey(pem), sigBytes(signed.json.data.signature)),
    ).toBe(true);
    const notABool = await goClient('PUT', 'transit/sign/w-rsa', token, { input: b64(digest), prehashed: 'yes' });
    expect(notABool.status).toBe(400);
    expect(notABool.json.errors[0]).toMatch(/^prehashed must be boolean/);
  });
});

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

describe("cosign's hashivault:// signer, end to end", () => {
  // sigstore/sigstore pkg/signature/kms/hashivault/client.go (v1.4.0, summarised in
  // test/fixtures/sigstore-go/README.md): fetchPublicKey reads `keys/<name>` with Logical().Read and takes
  // data.keys[<data.latest_version>].public_key; sign() writes `sign/<name>/sha2-256` with Logical().Write
  // {"input": base64 of the digest, "prehashed": true, "key_version": "0"} and strips `vault:vN:` from
  // data.signature; verify() writes `verify/<name>/sha2-256` with {"input", "prehashed": true, "signature"} and reads
  // data.valid. No signature_algorithm is sent: an RSA key signs PSS, Vault's default.
  for (const tenant of Object.keys(TENANTS)) {
    it(`signs a digest with ${tenant} and the signature verifies with the public key it read`, async () => {
      const token = signers[tenant] as string;
      const key = await goClient('GET', `transit/keys/${tenant}`, token);
      expect(key.status).toBe(200);
      const latest = key.json.data.latest_version as number;
      expect(typeof latest).toBe('number');
      const publicKey = createPublicKey(key.json.data.keys[String(latest)].public_key as string);
      const payload = Buffer.from('{"critical":{"image":{"docker-manifest-digest":"sha256:abc"}}}');
      const digest = createHash('sha256').update(payload).digest();
      const signed = await goClient('PUT', `transit/sign/${tenant}/sha2-256`, token, {
        input: b64(digest),
        key_version: '0',
        prehashed: true,
      });
      expect(signed.status, JSON.stringify(signed.json)).toBe(200);
      const encoded = (signed.json.data.signature as string).replace(/vault:v[0-9]+:/, '');
      const signature = Buffer.from(encoded, 'base64');
      const verifyKey =
        tenant === 'w-rsa'
          ? {
              key: publicKey,
              padding: cryptoConstants.RSA_PKCS1_PSS_PADDING,
              saltLength: cryptoConstants.RSA_PSS_SALTLEN_AUTO,
            }
          : publicKey;
      expect(verify('sha256', payload, verifyKey, signature)).toBe(true);
      const verified = await goClient('PUT', `transit/verify/${tenant}/sha2-256`, token, {
        input: b64(digest),
        prehashed: true,
        signature: `vault:v1:${encoded}`,
      });
      expect(verified.json).toEqual({ data: { valid: true } });
    });
  }
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
