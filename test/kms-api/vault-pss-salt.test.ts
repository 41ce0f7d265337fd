// Vault transit's salt_length for RSA PSS, sent by hvac (Debian's python3-hvac; its sign_data predates the field, so
// the body goes through hvac's own adapter as newer hvac's sign_data builds it: {"input", ..., "salt_length"}).
// Vault's rules (builtin/logical/transit path_sign_verify.go getSaltLength; Go's crypto/rsa): "auto" (the default)
// signs with the longest salt the key holds and verifies any; "hash" the hash's length; a number that many bytes,
// 0 being auto and -1 hash; below -1, not a number, or longer than the key holds: 400. Every signature is checked by
// node:crypto with the exact salt length, and with a wrong one failing. On SQLite, and on PostgreSQL with
// SIGNBRIDGE_TEST_STORE=postgres.
import { createHash, createPublicKey, constants as cryptoConstants, type KeyObject, verify } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PolicyEngine } from '../../src/policy/policy.js';
import { hvacMissing, runHvac } from '../helpers/hvac.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

const missing = hvacMissing();
let svc: TestService;
let url: string;
let signer: string;
let key: KeyObject;
let heldKey: KeyObject;

/** Tenant s-held waits for a person's approval; the others are allowed. */
const policy: PolicyEngine = {
  async evaluate(input) {
    if (input.tenantId === 's-held') return { outcome: 'pending_approval', rule: 'two-person', reason: 'held' };
    return { outcome: 'allow', rule: 'default', reason: 'allowed' };
  },
};

beforeAll(async () => {
  if (missing) return;
  svc = await startTestService({ policy, kmsApi: { enabled: true, heldWaitMs: 0, vaultMount: 'transit' } });
  url = await svc.app.listen({ host: '127.0.0.1', port: 0 });
  const made = await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 's-rsa', key_spec: 'RSA_2048' });
  expect(made.status, JSON.stringify(made.body)).toBe(201);
  signer = await svc.apiKey('signer', 's-rsa');
  const admin = await svc.apiKey('admin', 's-rsa');
  key = createPublicKey(
    (await callAction(svc.app, admin, 'get_public_key', { tenant_id: 's-rsa' })).body.public_key_pem as string,
  );
  const held = await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 's-held', key_spec: 'RSA_2048' });
  expect(held.status, JSON.stringify(held.body)).toBe(201);
  heldKey = createPublicKey(
    (await callAction(svc.app, await svc.apiKey('admin', 's-held'), 'get_public_key', { tenant_id: 's-held' })).body
      .public_key_pem as string,
  );
}, 120_000);
afterAll(async () => svc?.close());

const MESSAGE = Buffer.from('release 2.0 of the tool');
const b64 = (data: Buffer) => data.toString('base64');
const sigBytes = (text: string) => Buffer.from(text.split(':')[2] as string, 'base64');
const pssVerifies = (hash: string, signature: Buffer, saltLength: number) =>
  verify(hash, MESSAGE, { key, padding: cryptoConstants.RSA_PKCS1_PSS_PADDING, saltLength }, signature);

/** hvac's transit sign body for s-rsa (newer hvac's sign_data: the given fields, nones left out). */
const signCall = (fields: Record<string, unknown>) => ({
  method: 'post' as const,
  path: '/v1/transit/sign/s-rsa',
  json: { input: b64(MESSAGE), ...fields },
});

