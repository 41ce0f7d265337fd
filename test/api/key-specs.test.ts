// Every one of the contract's ten key specs on the embedded default (SoftHSM for RSA and EC, the software key
// store sealed by the token for ML-DSA and SM2): create, sign, verify with an independent verifier, rotate.
import { execFileSync } from 'node:child_process';
import { createHash, createPublicKey, verify } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ml_dsa44, ml_dsa65, ml_dsa87 } from '@noble/post-quantum/ml-dsa.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEY_SPECS, type KeySpec, type SigningAlgorithm } from '../../src/crypto/algorithms.js';
import { mlDsaMu, sm2Digest } from '../../src/crypto/message-representatives.js';
import { parseMlDsaSpki, parseSm2Spki } from '../../src/crypto/spki.js';
import { callAction, makeTempDir, startTestService, type TestService } from '../helpers/service.js';

let svc: TestService;
const work = makeTempDir('signbridge-specs-');
beforeAll(async () => {
  svc = await startTestService();
});
afterAll(async () => svc?.close());

const message = Buffer.from('an artifact to sign, the same for every key spec\n');
const ML_DSA = { ML_DSA_44: ml_dsa44, ML_DSA_65: ml_dsa65, ML_DSA_87: ml_dsa87 } as Record<string, typeof ml_dsa65>;

function spkiDer(pem: string): Buffer {
  return Buffer.from(pem.replace(/-----[^-]+-----|\s/g, ''), 'base64');
}

/** What a client sends as `hash`, and the algorithm it names. */
function input(spec: KeySpec, pem: string): { hash: Buffer; algorithm: SigningAlgorithm } {
  if (spec.startsWith('ML_DSA')) {
    const parsed = parseMlDsaSpki(spkiDer(pem));
    if (!parsed) throw new Error('not an ML-DSA SPKI');
    return { hash: mlDsaMu(parsed.publicKey, [message]), algorithm: 'ML_DSA_SHAKE_256' };
  }
  if (spec === 'SM2') {
    const point = parseSm2Spki(spkiDer(pem));
    if (!point) throw new Error('not an SM2 SPKI');
    return { hash: sm2Digest(point, [message]), algorithm: 'SM2DSA' };
  }
  if (spec.startsWith('RSA')) {
    return { hash: createHash('sha384').update(message).digest(), algorithm: 'RSASSA_PSS_SHA_384' };
  }
  return { hash: createHash('sha256').update(message).digest(), algorithm: 'ECDSA_SHA_256' };
}

/** Verifies over the message itself with a verifier that owes nothing to the service. */
function verifyIndependently(spec: KeySpec, pem: string, signature: Buffer): boolean {
  if (spec.startsWith('ML_DSA')) {
    const parsed = parseMlDsaSpki(spkiDer(pem));
    return ML_DSA[spec]?.verify(signature, message, parsed?.publicKey ?? new Uint8Array()) ?? false;
  }
  if (spec === 'SM2') {
    // openssl with KMS's distinguishing ID (its default ID is empty).
    const dir = join(work, 'sm2');
    execFileSync('mkdir', ['-p', dir]);
    writeFileSync(join(dir, 'pub.pem'), pem);
    writeFileSync(join(dir, 'msg'), message);
    writeFileSync(join(dir, 'sig'), signature);
    try {
      const out = execFileSync('openssl', [
        'pkeyutl',
        '-verify',
        '-pubin',
        '-inkey',
        join(dir, 'pub.pem'),
        '-rawin',
        '-digest',
        'sm3',
        '-pkeyopt',
        'distid:1234567812345678',
        '-in',
        join(dir, 'msg'),
        '-sigfile',
        join(dir, 'sig'),
      ]);
      return out.toString().includes('Signature Verified Successfully');
    } catch {
      return false;
    }
  }
  const key = createPublicKey(pem);
  if (spec.startsWith('RSA')) return verify('sha384', message, { key, padding: 6, saltLength: 48 }, signature);
  return verify('sha256', message, key, signature);
}

/** Where the embedded default keeps each spec: SoftHSM 2.6.1 holds neither ML-DSA nor SM2. */
function storeOf(spec: KeySpec): string {
  return spec.startsWith('ML_DSA') || spec === 'SM2' ? 'software' : 'pkcs11';
}

const SIGNATURE_BYTES: Partial<Record<KeySpec, number>> = { ML_DSA_44: 2420, ML_DSA_65: 3309, ML_DSA_87: 4627 };

describe.each(KEY_SPECS.map((s) => [s]))('%s', (spec) => {
  const tenant = `spec-${spec.toLowerCase().replaceAll('_', '-')}`;
  it('is created, signs, verifies independently, rotates, and the new key signs too', async () => {
    const created = await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: tenant, key_spec: spec });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const admin = await svc.apiKey('admin', tenant);
    const signer = await svc.apiKey('signer', tenant);
    for (const round of [1, 2]) {
      const pub = await callAction(svc.app, admin, 'get_public_key', { tenant_id: tenant });
      expect(pub.status).toBe(200);
      expect(pub.body.key_spec).toBe(spec);
      expect(pub.body.key_store).toBe(storeOf(spec));
      const pem = pub.body.public_key_pem as string;
      const { hash, algorithm } = input(spec, pem);
      expect(pub.body.signing_algorithms).toContain(algorithm);
      const signed = await callAction(svc.app, signer, 'sign', {
        tenant_id: tenant,
        hash: hash.toString('base64'),
        algorithm,
      });
      expect(signed.status, JSON.stringify(signed.body)).toBe(200);
      const signature = Buffer.from(signed.body.signature as string, 'base64');
      if (SIGNATURE_BYTES[spec]) expect(signature.length).toBe(SIGNATURE_BYTES[spec]);
      expect(verifyIndependently(spec, pem, signature), `round ${round}`).toBe(true);
      // The audit entry of that signature names the key store that made it.
      const entry = (await svc.store.readAudit(0, 100_000)).findLast(
        (e) => e.tenantId === tenant && e.outcome === 'signed',
      );
      expect(entry?.details).toMatchObject({ key_id: pub.body.key_id, key_store: storeOf(spec), algorithm });
      // A flipped message must not verify: the verifier really checks.
      const other = Buffer.from(signature);
      other.writeUInt8((other.readUInt8(other.length >> 1) ^ 1) & 0xff, other.length >> 1);
      expect(verifyIndependently(spec, pem, other)).toBe(false);
      if (round === 1) {
        const rotated = await callAction(svc.app, admin, 'rotate_key', { tenant_id: tenant });
        expect(rotated.status, JSON.stringify(rotated.body)).toBe(200);
      }
    }
    const keys = await svc.store.listKeys(tenant);
    expect(keys).toHaveLength(2);
    expect(keys.map((k) => k.keyStore)).toEqual([storeOf(spec), storeOf(spec)]);
  });
});
