// The key store's signing threads: they sign for real, report PKCS#11 errors, and a dead thread is replaced.
import { constants, createHash, createPublicKey, verify } from 'node:crypto';
import type { Worker } from 'node:worker_threads';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Pkcs11KeyStore } from '../../src/keys/pkcs11/pkcs11-key-store.js';
import type { SignThreadPool } from '../../src/keys/pkcs11/sign-thread-pool.js';
import { embeddedSoftHsmOptions } from '../../src/keys/pkcs11/softhsm.js';
import { makeTempDir } from '../helpers/service.js';
import { waitFor } from '../helpers/wait.js';

let ks: Pkcs11KeyStore;
beforeAll(() => {
  // A threshold no stall can cross: these tests are about where a signature goes once a spec is known to be cheap,
  // not about timing P-256 on a loaded machine (one signature slower than the default 2 ms would send the next ones
  // to the threads). One store per process: the PKCS#11 library is initialised once.
  ks = Pkcs11KeyStore.open({ ...embeddedSoftHsmOptions(makeTempDir()), signThreads: 2, inlineBelowMs: 10_000 });
});
afterAll(async () => ks?.close());

const digest = Buffer.alloc(32, 4);
const p256Of = (store: Pkcs11KeyStore, keyRef: string, text: string) =>
  store.sign(keyRef, 'ECC_NIST_P256', 'ECDSA_SHA_256', createHash('sha256').update(text).digest());
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
  await waitFor('the dead thread to be replaced', () => threadsOf(ks)[0]?.worker !== before[0]);
  const results = await Promise.all(
    Array.from({ length: 8 }, () => ks.sign(rsa.keyRef, 'RSA_2048', 'RSASSA_PKCS1_V1_5_SHA_256', digest)),
  );
  expect(results.every((s) => s.length === 256)).toBe(true);
});

it('a handle the token no longer knows (on a thread) is dropped and looked up again: a destroyed key is key_not_found', async () => {
  const key = await ks.createKey('RSA_2048', 'gone');
  await ks.destroyKey(key.keyRef);
  (ks as unknown as { handles: Map<string, Buffer> }).handles.set(
    key.keyRef,
    Buffer.from([0xff, 0xff, 0, 0, 0, 0, 0, 0]),
  );
  // CKR_OBJECT_HANDLE_INVALID: the key store re-opens its sessions, finds the key again, and it is gone.
  const recovered = ks.faults.recovered;
  await expect(ks.sign(key.keyRef, 'RSA_2048', 'RSASSA_PKCS1_V1_5_SHA_256', digest)).rejects.toMatchObject({
    code: 'key_not_found',
  });
  expect(ks.faults.recovered).toBe(recovered + 1);
  const other = await ks.createKey('RSA_2048', 'fine');
  expect((await ks.sign(other.keyRef, 'RSA_2048', 'RSASSA_PKCS1_V1_5_SHA_256', digest)).length).toBe(256);
});

describe('where signatures are made', () => {
  const nextTurn = () => new Promise((resolve) => setImmediate(resolve));
  const p256 = (store: Pkcs11KeyStore, keyRef: string, i: number) =>
    store.sign(keyRef, 'ECC_NIST_P256', 'ECDSA_SHA_256', createHash('sha256').update(`m${i}`).digest());

  it('signs one request at a time on the event loop once the spec is known to be cheap, and verifies', async () => {
    const key = await ks.createKey('ECC_NIST_P256', 'inline');
    const before = { ...ks.signedOn };
    // The first signature of a spec goes to a thread: its cost is not known yet.
    await p256(ks, key.keyRef, 0);
    expect(ks.signedOn.threads).toBe(before.threads + 1);
    for (let i = 1; i <= 20; i++) {
      await nextTurn(); // each signature a request of its own, as a sequential client's are
      const sig = await p256(ks, key.keyRef, i);
      const publicKey = { key: createPublicKey(key.publicKeyPem), dsaEncoding: 'der' as const };
      expect(verify('sha256', Buffer.from(`m${i}`), publicKey, sig)).toBe(true);
      expect(verify('sha256', Buffer.from(`other${i}`), publicKey, sig)).toBe(false);
    }
    expect(ks.signedOn.eventLoop - before.eventLoop).toBe(20);
  });

  it('sends a burst to the threads: at most one signature of an event-loop turn is made inline', async () => {
    const key = await ks.createKey('ECC_NIST_P256', 'burst');
    await p256(ks, key.keyRef, 0);
    await nextTurn();
    const before = { ...ks.signedOn };
    const sigs = await Promise.all(Array.from({ length: 16 }, (_, i) => p256(ks, key.keyRef, i)));
    const publicKey = { key: createPublicKey(key.publicKeyPem), dsaEncoding: 'der' as const };
    expect(sigs.every((sig, i) => verify('sha256', Buffer.from(`m${i}`), publicKey, sig))).toBe(true);
    expect(ks.signedOn.eventLoop - before.eventLoop).toBeLessThanOrEqual(1);
    expect(ks.signedOn.threads - before.threads).toBeGreaterThanOrEqual(15);
  });

  it('a stale handle met inline is dropped, the key found again and signed with; the sessions all come back', async () => {
    const key = await ks.createKey('ECC_NIST_P256', 'inline-fails');
    await p256(ks, key.keyRef, 0);
    const internals = ks as unknown as { handles: Map<string, Buffer>; pool: { idle: unknown[] } };
    const idleSessions = internals.pool.idle.length;
    internals.handles.set(key.keyRef, Buffer.from([0xfe, 0xff, 0, 0, 0, 0, 0, 0]));
    await nextTurn();
    const recovered = ks.faults.recovered;
    const again = await p256(ks, key.keyRef, 2);
    expect(
      verify('sha256', Buffer.from('m2'), { key: createPublicKey(key.publicKeyPem), dsaEncoding: 'der' }, again),
    ).toBe(true);
    expect(ks.faults.recovered).toBe(recovered + 1);
    expect(internals.pool.idle.length).toBe(idleSessions);
    // (The retry itself may go to a thread: the signing threads' answers to the re-open can arrive in the turn
    // of the failed inline attempt, which allows no second inline signature.) Afterwards signing is inline again.
    await nextTurn();
    const before = ks.signedOn.eventLoop;
    const threadsBefore = ks.signedOn.threads;
    const sig = await p256(ks, key.keyRef, 3);
    expect(
      verify('sha256', Buffer.from('m3'), { key: createPublicKey(key.publicKeyPem), dsaEncoding: 'der' }, sig),
    ).toBe(true);
    expect(ks.signedOn.eventLoop).toBe(before + 1);
    expect(ks.signedOn.threads).toBe(threadsBefore);
  });
});

