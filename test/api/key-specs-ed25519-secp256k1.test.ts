// ECC_NIST_EDWARDS25519 and ECC_SECG_P256K1 through the JSON API, as AWS KMS defines them: Ed25519's `hash` is the
// ED25519_PH_SHA_512 DIGEST input (the message's 64-byte SHA-512; the signature is Ed25519ph, RFC 8032 §5.1 with
// phflag 1), verified with @noble/curves' ed25519ph over the message; secp256k1 is ECDSA over a SHA-256 digest,
// DER, verified with `openssl dgst`. Bad input is a 400 with nothing signed and no `signed` audit entry.
import { execFileSync } from 'node:child_process';
import { createHash, createPublicKey } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ed25519, ed25519ph } from '@noble/curves/ed25519.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SoftwareKeyStore } from '../../src/keys/software/software-key-store.js';
import { callAction, makeTempDir, startTestService, type TestService } from '../helpers/service.js';

let svc: TestService;
beforeAll(async () => {
  svc = await startTestService();
});
afterAll(async () => svc?.close());

const message = Buffer.from('release 1.4.2 of an artifact, signed with a new kind of key\n');
const sha512 = createHash('sha512').update(message).digest();
const sha256 = createHash('sha256').update(message).digest();

async function tenantOf(tenant: string, keySpec: string) {
  const created = await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: tenant, key_spec: keySpec });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  const admin = await svc.apiKey('admin', tenant);
  const signer = await svc.apiKey('signer', tenant);
  const pub = await callAction(svc.app, admin, 'get_public_key', { tenant_id: tenant });
  expect(pub.status, JSON.stringify(pub.body)).toBe(200);
  return { admin, signer, pub: pub.body as Record<string, unknown> };
}

async function signedEntries(tenant: string): Promise<number> {
  return (await svc.store.audit.read(0, 100_000)).filter((e) => e.tenantId === tenant && e.outcome === 'signed').length;
}

/** `openssl dgst -sha256 -verify`: the signature is ECDSA over SHA-256 of the message, under the PEM's key. */
function opensslVerifies(pem: string, signature: Buffer): boolean {
  const dir = makeTempDir('sb-k1-');
  writeFileSync(join(dir, 'pub.pem'), pem);
  writeFileSync(join(dir, 'msg'), message);
  writeFileSync(join(dir, 'sig'), signature);
  try {
    const args = ['dgst', '-sha256', '-verify', join(dir, 'pub.pem'), '-signature', join(dir, 'sig'), join(dir, 'msg')];
    return execFileSync('openssl', args, { stdio: ['ignore', 'pipe', 'ignore'] })
      .toString()
      .includes('Verified OK');
  } catch {
    return false;
  }
}

function rawEd25519Key(pem: string): Buffer {
  return Buffer.from(createPublicKey(pem).export({ format: 'jwk' }).x ?? '', 'base64url');
}

