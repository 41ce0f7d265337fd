// sign and pkcs11_sign against a real SoftHSM token: every key spec with every algorithm it allows,
// verified by node:crypto and by the openssl command; and every way a signing request can be wrong.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  algorithmInfo,
  algorithmsForKey,
  type KeySpec,
  SIGNING_ALGORITHMS,
  type SigningAlgorithm,
} from '../../src/crypto/algorithms.js';
import { digestOf, verifyWithNode, verifyWithOpenssl } from '../helpers/crypto.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

const SPECS: KeySpec[] = ['RSA_2048', 'RSA_3072', 'RSA_4096', 'ECC_NIST_P256', 'ECC_NIST_P384', 'ECC_NIST_P521'];

let svc: TestService;
const signers = new Map<KeySpec, string>();
const publicKeys = new Map<KeySpec, string>();
const tenantOf = (spec: KeySpec) => `t-${spec.toLowerCase().replaceAll('_', '-')}`;

beforeAll(async () => {
  svc = await startTestService();
  await Promise.all(
    SPECS.map(async (spec) => {
      const created = await callAction(svc.app, svc.operator, 'create_tenant', {
        tenant_id: tenantOf(spec),
        key_spec: spec,
      });
      expect(created.status, JSON.stringify(created.body)).toBe(201);
      const signer = await svc.apiKey('signer', tenantOf(spec));
      signers.set(spec, signer);
      const pub = await callAction(svc.app, signer, 'get_public_key', { tenant_id: tenantOf(spec) });
      publicKeys.set(spec, pub.body.public_key_pem as string);
    }),
  );
});
afterAll(async () => svc?.close());

async function sign(spec: KeySpec, body: Record<string, unknown>, action = 'sign') {
  return callAction(svc.app, signers.get(spec), action, { tenant_id: tenantOf(spec), ...body });
}

describe('sign: every key spec with every algorithm it allows', () => {
  const cases = SPECS.flatMap((spec) => algorithmsForKey(spec).map((alg) => [spec, alg] as const));
  it.each(cases)('%s with %s verifies with node:crypto and openssl', async (spec, algorithm) => {
    const message = Buffer.from(`artifact for ${spec} ${algorithm}`);
    const res = await sign(spec, { algorithm, hash: digestOf(algorithm, message).toString('base64') });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.signing_algorithm).toBe(algorithm);
    const sig = Buffer.from(res.body.signature as string, 'base64');
    const pem = publicKeys.get(spec) as string;
    expect(verifyWithNode(algorithm, pem, message, sig)).toBe(true);
    expect(verifyWithNode(algorithm, pem, Buffer.from('another message'), sig)).toBe(false);
    expect(verifyWithOpenssl(algorithm, pem, message, sig)).toBe('Verified OK');
    if (algorithmInfo(algorithm).padding === 'ecdsa') expect(sig[0]).toBe(0x30); // DER, as KMS returns it
  });

  it('rejects every algorithm a key does not allow, naming the allowed ones', async () => {
    for (const spec of SPECS) {
      const allowed = algorithmsForKey(spec);
      for (const algorithm of SIGNING_ALGORITHMS.filter((a) => !allowed.includes(a))) {
        const res = await sign(spec, { algorithm, hash: digestOf(algorithm, Buffer.from('x')).toString('base64') });
        expect(res.status).toBe(400);
        expect(res.body.error).toBe('algorithm_key_mismatch');
        expect(res.body.reason).toContain(allowed[0]);
      }
    }
  });
});