it('a signature whose thread dies before answering goes once more, to the replacement; one that outlives two threads fails', async () => {
  const key = await ks.createKey('ECC_NIST_P256', 'thread-dies-with-one');
  await p256Of(ks, key.keyRef, 'warm'); // the handle cached
  const pool = (ks as unknown as { threads: SignThreadPool }).threads;
  const handle = (ks as unknown as { handles: Map<string, Buffer> }).handles.get(key.keyRef) as Buffer;
  const message = Buffer.from('outlives its thread');
  const job = { mechanism: { mechanism: 0x1041 }, handle, input: createHash('sha256').update(message).digest() };
  const publicKey = { key: createPublicKey(key.publicKeyPem), dsaEncoding: 'der' as const };

  // The thread holding the job (it is on one the moment sign returns) dies before it can answer.
  const holder = () =>
    (pool as unknown as { threads: Array<{ worker: Worker; load: number }> }).threads.find((t) => t.load > 0);
  const once = pool.sign(job);
  await holder()?.worker.terminate();
  const made = await once;
  // The token's own form (r || s); the key store turns it into DER.
  expect(verify('sha256', message, { ...publicKey, dsaEncoding: 'ieee-p1363' }, made.signature)).toBe(true);
  expect(pool.inFlight).toBe(0);

  // Its second thread dies too (before the job is even posted to it: the test goes on in the turn of the death).
  const twice = pool.sign(job);
  await holder()?.worker.terminate();
  const second = holder();
  expect(second).toBeDefined();
  await second?.worker.terminate();
  await expect(twice).rejects.toThrow(/signing thread exited with code/);
  expect(pool.inFlight).toBe(0);
  const after = await p256Of(ks, key.keyRef, 'after');
  expect(verify('sha256', createHash('sha256').update('after').digest(), publicKey, after)).toBe(false);
  expect(verify('sha256', Buffer.from('after'), publicKey, after)).toBe(true);
});

it('a turn of jobs that cannot be sent to the thread fails its callers, and the pool signs on', async () => {
  const key = await ks.createKey('ECC_NIST_P256', 'unsendable');
  const pool = (ks as unknown as { threads: SignThreadPool }).threads;
  // A mechanism parameter structured clone refuses (a function): postMessage throws in the turn's flush.
  const refused = pool.sign({
    mechanism: { mechanism: 0x1041, parameter: { bad: (() => 1) as unknown as number } },
    handle: Buffer.alloc(8),
    input: Buffer.alloc(32),
  });
  await expect(refused).rejects.toThrow(/could not be cloned/);
  expect(pool.inFlight).toBe(0);
  const message = Buffer.from('after the refused turn');
  const sig = await ks.sign(
    key.keyRef,
    'ECC_NIST_P256',
    'ECDSA_SHA_256',
    createHash('sha256').update(message).digest(),
  );
  expect(verify('sha256', message, createPublicKey(key.publicKeyPem), sig)).toBe(true);
});

