// A signing thread for SoftwareKeyStore: ML-DSA in noble and SM2 (sm-crypto) are pure JavaScript and take ~10 ms of
// CPU a signature, and even OpenSSL's ML-DSA ~1 ms, which on the event loop would hold up every other request.
// Plain ESM (noble is ESM only), loaded from src/ both by the tests and by dist/, like pkcs11-sign-worker.cjs. The
// private key arrives unsealed in a buffer transferred (moved, not copied) from the main thread and is zeroed here
// after use. ML-DSA goes through the native signer (ml-dsa-addon.ts) when the main thread found that it loads and
// passed its path; noble otherwise.
import { createRequire } from 'node:module';
import { parentPort, workerData } from 'node:worker_threads';
import { ml_dsa44, ml_dsa65, ml_dsa87 } from '@noble/post-quantum/ml-dsa.js';
import smCrypto from 'sm-crypto';

const ML_DSA = { 44: ml_dsa44, 65: ml_dsa65, 87: ml_dsa87 };
/** Loaded at the first ML-DSA signature, not at the thread's start: a thread closed right after it started never loads it. */
let nativeMlDsa;

/** The main thread loaded it already, so this does not fail; if it did, noble signs (a thread must not crash-loop). */
function loadNative(path) {
  if (!path) return null;
  try {
    return createRequire(import.meta.url)(path);
  } catch {
    return null;
  }
}

/** Pure ML-DSA over μ (KMS EXTERNAL_MU), or SM2 over e = SM3(Z_A || M) as given (KMS DIGEST); DER for SM2. */
function sign(job, secret, input) {
  if (job.family === 'ml-dsa') {
    const mlDsa = ML_DSA[job.level];
    if (!mlDsa) throw new Error(`no ML-DSA-${job.level}`);
    if (nativeMlDsa === undefined) nativeMlDsa = loadNative(workerData?.mlDsaAddonPath);
    if (nativeMlDsa) return nativeMlDsa.signMu(job.level, secret, input);
    return mlDsa.internal.sign(input, secret, { externalMu: true });
  }
  if (job.family === 'sm2') {
    // sm-crypto takes the private key as a hex string (immutable: it cannot be zeroed, only dropped).
    const der = smCrypto.sm2.doSignature(Array.from(input), Buffer.from(secret).toString('hex'), {
      hash: false,
      der: true,
    });
    return Buffer.from(der, 'hex');
  }
  throw new Error(`the software signing thread cannot sign for a ${job.family} key`);
}

parentPort.on('message', (job) => {
  const secret = new Uint8Array(job.secret);
  try {
    const signature = sign(job, secret, new Uint8Array(job.input));
    const copy = new Uint8Array(signature.length);
    copy.set(signature);
    parentPort.postMessage({ id: job.id, signature: copy }, [copy.buffer]);
  } catch (err) {
    parentPort.postMessage({ id: job.id, error: err instanceof Error ? err.message : String(err) });
  } finally {
    secret.fill(0);
  }
});