describe('ECC_NIST_EDWARDS25519', () => {
  const tenant = 'ed25519-release';
  let keys: Awaited<ReturnType<typeof tenantOf>>;
  beforeAll(async () => {
    keys = await tenantOf(tenant, 'ECC_NIST_EDWARDS25519');
  });

  it('get_public_key: an Ed25519 SPKI in the software key store; sign takes ED25519_PH_SHA_512 only', () => {
    expect(keys.pub.key_spec).toBe('ECC_NIST_EDWARDS25519');
    expect(keys.pub.key_store).toBe('software');
    // Pure ED25519_SHA_512 signs the message, which `sign` does not carry (KMS's DescribeKey lists both).
    expect(keys.pub.signing_algorithms).toEqual(['ED25519_PH_SHA_512']);
    expect(createPublicKey(keys.pub.public_key_pem as string).asymmetricKeyType).toBe('ed25519');
  });

  it("sign with ED25519_PH_SHA_512 and the message's SHA-512: Ed25519ph of the message, not pure Ed25519", async () => {
    const signed = await callAction(svc.app, keys.signer, 'sign', {
      tenant_id: tenant,
      algorithm: 'ED25519_PH_SHA_512',
      hash: sha512.toString('base64'),
    });
    expect(signed.status, JSON.stringify(signed.body)).toBe(200);
    expect(signed.body.signing_algorithm).toBe('ED25519_PH_SHA_512');
    const signature = Buffer.from(signed.body.signature as string, 'base64');
    expect(signature).toHaveLength(64);
    const publicKey = rawEd25519Key(keys.pub.public_key_pem as string);
    expect(ed25519ph.verify(signature, message, publicKey)).toBe(true);
    expect(ed25519ph.verify(signature, Buffer.from('another message'), publicKey)).toBe(false);
    expect(ed25519.verify(signature, message, publicKey)).toBe(false);
  });

  it.each([
    ['a 32-byte hash for Ed25519ph', 'ED25519_PH_SHA_512', sha256, 'invalid_hash', /64-byte SHA-512/],
    ['pure Ed25519 with only a hash', 'ED25519_SHA_512', sha512, 'invalid_request', /signs the message itself/],
    ['an ECDSA algorithm on an Ed25519 key', 'ECDSA_SHA_256', sha256, 'algorithm_key_mismatch', /ED25519_PH_SHA_512/],
  ])('%s: 400, nothing signed, no signed entry', async (_name, algorithm, hash, code, message) => {
    const before = await signedEntries(tenant);
    const res = await callAction(svc.app, keys.signer, 'sign', {
      tenant_id: tenant,
      algorithm,
      hash: hash.toString('base64'),
    });
    expect(res.status, JSON.stringify(res.body)).toBe(400);
    expect(res.body.error).toBe(code);
    expect(String(res.body.reason)).toMatch(message);
    expect(res.body.signature).toBeUndefined();
    expect(await signedEntries(tenant)).toBe(before);
  });

  it('pkcs11_sign (a bare digest for CKM_ECDSA or RSA) refuses an Ed25519 key with a 400', async () => {
    const before = await signedEntries(tenant);
    const res = await callAction(svc.app, keys.signer, 'pkcs11_sign', {
      tenant_id: tenant,
      hash: sha512.toString('base64'),
    });
    expect(res.status, JSON.stringify(res.body)).toBe(400);
    expect(String(res.body.reason)).toMatch(/ED25519_PH_SHA_512/);
    expect(await signedEntries(tenant)).toBe(before);
  });

  it('rotate_key keeps the spec and the new key signs', async () => {
    const rotated = await callAction(svc.app, keys.admin, 'rotate_key', { tenant_id: tenant });
    expect(rotated.status, JSON.stringify(rotated.body)).toBe(200);
    expect(rotated.body.key_spec).toBe('ECC_NIST_EDWARDS25519');
    const pub = await callAction(svc.app, keys.admin, 'get_public_key', { tenant_id: tenant });
    const signed = await callAction(svc.app, keys.signer, 'sign', {
      tenant_id: tenant,
      algorithm: 'ED25519_PH_SHA_512',
      hash: sha512.toString('base64'),
    });
    expect(signed.status).toBe(200);
    const signature = Buffer.from(signed.body.signature as string, 'base64');
    expect(ed25519ph.verify(signature, message, rawEd25519Key(pub.body.public_key_pem as string))).toBe(true);
  });
});

describe('ECC_SECG_P256K1', () => {
  const tenant = 'secp256k1-wallet';
  let keys: Awaited<ReturnType<typeof tenantOf>>;
  beforeAll(async () => {
    keys = await tenantOf(tenant, 'ECC_SECG_P256K1');
  });

  it('lives on the token (SoftHSM, CKM_EC_KEY_PAIR_GEN on 1.3.132.0.10) and its SPKI names secp256k1', () => {
    expect(keys.pub.key_store).toBe('pkcs11');
    expect(keys.pub.signing_algorithms).toContain('ECDSA_SHA_256');
    const details = createPublicKey(keys.pub.public_key_pem as string).asymmetricKeyDetails;
    expect(details?.namedCurve).toBe('secp256k1');
  });

  it('ECDSA_SHA_256 over a SHA-256 digest: a DER signature openssl dgst verifies over the message', async () => {
    const signed = await callAction(svc.app, keys.signer, 'sign', {
      tenant_id: tenant,
      algorithm: 'ECDSA_SHA_256',
      hash: sha256.toString('base64'),
    });
    expect(signed.status, JSON.stringify(signed.body)).toBe(200);
    const signature = Buffer.from(signed.body.signature as string, 'base64');
    expect(signature[0]).toBe(0x30);
    expect(opensslVerifies(keys.pub.public_key_pem as string, signature)).toBe(true);
    expect(opensslVerifies(keys.pub.public_key_pem as string, Buffer.from(signature).fill(1, 10, 12))).toBe(false);
  });

  it('an Ed25519 algorithm on a secp256k1 key: 400, nothing signed', async () => {
    const before = await signedEntries(tenant);
    const res = await callAction(svc.app, keys.signer, 'sign', {
      tenant_id: tenant,
      algorithm: 'ED25519_PH_SHA_512',
      hash: sha512.toString('base64'),
    });
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('algorithm_key_mismatch');
    expect(await signedEntries(tenant)).toBe(before);
  });

  it('the software key store holds secp256k1 too (where no token comes first): openssl verifies its signature', async () => {
    const software = new SoftwareKeyStore(svc.keyStore, svc.keyStore.description, { signThreads: 0 });
    try {
      const made = await software.createKey('ECC_SECG_P256K1', 'k1-software/k1');
      expect(createPublicKey(made.publicKeyPem).asymmetricKeyDetails?.namedCurve).toBe('secp256k1');
      const signature = await software.sign(made.keyRef, 'ECC_SECG_P256K1', 'ECDSA_SHA_256', sha256);
      expect(opensslVerifies(made.publicKeyPem, signature)).toBe(true);
    } finally {
      await software.close();
    }
  });
});
