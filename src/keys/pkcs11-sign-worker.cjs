// A signing thread for Pkcs11KeyStore. Plain CommonJS so it runs the same from the TypeScript sources (tests)
// and from dist/. It shares the process's PKCS#11 library with the main thread: C_Initialize answers
// CKR_CRYPTOKI_ALREADY_INITIALIZED, the login and the object handles are process-wide, and this thread opens
// its own session. It never calls C_Finalize, which would end the library for every thread.
'use strict';
const { performance } = require('node:perf_hooks');
const { parentPort, workerData } = require('node:worker_threads');
const pkcs11js = require(workerData.pkcs11jsPath);

const lib = new pkcs11js.PKCS11();
lib.load(workerData.modulePath);
try {
  lib.C_Initialize({ flags: pkcs11js.CKF_OS_LOCKING_OK });
} catch (err) {
  if (!/CKR_CRYPTOKI_ALREADY_INITIALIZED/.test(String(err))) throw err;
}
const slot = lib.C_GetSlotList(true).find((s) => lib.C_GetTokenInfo(s).label.trim() === workerData.tokenLabel);
if (!slot) throw new Error(`signing thread: no token labelled "${workerData.tokenLabel}"`);
const session = lib.C_OpenSession(slot, pkcs11js.CKF_SERIAL_SESSION);
const out = Buffer.alloc(1024);

parentPort.on('message', (msg) => {
  try {
    const start = performance.now();
    lib.C_SignInit(session, msg.mechanism, Buffer.from(msg.handle));
    const signature = lib.C_Sign(session, Buffer.from(msg.input), out);
    const tokenMs = performance.now() - start;
    const copy = new Uint8Array(signature.length);
    copy.set(signature);
    parentPort.postMessage({ id: msg.id, signature: copy, tokenMs }, [copy.buffer]);
  } catch (err) {
    parentPort.postMessage({ id: msg.id, error: err instanceof Error ? err.message : String(err) });
  }
});
