// Every one of the contract's twelve key specs on the embedded default (SoftHSM for RSA and EC, the software key
// store sealed by the token for ML-DSA, SM2 and Ed25519): create, sign, verify with an independent verifier, rotate.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultAlgorithm, KEY_SPECS, type KeySpec, type SigningAlgorithm } from '../../src/crypto/algorithms.js';
import { signingInput, tampered, verifiesIndependently } from '../helpers/independent-verify.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

let svc: TestService;
beforeAll(async () => {
  svc = await startTestService();
});
afterAll(async () => svc?.close());

const message = Buffer.from('an artifact to sign, the same for every key spec\n');

/** What a client sends as `hash`, and the algorithm it names (PSS for RSA shows the most). */
function input(spec: KeySpec, pem: string): { hash: Buffer; algorithm: SigningAlgorithm } {
  const algorithm = spec.startsWith('RSA') ? 'RSASSA_PSS_SHA_384' : defaultAlgorithm(spec);
  return { hash: signingInput(pem, algorithm, message), algorithm };
}

/** Verifies over the message itself with a verifier that owes nothing to the service. */
function verifyIndependently(spec: KeySpec, pem: string, signature: Buffer): boolean {
  return verifiesIndependently(spec, pem, input(spec, pem).algorithm, message, signature);
}

/** The key store that holds a key of this spec on the embedded default. */
function storeOf(spec: KeySpec): string {
  return spec.startsWith('ML_DSA') || spec === 'SM2' || spec === 'ECC_NIST_EDWARDS25519' ? 'software' : 'pkcs11';
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
      const entry = (await svc.store.audit.read(0, 100_000)).findLast(
        (e) => e.tenantId === tenant && e.outcome === 'signed',
      );
      expect(entry?.details).toMatchObject({ key_id: pub.body.key_id, key_store: storeOf(spec), algorithm });
      // A flipped message must not verify: the verifier really checks.
      expect(verifyIndependently(spec, pem, tampered(signature))).toBe(false);
      if (round === 1) {
        const rotated = await callAction(svc.app, admin, 'rotate_key', { tenant_id: tenant });
        expect(rotated.status, JSON.stringify(rotated.body)).toBe(200);
      }
    }
    const keys = await svc.store.tenants.listKeys(tenant);
    expect(keys).toHaveLength(2);
    expect(keys.map((k) => k.keyStore)).toEqual([storeOf(spec), storeOf(spec)]);
  });
});
