// Key stores opened and closed per test: the inline-signing budget (inlineBelowMs: 0 keeps every signature on the
// signing threads, and a spec that costs more than the budget stays there too), closing with a signature in
// flight, and a signature the key store fails after its record was written ahead. Their own file: each key store
// here finalizes SoftHSM, which would end the library for any other key store in the same process.
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { Pkcs11KeyStore } from '../../src/keys/pkcs11-key-store.js';
import { embeddedSoftHsmOptions } from '../../src/keys/softhsm.js';
import { allowAll } from '../../src/policy/policy.js';
import { SigningService } from '../../src/signing/signing-service.js';
import { openSqliteStore } from '../../src/store/sqlite-store.js';
import { makeTempDir } from '../helpers/service.js';

const nextTurn = () => new Promise((resolve) => setImmediate(resolve));

it.each([0, 0.000001])('with inlineBelowMs %s every signature is made on a thread', async (inlineBelowMs) => {
  const store = Pkcs11KeyStore.open({ ...embeddedSoftHsmOptions(makeTempDir()), signThreads: 1, inlineBelowMs });
  try {
    const key = await store.createKey('ECC_NIST_P256', 'budget');
    for (let i = 0; i < 5; i++) {
      await nextTurn();
      const digest = createHash('sha256').update(`m${i}`).digest();
      await store.sign(key.keyRef, 'ECC_NIST_P256', 'ECDSA_SHA_256', digest);
    }
    expect(store.signedOn).toEqual({ eventLoop: 0, threads: 5 });
  } finally {
    await store.close();
  }
});

it('settles a signature in flight on a thread when the store closes, instead of leaving it hanging', async () => {
  const store = Pkcs11KeyStore.open({ ...embeddedSoftHsmOptions(makeTempDir()), signThreads: 1, inlineBelowMs: 0 });
  const key = await store.createKey('RSA_4096', 'closing');
  const digest = createHash('sha256').update('closing').digest();
  const inFlight = store.sign(key.keyRef, 'RSA_4096', 'RSASSA_PKCS1_V1_5_SHA_256', digest);
  const outcome = inFlight.then(
    (sig) => `signed ${sig.length}`,
    (err: Error) => `failed: ${err.message}`,
  );
  await store.close();
  const settled = await Promise.race([outcome, new Promise((resolve) => setTimeout(() => resolve('hanging'), 3000))]);
  expect(settled).toMatch(/^signed 512$|^failed: the signing threads are stopped$/);
});

it.each([
  ['on the event loop', false],
  ['on the writer thread', true],
])('a signature the key store fails to make (store committing %s): its record is withdrawn, sign_failed follows', async (_, onThread) => {
  const dir = makeTempDir();
  const keyStore = Pkcs11KeyStore.open({ ...embeddedSoftHsmOptions(dir), signThreads: 1 });
  const store = openSqliteStore(join(dir, 'store.db'), onThread ? { writerThread: { spinMs: 0.2 } } : {});
  try {
    await store.migrate();
    expect(store.writesOnThread).toBe(onThread);
    const signing = new SigningService({ store, keyStore, policy: allowAll });
    await signing.createTenant('wa', 'ECC_NIST_P256', 'test');
    const digest = createHash('sha256').update('write-ahead').digest();
    const request = { action: 'pkcs11_sign' as const, tenantId: 'wa', callerId: 'ci', digest, context: {}, pss: false };

    const signed = await signing.pkcs11Sign(request);
    expect(signed.kind).toBe('signed');
    const [record] = await store.listSignatures('wa', 10);
    const signedEntry = (await store.readAudit(0, 100)).at(-1);
    expect(signedEntry).toMatchObject({ action: 'pkcs11_sign', outcome: 'signed' });
    expect(signedEntry?.details.signature_id).toBe(record?.id);

    await keyStore.close(); // every signature from now on fails in the key store
    await expect(signing.pkcs11Sign(request)).rejects.toMatchObject({ code: 'key_store_unavailable' });
    const [ahead, failed, ...more] = await store.readAudit(signedEntry?.seq ?? 0, 100);
    expect(more).toEqual([]);
    expect(ahead).toMatchObject({ action: 'pkcs11_sign', outcome: 'signed', actor: 'ci' });
    expect(failed).toMatchObject({ action: 'pkcs11_sign', outcome: 'sign_failed', actor: 'ci' });
    expect(failed?.details.signature_id).toBe(ahead?.details.signature_id);
    expect(failed?.details.error).toMatch(/shutting down/);
    // Only the signature that was made keeps its record.
    expect((await store.listSignatures('wa', 10)).map((r) => r.id)).toEqual([record?.id]);
  } finally {
    await keyStore.close();
    await store.close();
  }
});