describe("a batch's digests go to the threads as slices", () => {
  const poolOf = (store: Pkcs11KeyStore) => (store as unknown as { threads: SignThreadPool }).threads;
  const messagesOf = (n: number) => Array.from({ length: n }, (_, i) => Buffer.from(`batched ${i}`));
  const sha256 = (m: Buffer) => createHash('sha256').update(m).digest();

  it('100 digests cost one message to each of the two threads and one answer from each, and every signature verifies', async () => {
    const key = await ks.createKey('ECC_NIST_P256', 'batch');
    const messages = messagesOf(100);
    const pool = poolOf(ks);
    const before = { ...pool.messages };
    const threadsBefore = ks.signedOn.threads;
    const made = await ks.signMany(key.keyRef, 'ECC_NIST_P256', 'ECDSA_SHA_256', messages.map(sha256));
    expect(pool.messages.sent - before.sent).toBe(2);
    expect(pool.messages.answered - before.answered).toBe(2);
    expect(ks.signedOn.threads - threadsBefore).toBe(100);
    expect(pool.inFlight).toBe(0);
    const publicKey = { key: createPublicKey(key.publicKeyPem), dsaEncoding: 'der' as const };
    expect(made.map((m) => m.kind)).toEqual(messages.map(() => 'made'));
    // In their digests' order: each signature verifies its own message and not its neighbour's.
    made.forEach((m, i) => {
      const signature = (m as { signature: Buffer }).signature;
      expect(verify('sha256', messages[i] as Buffer, publicKey, signature)).toBe(true);
      expect(verify('sha256', messages[(i + 1) % 100] as Buffer, publicKey, signature)).toBe(false);
    });
  });

  it('a small batch is one slice (one message, one answer); RSA PKCS #1 v1.5 and PSS sign in slices too', async () => {
    const rsa = await ks.createKey('RSA_2048', 'batch-rsa');
    const messages = messagesOf(5);
    const pool = poolOf(ks);
    const publicKey = createPublicKey(rsa.publicKeyPem);
    for (const [algorithm, padding] of [
      ['RSASSA_PKCS1_V1_5_SHA_256', constants.RSA_PKCS1_PADDING],
      ['RSASSA_PSS_SHA_256', constants.RSA_PKCS1_PSS_PADDING],
    ] as const) {
      const before = { ...pool.messages };
      const made = await ks.signMany(rsa.keyRef, 'RSA_2048', algorithm, messages.map(sha256));
      expect(pool.messages.sent - before.sent).toBe(1);
      expect(pool.messages.answered - before.answered).toBe(1);
      made.forEach((m, i) => {
        const signature = (m as { signature: Buffer }).signature;
        expect(verify('sha256', messages[i] as Buffer, { key: publicKey, padding }, signature)).toBe(true);
      });
    }
  });

  it('a signing thread that dies with its slice: the slice is signed again through sign, every digest is signed', async () => {
    const key = await ks.createKey('ECC_NIST_P256', 'batch-thread-dies');
    const messages = messagesOf(100);
    await ks.signMany(key.keyRef, 'ECC_NIST_P256', 'ECDSA_SHA_256', messages.map(sha256)); // the handle cached
    const pool = poolOf(ks);
    const sent = pool.messages.sent;
    const made = ks.signMany(key.keyRef, 'ECC_NIST_P256', 'ECDSA_SHA_256', messages.map(sha256));
    // The slices were posted in that call (the handle is cached): the threads die with them.
    expect(pool.messages.sent).toBe(sent + 2);
    const dying = threadsOf(ks).map((t) => t.worker);
    await Promise.all(dying.map((w) => w.terminate()));
    const results = await made;
    const publicKey = { key: createPublicKey(key.publicKeyPem), dsaEncoding: 'der' as const };
    results.forEach((m, i) => {
      expect(m.kind, `digest ${i}`).toBe('made');
      expect(verify('sha256', messages[i] as Buffer, publicKey, (m as { signature: Buffer }).signature)).toBe(true);
    });
    await waitFor('both threads to be replaced', () => threadsOf(ks).every((t, i) => t.worker !== dying[i]));
  });

  it('a digest of the wrong length fails alone, in its place, as `sign` refuses it; the others are signed', async () => {
    const key = await ks.createKey('ECC_NIST_P256', 'batch-one-bad');
    const digests = messagesOf(20).map(sha256);
    digests[7] = Buffer.alloc(31); // not a SHA-256: refused as `sign` refuses it
    const made = await ks.signMany(key.keyRef, 'ECC_NIST_P256', 'ECDSA_SHA_256', digests);
    expect(made.filter((m) => m.kind === 'failed').length).toBe(1);
    expect(made[7]).toMatchObject({ kind: 'failed', error: expect.any(Error) });
    expect(poolOf(ks).inFlight).toBe(0);
  });
});
