// A signing thread for Pkcs11KeyStore. Plain CommonJS so it runs the same from the TypeScript sources (tests)
// and from dist/. It shares the process's PKCS#11 library with the main thread: C_Initialize answers
// CKR_CRYPTOKI_ALREADY_INITIALIZED, the login and the object handles are process-wide, and this thread opens
// its own session. It never calls C_Finalize, which would end the library for every thread; when the main thread
// finalizes and initialises the module again to find a token that came back, this thread opens a new session.
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

function openSession() {
  const slot = lib.C_GetSlotList(true).find((s) => lib.C_GetTokenInfo(s).label.trim() === workerData.tokenLabel);
  if (!slot) throw new Error(`CKR_TOKEN_NOT_PRESENT: signing thread: no token labelled "${workerData.tokenLabel}"`);
  return lib.C_OpenSession(slot, pkcs11js.CKF_SERIAL_SESSION);
}

// Opened on first use: a token that is away when the thread starts fails signatures, not the thread.
let session;
const out = Buffer.alloc(1024);

/** One signature: C_SignInit + C_Sign in this thread's session; its answer (the signature, or why not). */
function signOne(job, transfer) {
  let operationStarted = false;
  try {
    session ??= openSession();
    const start = performance.now();
    lib.C_SignInit(session, job.mechanism, Buffer.from(job.handle));
    operationStarted = true;
    const signature = lib.C_Sign(session, Buffer.from(job.input), out);
    const tokenMs = performance.now() - start;
    const copy = new Uint8Array(signature.length);
    copy.set(signature);
    transfer.push(copy.buffer);
    return { id: job.id, signature: copy, tokenMs };
  } catch (err) {
    // A C_Sign that failed ends the operation (PKCS#11 2.40, C_Sign), but a token that does not would answer
    // every later C_SignInit in this session with CKR_OPERATION_ACTIVE: the next job opens a fresh session.
    if (operationStarted) dropSession();
    return { id: job.id, error: err instanceof Error ? err.message : String(err) };
  }
}

/** Where a slice's signatures are made, end to end; grown to the largest slice seen (1,024 bytes an input). */
let scratch = Buffer.alloc(0);

/**
 * A batch's slice: every input signed in order in this thread's session (a C_SignInit and a C_Sign each), the
 * signatures answered end to end in one buffer with their lengths (-1 and an error where one failed).
 */
function signSlice(slice) {
  const handle = Buffer.from(slice.handle.buffer, slice.handle.byteOffset, slice.handle.byteLength);
  const inputs = Buffer.from(slice.inputs.buffer, slice.inputs.byteOffset, slice.inputs.byteLength);
  const count = slice.inputLength > 0 ? inputs.length / slice.inputLength : 0;
  if (scratch.length < count * out.length) scratch = Buffer.alloc(count * out.length);
  const lengths = new Int32Array(count);
  const errors = [];
  let offset = 0;
  const start = performance.now();
  for (let i = 0; i < count; i++) {
    const input = inputs.subarray(i * slice.inputLength, (i + 1) * slice.inputLength);
    let operationStarted = false;
    try {
      session ??= openSession();
      lib.C_SignInit(session, slice.mechanism, handle);
      operationStarted = true;
      const signature = lib.C_Sign(session, input, scratch.subarray(offset, offset + out.length));
      lengths[i] = signature.length;
      offset += signature.length;
    } catch (err) {
      // As in signOne: a failed C_Sign may leave the operation active on a token that does not end it.
      if (operationStarted) dropSession();
      lengths[i] = -1;
      errors.push(err instanceof Error ? err.message : String(err));
    }
  }
  const tokenMs = count > 0 ? (performance.now() - start) / count : 0;
  const signatures = new Uint8Array(offset);
  signatures.set(scratch.subarray(0, offset));
  parentPort.postMessage({ id: slice.id, signatures, lengths, errors, tokenMs }, [signatures.buffer, lengths.buffer]);
}

function dropSession() {
  const spoiled = session;
  session = undefined;
  try {
    lib.C_CloseSession(spoiled);
  } catch {
    // already gone with the token's other sessions
  }
}

parentPort.on('message', (msg) => {
  if (msg.slice) {
    signSlice(msg.slice);
    return;
  }
  if (msg.jobs) {
    // The jobs of one turn of the main thread: signed in order, answered in one message.
    const transfer = [];
    const answers = msg.jobs.map((job) => signOne(job, transfer));
    parentPort.postMessage({ answers }, transfer);
    return;
  }
  try {
    if (msg.reopen) {
      // The token lost its sessions (the main thread has logged in again): a new one first, then drop the old. After
      // C_Finalize the old handle is gone and its number may be another thread's new session: never close it then.
      const old = msg.forgetOld ? undefined : session;
      session = undefined;
      session = openSession();
      if (old !== undefined) {
        try {
          lib.C_CloseSession(old);
        } catch {
          // already gone with the token's other sessions
        }
      }
      parentPort.postMessage({ id: msg.id, reopened: true });
    }
  } catch (err) {
    parentPort.postMessage({ id: msg.id, error: err instanceof Error ? err.message : String(err) });
  }
});