describe('sign: the hash field', () => {
  const message = Buffer.from('base64 variants');
  const digest = digestOf('RSASSA_PKCS1_V1_5_SHA_256', message);
  const variants = {
    'standard, padded': digest.toString('base64'),
    'standard, unpadded': digest.toString('base64').replace(/=+$/, ''),
    'URL-safe, padded': digest.toString('base64').replaceAll('+', '-').replaceAll('/', '_'),
    'URL-safe, unpadded': digest.toString('base64url'),
  };
  it.each(Object.entries(variants))('accepts %s base64', async (_name, hash) => {
    const res = await sign('RSA_2048', { hash });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const sig = Buffer.from(res.body.signature as string, 'base64');
    expect(verifyWithNode('RSASSA_PKCS1_V1_5_SHA_256', publicKeys.get('RSA_2048') as string, message, sig)).toBe(true);
  });

  it('defaults the algorithm to RSASSA_PKCS1_V1_5_SHA_256', async () => {
    const res = await sign('RSA_2048', { hash: variants['URL-safe, padded'] });
    expect(res.body.signing_algorithm).toBe('RSASSA_PKCS1_V1_5_SHA_256');
  });

  it.each([
    ['a SHA-384 digest for a SHA-256 algorithm', Buffer.alloc(48, 1).toString('base64'), 'invalid_hash', '32-byte'],
    ['a truncated digest', Buffer.alloc(31, 1).toString('base64'), 'invalid_hash', 'got 31 bytes'],
    ['characters outside base64', '!!!!', 'invalid_request', 'hash'],
    ['a bad base64 length', 'AAAAA', 'invalid_hash', 'length'],
    ['padding in the middle', 'AA==AAAA', 'invalid_request', 'hash'],
    ['an empty string', '', 'invalid_request', 'hash'],
  ])('rejects %s with a 400 naming the field', async (_name, hash, code, fragment) => {
    const before = (await svc.store.signatures.list(tenantOf('RSA_2048'), 1000)).length;
    const res = await sign('RSA_2048', { hash });
    expect(res.status).toBe(400);
    expect(res.body.error).toBe(code);
    expect(res.body.reason).toContain(fragment);
    expect((await svc.store.signatures.list(tenantOf('RSA_2048'), 1000)).length).toBe(before);
  });

  it('rejects a hash sent as a number (no type coercion)', async () => {
    const res = await sign('RSA_2048', { hash: 12345 });
    expect(res.status).toBe(400);
    expect(res.body.reason).toBe('body.hash must be string');
  });
});

describe('pkcs11_sign: algorithm chosen from key spec, digest length and pss_padding', () => {
  const rsaCases: Array<[number, boolean, SigningAlgorithm]> = [
    [32, false, 'RSASSA_PKCS1_V1_5_SHA_256'],
    [48, false, 'RSASSA_PKCS1_V1_5_SHA_384'],
    [64, false, 'RSASSA_PKCS1_V1_5_SHA_512'],
    [32, true, 'RSASSA_PSS_SHA_256'],
    [48, true, 'RSASSA_PSS_SHA_384'],
    [64, true, 'RSASSA_PSS_SHA_512'],
  ];
  it.each(rsaCases)('RSA: %d-byte digest, pss=%s -> %s', async (_len, pss, expected) => {
    const message = Buffer.from(`pkcs11 ${expected}`);
    const res = await sign(
      'RSA_3072',
      { hash: digestOf(expected, message).toString('base64'), pss_padding: pss, key_spec: 'RSA_3072' },
      'pkcs11_sign',
    );
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.signing_algorithm).toBe(expected);
    const sig = Buffer.from(res.body.signature as string, 'base64');
    expect(verifyWithNode(expected, publicKeys.get('RSA_3072') as string, message, sig)).toBe(true);
  });

  it.each([
    ['ECC_NIST_P256', 'ECDSA_SHA_256'],
    ['ECC_NIST_P384', 'ECDSA_SHA_384'],
    ['ECC_NIST_P521', 'ECDSA_SHA_512'],
    ['ECC_NIST_P384', 'ECDSA_SHA_256'],
    ['ECC_NIST_P521', 'ECDSA_SHA_256'],
    ['ECC_NIST_P256', 'ECDSA_SHA_512'],
  ] as const)('EC: %s signs a digest of any SHA-2 length and names it (%s)', async (spec, expected) => {
    const message = Buffer.from(`pkcs11 ${spec}`);
    const res = await sign(spec, { hash: digestOf(expected, message).toString('base64') }, 'pkcs11_sign');
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.signing_algorithm).toBe(expected);
    const sig = Buffer.from(res.body.signature as string, 'base64');
    expect(verifyWithNode(expected, publicKeys.get(spec) as string, message, sig)).toBe(true);
    expect(verifyWithOpenssl(expected, publicKeys.get(spec) as string, message, sig)).toBe('Verified OK');
    // The audit record names the digest really signed, not the curve's hash.
    const audit = await svc.store.audit.read(0, 100_000);
    const entry = audit.findLast((e) => e.tenantId === tenantOf(spec) && e.outcome === 'signed');
    expect(entry?.details).toMatchObject({ algorithm: expected });
  });

  it('rejects a key_spec that is not the tenant current key spec', async () => {
    const res = await sign(
      'RSA_2048',
      { hash: Buffer.alloc(32).toString('base64'), key_spec: 'RSA_4096' },
      'pkcs11_sign',
    );
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('key_spec_mismatch');
    expect(res.body.reason).toContain('RSA_2048');
  });

  it('rejects a digest of no SHA-2 size for an EC key, and PSS for EC', async () => {
    const wrong = await sign('ECC_NIST_P384', { hash: Buffer.alloc(20).toString('base64') }, 'pkcs11_sign');
    expect(wrong.status).toBe(400);
    expect(wrong.body.error).toBe('invalid_hash');
    const pss = await sign(
      'ECC_NIST_P256',
      { hash: Buffer.alloc(32).toString('base64'), pss_padding: true },
      'pkcs11_sign',
    );
    expect(pss.status).toBe(400);
    expect(pss.body.reason).toContain('pss_padding');
  });

  it('rejects an RSA digest that is no SHA-2 size', async () => {
    const res = await sign('RSA_2048', { hash: Buffer.alloc(20).toString('base64') }, 'pkcs11_sign');
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('invalid_hash');
  });
});

