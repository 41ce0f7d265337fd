// A batch's hand-off to the signing threads (issue 46): one Pkcs11KeyStore with 2 signing threads signs batches of
// 100 P-256 digests two ways, alternated in one process: as 100 `sign` calls in one event-loop turn (the batch path
// before issue 46's slices) and as one `signMany` (a slice per thread). What it prints is CPU per digest, read from
// /proc: of the main thread (the event loop the service shares with every request) and of the whole process
// (SoftHSM on the threads included), and the messages to the threads per batch. CPU moves less with the machine's
// load than rates do. Run as its own process (one SoftHSM per process): node dist/bench/batch-hand-off.js [batches]
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { Pkcs11KeyStore } from '../src/keys/pkcs11/pkcs11-key-store.js';
import type { SignThreadPool } from '../src/keys/pkcs11/sign-thread-pool.js';
import { embeddedSoftHsmOptions } from '../src/keys/pkcs11/softhsm.js';
import { makeTempDir } from '../test/helpers/service.js';

const BATCHES = Number(process.argv[2] ?? 400);
const SIZE = 100;
const ROUNDS = 3;

/** utime + stime in ms of /proc/self/stat or of one thread's /proc/self/task/<tid>/stat (10 ms clock ticks). */
function cpuMs(statPath: string): number {
  const fields = readFileSync(statPath, 'utf8').split(') ').at(-1)?.split(' ') ?? [];
  return (Number(fields[11]) + Number(fields[12])) * 10;
}
const mainThreadMs = () => cpuMs(`/proc/self/task/${process.pid}/stat`);
const processMs = () => cpuMs('/proc/self/stat');

const keyStore = Pkcs11KeyStore.open({ ...embeddedSoftHsmOptions(makeTempDir('sb-bench-hand-off-')), signThreads: 2 });
const pool = (keyStore as unknown as { threads: SignThreadPool }).threads;
const key = await keyStore.createKey('ECC_NIST_P256', 'bench-hand-off');
const digests = Array.from({ length: SIZE }, (_, i) => createHash('sha256').update(`digest ${i}`).digest());
const ways = {
  'sign each': () => Promise.all(digests.map((d) => keyStore.sign(key.keyRef, 'ECC_NIST_P256', 'ECDSA_SHA_256', d))),
  signMany: () => keyStore.signMany(key.keyRef, 'ECC_NIST_P256', 'ECDSA_SHA_256', digests),
};
type Way = keyof typeof ways;

const rows: Array<{ way: Way; mainUs: number; processUs: number; perSecond: number; messages: number }> = [];
try {
  for (let i = 0; i < 20; i++) for (const sign of Object.values(ways)) await sign(); // warm-up
  for (let round = 0; round < ROUNDS; round++) {
    for (const way of Object.keys(ways) as Way[]) {
      const main0 = mainThreadMs();
      const process0 = processMs();
      const sent0 = pool.messages.sent;
      const start = performance.now();
      for (let b = 0; b < BATCHES; b++) await ways[way]();
      const signatures = BATCHES * SIZE;
      rows.push({
        way,
        mainUs: ((mainThreadMs() - main0) * 1000) / signatures,
        processUs: ((processMs() - process0) * 1000) / signatures,
        perSecond: signatures / ((performance.now() - start) / 1000),
        messages: (pool.messages.sent - sent0) / BATCHES,
      });
    }
  }
} finally {
  await keyStore.close();
}
for (const row of rows) {
  process.stdout.write(
    `${JSON.stringify({ ...row, mainUs: +row.mainUs.toFixed(1), processUs: +row.processUs.toFixed(1), perSecond: Math.round(row.perSecond) })}\n`,
  );
}
