// The software key store (ML-DSA, SM2) signs on worker threads: correct signatures from the threads under
// concurrency, the secret moved to the thread (not copied), and a thread that dies mid-signature gives a 503 that
// says to retry, a sign_failed audit entry naming the key store, and a pool that is whole again for the next request.

import type { Worker } from 'node:worker_threads';
import { ml_dsa44, ml_dsa87 } from '@noble/post-quantum/ml-dsa.js';
import smCrypto from 'sm-crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { KeySpec } from '../../src/crypto/algorithms.js';
import { mlDsaMu, sm2Digest } from '../../src/crypto/message-representatives.js';
import { type MlDsaLevel, mlDsaLevel, verifyMlDsa } from '../../src/crypto/ml-dsa-verify.js';
import { parseMlDsaSpki, parseSm2Spki } from '../../src/crypto/spki.js';
import { ApiError } from '../../src/errors.js';
import { SoftwareKeyStore } from '../../src/keys/software/software-key-store.js';
import { SoftwareSignPool } from '../../src/keys/software/software-sign-pool.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

const level = (spec: KeySpec): MlDsaLevel => mlDsaLevel(spec) as MlDsaLevel;

let svc: TestService;
beforeAll(async () => {
  svc = await startTestService();
});
afterAll(async () => svc?.close());

const der = (pem: string) => Buffer.from(pem.replace(/-----[^-]+-----|\s/g, ''), 'base64');

/** The pool's threads, to end one as a crash would (the pool keeps them private). */
function threadsOf(pool: SoftwareSignPool): Worker[] {
  return (pool as unknown as { threads: { worker: Worker }[] }).threads.map((t) => t.worker);
}

describe('signatures on the threads', () => {
  it('ML-DSA-44/65/87 and SM2, many at once, all verify independently', async () => {
    const store = new SoftwareKeyStore(svc.keyStore, 'test token', { signThreads: 2 });
    try {
      const jobs: Promise<void>[] = [];
      for (const spec of ['ML_DSA_44', 'ML_DSA_65', 'ML_DSA_87', 'SM2'] as KeySpec[]) {
        const key = await store.createKey(spec, 'threads');
        for (let i = 0; i < 4; i++) {
          const message = Buffer.from(`message ${i} for ${spec}`);
          if (spec === 'SM2') {
            const point = parseSm2Spki(der(key.publicKeyPem)) as Buffer;
            const signing = store.sign(key.keyRef, spec, 'SM2DSA', sm2Digest(point, [message]));
            jobs.push(
              signing.then((sig) => {
                // sm-crypto hashes Z_A || M itself here (hash: true, its default ID is KMS's): not our sm2Digest.
                const ok = smCrypto.sm2.doVerifySignature(
                  Array.from(message),
                  sig.toString('hex'),
                  point.toString('hex'),
                  { hash: true, der: true },
                );
                expect(ok, `${spec} ${i}`).toBe(true);
              }),
            );
          } else {
            const pk = parseMlDsaSpki(der(key.publicKeyPem))?.publicKey as Buffer;
            const signing = store.sign(key.keyRef, spec, 'ML_DSA_SHAKE_256', mlDsaMu(pk, [message]));
            jobs.push(
              signing.then((sig) => {
                expect(verifyMlDsa(level(spec), pk, { message }, sig), `${spec} ${i}`).toBe(true);
                expect(verifyMlDsa(level(spec), pk, { message: Buffer.from('another message') }, sig)).toBe(false);
              }),
            );
          }
        }
      }
      // Handed to the threads, not signed on this one: several are in flight at once.
      let done = false;
      const all = Promise.all(jobs).finally(() => {
        done = true;
      });
      let most = 0;
      while (!done) {
        most = Math.max(most, store.threadsBusy());
        await new Promise((r) => setImmediate(r));
      }
      await all;
      expect(most).toBeGreaterThan(1);
      expect(store.threadsBusy()).toBe(0);
    } finally {
      await store.close();
    }
  });

  it('the secret is moved to the thread: the caller is left with an empty buffer', async () => {
    const pool = new SoftwareSignPool(1);
    try {
      const { secretKey, publicKey } = ml_dsa44.keygen(new Uint8Array(32).fill(7));
      const secret = new ArrayBuffer(secretKey.length);
      new Uint8Array(secret).set(secretKey);
      const mu = mlDsaMu(publicKey, [Buffer.from('m')]);
      const signing = pool.sign({ family: 'ml-dsa', level: 44, secret, input: mu });
      expect(secret.byteLength).toBe(0); // detached: no copy stays on this thread
      expect(verifyMlDsa(44, publicKey, { message: Buffer.from('m') }, await signing)).toBe(true);
    } finally {
      await pool.close();
    }
  });
});