describe.skipIf(missing)('Vault transit RSA PSS salt_length', () => {
  it('signs with the salt length asked: auto (the default, the longest), hash, a number, 0 and -1', async () => {
    const asked = [
      [{}, 'sha256', 222], // 256 - 32 - 2: RSA-2048's longest salt with SHA-256
      [{ salt_length: 'auto' }, 'sha256', 222],
      [{ salt_length: 'AUTO', hash_algorithm: 'sha2-512' }, 'sha512', 190], // Vault lower-cases it
      [{ salt_length: 'hash' }, 'sha256', 32],
      [{ salt_length: 'hash', hash_algorithm: 'sha2-384' }, 'sha384', 48],
      [{ salt_length: '20' }, 'sha256', 20],
      [{ salt_length: 222 }, 'sha256', 222], // a JSON number: Vault decodes it weakly
      [{ salt_length: '0' }, 'sha256', 222], // Go's PSSSaltLengthAuto
      [{ salt_length: '-1' }, 'sha256', 32], // Go's PSSSaltLengthEqualsHash
    ] as const;
    const results = await runHvac(
      url,
      signer,
      asked.map(([fields]) => signCall(fields)),
    );
    for (const [i, [fields, hash, saltLength]] of asked.entries()) {
      const result = results[i];
      expect(result?.error, JSON.stringify(fields)).toBeUndefined();
      const signature = sigBytes(result?.ok.data.signature);
      expect(pssVerifies(hash, signature, saltLength), `${JSON.stringify(fields)}: salt ${saltLength}`).toBe(true);
      const wrong = saltLength === 32 ? 222 : 32;
      expect(pssVerifies(hash, signature, wrong), `${JSON.stringify(fields)}: salt ${wrong}`).toBe(false);
    }
  });

  it("refuses what the key cannot take, with Vault's words, and signs nothing", async () => {
    const signedBefore = (await svc.store.audit.read(0, 1_000_000)).filter((e) => e.outcome === 'signed').length;
    const results = await runHvac(url, signer, [
      signCall({ salt_length: '-2' }),
      signCall({ salt_length: 'longest' }),
      signCall({ salt_length: '223' }),
      signCall({ salt_length: '191', hash_algorithm: 'sha2-512' }),
      signCall({ salt_length: 1.5 }),
    ]);
    const errors = results.map((r) => {
      expect(r.error?.type, JSON.stringify(r)).toBe('InvalidRequest');
      return r.error?.errors[0];
    });
    expect(errors[0]).toBe('salt length is invalid: -2');
    expect(errors[1]).toBe("salt length neither 'auto', 'hash', nor an int: longest");
    expect(errors[2]).toBe(
      'salt length is invalid: 223 is longer than a 2048-bit RSA key holds with sha256 (at most 222)',
    );
    expect(errors[3]).toMatch(/^salt length is invalid: 191 .* \(at most 190\)$/);
    expect(errors[4]).toMatch(/^salt_length /); // neither a string nor an integer
    const signedAfter = (await svc.store.audit.read(0, 1_000_000)).filter((e) => e.outcome === 'signed').length;
    expect(signedAfter).toBe(signedBefore);
  });

  it('verify takes salt_length too: auto detects it, a number or hash must match', async () => {
    const [signed] = await runHvac(url, signer, [signCall({ salt_length: '20' })]);
    const signature = signed?.ok.data.signature as string;
    const verifyCall = (salt?: unknown) => ({
      method: 'post' as const,
      path: '/v1/transit/verify/s-rsa',
      json: { input: b64(MESSAGE), signature, ...(salt !== undefined && { salt_length: salt }) },
    });
    const checks = await runHvac(url, signer, [
      verifyCall(),
      verifyCall('auto'),
      verifyCall('20'),
      verifyCall('hash'),
      verifyCall('21'),
      verifyCall('-3'),
    ]);
    expect(checks.slice(0, 5).map((c) => c.ok?.data.valid)).toEqual([true, true, true, false, false]);
    expect(checks[5]?.error?.errors).toEqual(['salt length is invalid: -3']);
  });

  it('the signed audit entry records the salt length the signature was made with', async () => {
    const digest = createHash('sha256').update(MESSAGE).digest();
    const res = await fetch(`${url}/v1/transit/sign/s-rsa`, {
      method: 'POST',
      headers: { 'x-vault-token': signer, 'content-type': 'application/json' },
      body: JSON.stringify({ input: b64(digest), prehashed: true, salt_length: '64' }),
    });
    expect(res.status).toBe(200);
    const [entry] = await svc.store.audit.read(Number(res.headers.get('signbridge-log-index')), 1);
    expect(entry?.details).toMatchObject({ algorithm: 'RSASSA_PSS_SHA_256', pss_salt_length: 64 });
    const body = (await res.json()) as { data: { signature: string } };
    expect(pssVerifies('sha256', sigBytes(body.data.signature), 64)).toBe(true);
  });

  it('a request held for approval is signed at its approval with the salt length it asked for', async () => {
    const heldSigner = await svc.apiKey('signer', 's-held');
    const approver = await svc.apiKey('approver', 's-held');
    const ask = (salt: string) =>
      fetch(`${url}/v1/transit/sign/s-held`, {
        method: 'POST',
        headers: { 'x-vault-token': heldSigner, 'content-type': 'application/json' },
        body: JSON.stringify({ input: b64(MESSAGE), salt_length: salt }),
      });
    const requestOf = async (res: Response) => {
      const text = JSON.stringify(await res.json());
      const id = /signing request ([0-9a-f-]{36})/.exec(text)?.[1];
      expect(id, text).toBeDefined();
      return id as string;
    };
    const held = await ask('20');
    expect(held.status).toBe(400); // Vault's answer for a held call: InvalidRequest naming the request
    const requestId = await requestOf(held);
    // Another salt is another signature: its own request, not a continuation of this one.
    expect(await requestOf(await ask('hash'))).not.toBe(requestId);
    const approved = await callAction(svc.app, approver, 'approve_sign', {
      tenant_id: 's-held',
      request_id: requestId,
    });
    expect(approved.status, JSON.stringify(approved.body)).toBe(200);
    const again = await ask('20');
    expect(again.status).toBe(200);
    const signature = sigBytes(((await again.json()) as { data: { signature: string } }).data.signature);
    const pss = (saltLength: number) =>
      verify(
        'sha256',
        MESSAGE,
        { key: heldKey, padding: cryptoConstants.RSA_PKCS1_PSS_PADDING, saltLength },
        signature,
      );
    expect(pss(20)).toBe(true);
    expect(pss(32)).toBe(false);
    const [entry] = await svc.store.audit.read(Number(again.headers.get('signbridge-log-index')), 1);
    expect(entry?.details).toMatchObject({ outcome_of: 'approved', pss_salt_length: 20 });
  });
});
