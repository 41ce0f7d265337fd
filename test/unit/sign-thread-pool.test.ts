// The key store's signing threads: they sign for real, report PKCS#11 errors, and a dead thread is replaced.
import { createHash, createPublicKey, verify } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Pkcs11KeyStore } from '../../src/keys/pkcs11-key-store.js';
import { embeddedSoftHsmOptions } from '../../src/keys/softhsm.js';
import { makeTempDir } from '../helpers/service.js';

let ks: Pkcs11KeyStore;
beforeAll(() => {
  ks = Pkcs11KeyStore.open({ ...embeddedSoftHsmOptions(makeTempDir()), signThreads: 2 });
});
afterAll(async () => ks?.close());

const digest = Buffer.alloc(32, 4);
/** Reaches into the pool to kill a thread, as a crash would. */
const threadsOf = (store: Pkcs11KeyStore) =>
  (store as unknown as { threads: { threads: Array<{ worker: { terminate(): Promise<number> } }> } }).threads.threads;

it('signs on the threads, and a thread that dies is replaced without losing the pool', async () => {
  const key = await ks.createKey('ECC_NIST_P384', 'threads');
  const message = Buffer.from('signed on a thread');
  const sig = await ks.sign(
    key.keyRef,
    'ECC_NIST_P384',
    'ECDSA_SHA_384',
    createHash('sha384').update(message).digest(),
  );
  expect(verify('sha384', message, createPublicKey(key.publicKeyPem), sig)).toBe(true);

  const rsa = await ks.createKey('RSA_2048', 'threads-rsa');
  const before = threadsOf(ks).map((t) => t.worker);
  await threadsOf(ks)[0]?.worker.terminate();
  await new Promise((r) => setTimeout(r, 100));
  expect(threadsOf(ks)[0]?.worker).not.toBe(before[0]);
  const results = await Promise.all(
    Array.from({ length: 8 }, () => ks.sign(rsa.keyRef, 'RSA_2048', 'RSASSA_PKCS1_V1_5_SHA_256', digest)),
  );
  expect(results.every((s) => s.length === 256)).toBe(true);
});

it('reports a PKCS#11 failure from a thread as an error, and keeps signing afterwards', async () => {
  const key = await ks.createKey('RSA_2048', 'gone');
  await ks.destroyKey(key.keyRef);
  (ks as unknown as { handles: Map<string, Buffer> }).handles.set(
    key.keyRef,
    Buffer.from([0xff, 0xff, 0, 0, 0, 0, 0, 0]),
  );
  await expect(ks.sign(key.keyRef, 'RSA_2048', 'RSASSA_PKCS1_V1_5_SHA_256', digest)).rejects.toThrow(/CKR_/);
  const other = await ks.createKey('RSA_2048', 'fine');
  expect((await ks.sign(other.keyRef, 'RSA_2048', 'RSASSA_PKCS1_V1_5_SHA_256', digest)).length).toBe(256);
});
