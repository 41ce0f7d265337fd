// Raw SoftHSM signing: a pkcs11js loop of C_SignInit + C_Sign on one thread, no service in between.
// Run as its own process (one SoftHSM per process): node dist/bench/raw-softhsm.js <dataDir> <seconds>
// Prints one JSON line per key spec.
import { performance } from 'node:perf_hooks';
import * as graphene from 'graphene-pk11';
import { DIGEST_INFO_PREFIX } from '../src/crypto/encoding.js';
import { Pkcs11KeyStore } from '../src/keys/pkcs11/pkcs11-key-store.js';
import { embeddedSoftHsmOptions } from '../src/keys/pkcs11/softhsm.js';
import { summarise } from './stats.js';

const [dataDir, secondsArg] = process.argv.slice(2);
if (!dataDir) throw new Error('usage: raw-softhsm.js <dataDir> [seconds]');
const seconds = Number(secondsArg ?? 5);

const options = embeddedSoftHsmOptions(dataDir);
const keyStore = Pkcs11KeyStore.open({ ...options, sessions: 1 });
const specs = [
  { spec: 'RSA_2048' as const, mechanism: graphene.MechanismEnum.RSA_PKCS },
  { spec: 'ECC_NIST_P256' as const, mechanism: graphene.MechanismEnum.ECDSA },
];
const made = [];
for (const s of specs) made.push({ ...s, key: await keyStore.createKey(s.spec, `bench-${s.spec}`) });

const mod = graphene.Module.load(options.modulePath, 'bench');
mod.initialize({ flags: 2 }); // already initialised by the key store: graphene tolerates that
const slot = [...mod.getSlots(true)].find((s) => s.getToken().label.trim() === options.tokenLabel);
if (!slot) throw new Error('bench token not found');
const session = slot.open(graphene.SessionFlag.SERIAL_SESSION);
const lib = session.lib;

for (const { spec, mechanism, key } of made) {
  const id = Buffer.from(key.keyRef.slice('pkcs11:id='.length), 'hex');
  const handle = session.find({ class: graphene.ObjectClass.PRIVATE_KEY, id }).items(0).handle;
  const digest = Buffer.alloc(32, 7);
  const input = spec.startsWith('RSA') ? Buffer.concat([DIGEST_INFO_PREFIX.sha256, digest]) : digest;
  const out = Buffer.alloc(512);
  const latencies: number[] = [];
  const end = performance.now() + seconds * 1000;
  while (performance.now() < end) {
    const t0 = performance.now();
    lib.C_SignInit(session.handle, { mechanism }, handle);
    lib.C_Sign(session.handle, input, out);
    latencies.push(performance.now() - t0);
  }
  process.stdout.write(
    `${JSON.stringify({ path: 'softhsm-direct', spec, threads: 1, ...summarise(latencies, seconds) })}\n`,
  );
}
session.close();

// The service's key store alone. One signature at a time, each in an event-loop turn of its own (as a sequential
// client's requests arrive): through a key store that always hands signatures to a signing thread (what the hop
// costs), and through the default one, which signs on the event loop while the threads are idle. 8 in flight:
// whether the signing threads use both cores.
const threadsOnly = Pkcs11KeyStore.open({ ...options, sessions: 1, inlineBelowMs: 0 });
const nextTurn = () => new Promise((resolve) => setImmediate(resolve));
const runs = [
  { path: 'key-store-thread', store: threadsOnly, inFlight: 1 },
  { path: 'key-store-inline', store: keyStore, inFlight: 1 },
  { path: 'key-store', store: keyStore, inFlight: 8 },
];
for (const [{ spec, key }, run] of made.flatMap((m) => runs.map((r) => [m, r] as const))) {
  const algorithm = spec.startsWith('RSA') ? 'RSASSA_PKCS1_V1_5_SHA_256' : 'ECDSA_SHA_256';
  const digest = Buffer.alloc(32, 9);
  const latencies: number[] = [];
  for (let i = 0; i < 50; i++) await run.store.sign(key.keyRef, spec, algorithm, digest); // warm-up, cost measured
  const end = performance.now() + seconds * 1000;
  await Promise.all(
    Array.from({ length: run.inFlight }, async () => {
      while (performance.now() < end) {
        if (run.inFlight === 1) await nextTurn();
        const t0 = performance.now();
        await run.store.sign(key.keyRef, spec, algorithm, digest);
        latencies.push(performance.now() - t0);
      }
    }),
  );
  process.stdout.write(
    `${JSON.stringify({ path: run.path, spec, threads: run.inFlight, ...summarise(latencies, seconds) })}\n`,
  );
}
// Both stores share the process's SoftHSM: the first close finalizes it for both, so exit rather than close twice.
await threadsOnly.close();
process.exit(0);
