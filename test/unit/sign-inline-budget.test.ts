// Key stores opened and closed per test: the inline-signing budget (inlineBelowMs: 0 keeps every signature on the
// signing threads, and a spec that costs more than the budget stays there too), closing with a signature in
// flight, and a signature the key store fails (with its record written ahead, or not). Their own file: each key store
// here finalizes SoftHSM, which would end the library for any other key store in the same process.
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { Pkcs11KeyStore } from '../../src/keys/pkcs11/pkcs11-key-store.js';
import { embeddedSoftHsmOptions } from '../../src/keys/pkcs11/softhsm.js';
import { allowAll } from '../../src/policy/policy.js';
import { SigningService } from '../../src/signing/signing-service.js';
import { openSqlite } from '../../src/store/sqlite/sqlite-driver.js';
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js';
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

/** A tenant on a real key store and SQLite store (with or without the writer thread), for the failure tests. */
async function signingSetup(onThread: boolean, inlineBelowMs?: number) {
  const dir = makeTempDir();
  const keyStore = Pkcs11KeyStore.open({
    ...embeddedSoftHsmOptions(dir),
    signThreads: 1,
    ...(inlineBelowMs !== undefined && { inlineBelowMs }),
  });
  const store = openSqliteStore(join(dir, 'store.db'), onThread ? { writerThread: { spinMs: 0.2 } } : {});
  await store.migrate();
  expect(store.signatures.writesOnThread).toBe(onThread);
  const signing = new SigningService({ store, keyStore, policy: allowAll });
  await signing.createTenant('wa', 'ECC_NIST_P256', 'test');
  const digest = createHash('sha256').update('write-ahead').digest();
  const request = { action: 'pkcs11_sign' as const, tenantId: 'wa', callerId: 'ci', digest, context: {}, pss: false };
  // A signature that is made: its `signed` entry names its record.
  await signing.pkcs11Sign(request);
  const [record] = await store.signatures.list('wa', 10);
  const signedEntry = (await store.audit.read(0, 100)).at(-1);
  expect(signedEntry).toMatchObject({ action: 'pkcs11_sign', outcome: 'signed' });
  expect(signedEntry?.details.signature_id).toBe(record?.id);
  return {
    keyStore,
    store,
    signing,
    request,
    recordId: record?.id,
    lastSeq: signedEntry?.seq ?? 0,
    storePath: join(dir, 'store.db'),
    close: async () => {
      await keyStore.close();
      await store.close();
    },
  };
}

it('a store committing on its writer thread gets the record ahead; a key-store failure withdraws it, sign_failed follows', async () => {
  const t = await signingSetup(true);
  try {
    await t.keyStore.close(); // every signature from now on fails in the key store
    await expect(t.signing.pkcs11Sign(t.request)).rejects.toMatchObject({ code: 'key_store_unavailable' });
    const [ahead, failed, ...more] = await t.store.audit.read(t.lastSeq, 100);
    expect(more).toEqual([]);
    expect(ahead).toMatchObject({ action: 'pkcs11_sign', outcome: 'signed', actor: 'ci' });
    expect(failed).toMatchObject({ action: 'pkcs11_sign', outcome: 'sign_failed', actor: 'ci' });
    expect(failed?.details.signature_id).toBe(ahead?.details.signature_id);
    expect(failed?.details.error).toMatch(/shutting down/);
    // Only the signature that was made keeps its record.
    expect((await t.store.signatures.list('wa', 10)).map((r) => r.id)).toEqual([t.recordId]);
  } finally {
    await t.close();
  }
});

it('a store committing on the event loop gets the record after the signature: a key-store failure writes only sign_failed', async () => {
  const t = await signingSetup(false);
  try {
    await t.keyStore.close();
    await expect(t.signing.pkcs11Sign(t.request)).rejects.toMatchObject({ code: 'key_store_unavailable' });
    const [failed, ...more] = await t.store.audit.read(t.lastSeq, 100);
    expect(more).toEqual([]);
    expect(failed).toMatchObject({ action: 'pkcs11_sign', outcome: 'sign_failed', actor: 'ci' });
    expect(failed?.details.signature_id).toBeUndefined();
    expect(failed?.details.error).toMatch(/shutting down/);
    expect((await t.store.signatures.list('wa', 10)).map((r) => r.id)).toEqual([t.recordId]);
  } finally {
    await t.close();
  }
});

it('a commit written ahead that fails while the signature is on a signing thread fails the request, nothing else', async () => {
  // RSA-4096 on a thread (inlineBelowMs 0) takes milliseconds: the writer's failure arrives while it signs.
  const t = await signingSetup(true, 0);
  const db = openSqlite(t.storePath);
  try {
    await t.signing.createTenant('slow', 'RSA_4096', 'test');
    db.exec(`CREATE TRIGGER audit_fails BEFORE INSERT ON audit_log BEGIN SELECT RAISE(ABORT, 'disk full'); END`);
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      const digest = createHash('sha256').update('slow').digest();
      await expect(t.signing.pkcs11Sign({ ...t.request, tenantId: 'slow', digest, pss: false })).rejects.toThrow(
        /disk full/,
      );
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
    db.exec('DROP TRIGGER audit_fails');
    expect((await t.store.signatures.list('slow', 10)).length).toBe(0);
  } finally {
    db.close();
    await t.close();
  }
});
