// Key stores opened and closed per test: the inline-signing budget (inlineBelowMs: 0 keeps every signature on the
// signing threads, and a spec that costs more than the budget stays there too), and closing with a signature in
// flight. Their own file: each key store here finalizes SoftHSM, which would end the library for any other key
// store in the same process.
import { createHash } from 'node:crypto';
import { expect, it } from 'vitest';
import { Pkcs11KeyStore } from '../../src/keys/pkcs11-key-store.js';
import { embeddedSoftHsmOptions } from '../../src/keys/softhsm.js';
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