describe('records and concurrency', () => {
  it('records every issued signature with tenant, key, algorithm, hash and caller', async () => {
    const digest = digestOf('ECDSA_SHA_256', Buffer.from('recorded'));
    const res = await sign('ECC_NIST_P256', { algorithm: 'ECDSA_SHA_256', hash: digest.toString('base64url') });
    expect(res.status).toBe(200);
    const [latest] = await svc.store.signatures.list(tenantOf('ECC_NIST_P256'), 1);
    expect(latest).toMatchObject({
      tenantId: tenantOf('ECC_NIST_P256'),
      keyId: res.body.key_id,
      algorithm: 'ECDSA_SHA_256',
      hash: digest.toString('base64'),
      caller: (signers.get('ECC_NIST_P256') as string).slice(4, 20),
    });
    expect(Date.now() - Date.parse(latest?.createdAt as string)).toBeLessThan(60_000);
    // Time-ordered ids (UUIDv7), so records append to the id index rather than dirty a random page of it.
    expect(latest?.id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });

  it('signs 64 concurrent requests (more than the session pool) correctly and records each one', async () => {
    const before = (await svc.store.signatures.list(tenantOf('ECC_NIST_P256'), 10_000)).length;
    const results = await Promise.all(
      Array.from({ length: 64 }, async (_, i) => {
        const message = Buffer.from(`concurrent ${i}`);
        const res = await sign('ECC_NIST_P256', {
          algorithm: 'ECDSA_SHA_256',
          hash: digestOf('ECDSA_SHA_256', message).toString('base64'),
        });
        const sig = Buffer.from(res.body.signature as string, 'base64');
        return (
          res.status === 200 && verifyWithNode('ECDSA_SHA_256', publicKeys.get('ECC_NIST_P256') as string, message, sig)
        );
      }),
    );
    expect(results.filter(Boolean).length).toBe(64);
    // Recorded in group-committed batches: every one of them must be there.
    const after = await svc.store.signatures.list(tenantOf('ECC_NIST_P256'), 10_000);
    expect(after.length).toBe(before + 64);
    // In id order the records are in time order too.
    const byId = after.slice(0, 64).sort((x, y) => (x.id < y.id ? -1 : 1));
    expect(byId.map((r) => r.createdAt)).toEqual(byId.map((r) => r.createdAt).sort());
  });
});