describe('a signing thread that dies', () => {
  it('fails its signature with a retryable key_store_unavailable, and the pool signs again at once', async () => {
    const pool = new SoftwareSignPool(2);
    try {
      const { secretKey, publicKey } = ml_dsa87.keygen(new Uint8Array(32).fill(1));
      const job = () => {
        const secret = new ArrayBuffer(secretKey.length);
        new Uint8Array(secret).set(secretKey);
        return { family: 'ml-dsa' as const, level: 87 as const, secret, input: mlDsaMu(publicKey, [Buffer.from('x')]) };
      };
      const before = threadsOf(pool);
      const doomed = Promise.allSettled([pool.sign(job()), pool.sign(job())]);
      // Both threads are still starting (loading noble) when they are ended: neither signature can come back.
      await Promise.all(before.map((w) => w.terminate()));
      for (const outcome of await doomed) {
        expect(outcome.status).toBe('rejected');
        const err = (outcome as PromiseRejectedResult).reason as ApiError;
        expect(err).toBeInstanceOf(ApiError);
        expect(err.code).toBe('key_store_unavailable');
        expect(err.message).toMatch(/signing thread exited with code \d+ before it answered; it was restarted, retry/);
      }
      expect(pool.inFlight).toBe(0);
      const after = threadsOf(pool);
      expect(after).toHaveLength(2);
      for (const w of after) expect(before).not.toContain(w);
      const again = await Promise.all([pool.sign(job()), pool.sign(job()), pool.sign(job())]);
      for (const sig of again) expect(verifyMlDsa(87, publicKey, { message: Buffer.from('x') }, sig)).toBe(true);
    } finally {
      await pool.close();
    }
  });

  it('through the API: 503 with Retry-After, a sign_failed entry naming the software key store, then 200', async () => {
    const tenant = 'threads-crash';
    expect(
      (await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: tenant, key_spec: 'ML_DSA_65' })).status,
    ).toBe(201);
    const signer = await svc.apiKey('signer', tenant);
    const admin = await svc.apiKey('admin', tenant);
    const pub = await callAction(svc.app, admin, 'get_public_key', { tenant_id: tenant });
    const pk = parseMlDsaSpki(der(pub.body.public_key_pem as string))?.publicKey as Buffer;
    const hash = mlDsaMu(pk, [Buffer.from('crash')]).toString('base64');
    const software = svc.keyStores.forKey('software') as SoftwareKeyStore;
    const sign = () => callAction(svc.app, signer, 'sign', { tenant_id: tenant, hash, algorithm: 'ML_DSA_SHAKE_256' });

    // The first signature starts the pool: end its threads while they are still loading, with the job queued.
    const first = sign();
    while (software.threadsBusy() === 0) await new Promise((r) => setImmediate(r));
    const pool = (software as unknown as { pool: SoftwareSignPool }).pool;
    await Promise.all(threadsOf(pool).map((w) => w.terminate()));
    const failed = await first;
    expect(failed.status).toBe(503);
    expect(failed.body).toMatchObject({ error: 'key_store_unavailable' });
    expect(failed.headers['retry-after']).toBe('5');
    const entry = (await svc.store.audit.read(0, 100_000)).findLast((e) => e.tenantId === tenant);
    expect(entry).toMatchObject({ action: 'sign', outcome: 'sign_failed' });
    expect(entry?.details).toMatchObject({ key_store: 'software', algorithm: 'ML_DSA_SHAKE_256', hash });

    const back = await sign();
    expect(back.status, JSON.stringify(back.body)).toBe(200);
    expect(
      verifyMlDsa(65, pk, { message: Buffer.from('crash') }, Buffer.from(back.body.signature as string, 'base64')),
    ).toBe(true);
  });
});
