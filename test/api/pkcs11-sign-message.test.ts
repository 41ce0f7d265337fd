// /v1 pkcs11_sign with `message` (what the daemon sends for the PKCS#11 module's CKM_EDDSA): pure Ed25519 over the
// message for an ECC_NIST_EDWARDS25519 key, `hash` its SHA-512 (what the audit entry names), verified with
// @noble/curves' pure ed25519. A message for another key spec, one past the bound, one whose hash is not its SHA-512,
// or pure Ed25519 with only a hash: 400, nothing signed and no `signed` audit entry.
import { createHash, createPublicKey } from 'node:crypto';
import { ed25519 } from '@noble/curves/ed25519.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ED25519_MAX_MESSAGE_BYTES } from '../../src/crypto/algorithms.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

let svc: TestService;
beforeAll(async () => {
  svc = await startTestService();
});
afterAll(async () => svc?.close());

const sha512 = (b: Buffer) => createHash('sha512').update(b).digest();
const message = Buffer.from('the TBS bytes of a certificate, or a TLS 1.3 CertificateVerify input\n');

async function tenantOf(tenant: string, keySpec: string) {
  const created = await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: tenant, key_spec: keySpec });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  const signer = await svc.apiKey('signer', tenant);
  const admin = await svc.apiKey('admin', tenant);
  const pub = await callAction(svc.app, admin, 'get_public_key', { tenant_id: tenant });
  return { signer, pem: pub.body.public_key_pem as string };
}

async function signedEntries(tenant: string) {
  return (await svc.store.audit.read(0, 100_000)).filter((e) => e.tenantId === tenant && e.outcome === 'signed');
}

function rawEd25519Key(pem: string): Buffer {
  return Buffer.from(createPublicKey(pem).export({ format: 'jwk' }).x ?? '', 'base64url');
}

describe('pkcs11_sign with message (CKM_EDDSA through the daemon)', () => {
  let ed: Awaited<ReturnType<typeof tenantOf>>;
  let p256: Awaited<ReturnType<typeof tenantOf>>;
  beforeAll(async () => {
    ed = await tenantOf('eddsa-module', 'ECC_NIST_EDWARDS25519');
    p256 = await tenantOf('ecdsa-module', 'ECC_NIST_P256');
  });

  it('an Ed25519 key signs the message as pure Ed25519; the audit entry names its SHA-512', async () => {
    const res = await callAction(svc.app, ed.signer, 'pkcs11_sign', {
      tenant_id: 'eddsa-module',
      key_spec: 'ECC_NIST_EDWARDS25519',
      message: message.toString('base64'),
      hash: sha512(message).toString('base64'),
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.signing_algorithm).toBe('ED25519_SHA_512');
    const signature = Buffer.from(res.body.signature as string, 'base64');
    expect(signature).toHaveLength(64);
    expect(ed25519.verify(signature, message, rawEd25519Key(ed.pem))).toBe(true);
    const entries = await signedEntries('eddsa-module');
    expect(entries).toHaveLength(1);
    expect(JSON.stringify(entries[0])).toContain(sha512(message).toString('base64'));
    expect(JSON.stringify(entries[0])).not.toContain(message.toString('base64'));
  });

  const refusals: [string, () => Record<string, unknown>, string, RegExp][] = [
    [
      'a message for a P-256 key',
      () => ({
        tenant_id: 'ecdsa-module',
        message: message.toString('base64'),
        hash: sha512(message).toString('base64'),
      }),
      'algorithm_key_mismatch',
      /ED25519_SHA_512 cannot be used with a ECC_NIST_P256 key/,
    ],
    [
      'a message with key_spec ECC_NIST_P256',
      () => ({
        tenant_id: 'ecdsa-module',
        key_spec: 'ECC_NIST_P256',
        message: message.toString('base64'),
        hash: sha512(message).toString('base64'),
      }),
      'invalid_request',
      /only by an ECC_NIST_EDWARDS25519 key/,
    ],
    [
      `a message past ${ED25519_MAX_MESSAGE_BYTES} bytes`,
      () => {
        const long = Buffer.alloc(ED25519_MAX_MESSAGE_BYTES + 1, 0x61);
        return { tenant_id: 'eddsa-module', message: long.toString('base64'), hash: sha512(long).toString('base64') };
      },
      'invalid_request',
      /1 to 4096 bytes, got 4097/,
    ],
    [
      "a hash that is not the message's SHA-512",
      () => ({
        tenant_id: 'eddsa-module',
        message: message.toString('base64'),
        hash: sha512(Buffer.from('another message')).toString('base64'),
      }),
      'invalid_hash',
      /SHA-512 of the message/,
    ],
    [
      'pure Ed25519 with only a hash',
      () => ({ tenant_id: 'eddsa-module', hash: sha512(message).toString('base64') }),
      'unsupported_key_spec',
      /CKM_EDDSA over the message/,
    ],
  ];

  it.each(refusals)('%s: 400, nothing signed', async (_name, body, code, reason) => {
    const tenant = body().tenant_id as string;
    const before = (await signedEntries(tenant)).length;
    const res = await callAction(svc.app, tenant === 'eddsa-module' ? ed.signer : p256.signer, 'pkcs11_sign', body());
    expect(res.status, JSON.stringify(res.body)).toBe(400);
    expect(res.body.error).toBe(code);
    expect(String(res.body.reason)).toMatch(reason);
    expect(res.body.signature).toBeUndefined();
    expect((await signedEntries(tenant)).length).toBe(before);
  });
});
