// The software key store's arithmetic alone: a loop of ML-DSA-65 (noble, external μ) and SM2 (sm-crypto, over e)
// signatures on one thread, no sealing, no service. Its rate times the cores bounds what the service can reach for
// these key specs: every signature costs this much CPU wherever it runs.
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { ml_dsa65 } from '@noble/post-quantum/ml-dsa.js';
import smCrypto from 'sm-crypto';
import { type Summary, summarise } from './stats.js';

export interface SoftwareRow extends Summary {
  spec: 'ML_DSA_65' | 'SM2';
  /** CPU time per signature (process.cpuUsage): unlike the latencies, it does not grow when others load the machine. */
  cpuMs: number;
}

function loop(seconds: number, sign: () => void): Summary & { cpuMs: number } {
  for (let i = 0; i < 20; i++) sign(); // JIT
  const latencies: number[] = [];
  const cpu = process.cpuUsage();
  const end = performance.now() + seconds * 1000;
  while (performance.now() < end) {
    const t0 = performance.now();
    sign();
    latencies.push(performance.now() - t0);
  }
  const used = process.cpuUsage(cpu);
  return { ...summarise(latencies, seconds), cpuMs: (used.user + used.system) / 1000 / latencies.length };
}

export function measureSoftwareSigning(seconds: number): SoftwareRow[] {
  const { secretKey } = ml_dsa65.keygen(randomBytes(32));
  const mu = randomBytes(64);
  const pair = smCrypto.sm2.generateKeyPairHex();
  const e = Array.from(randomBytes(32));
  return [
    { spec: 'ML_DSA_65', ...loop(seconds, () => ml_dsa65.internal.sign(mu, secretKey, { externalMu: true })) },
    {
      spec: 'SM2',
      ...loop(seconds, () => smCrypto.sm2.doSignature(e, pair.privateKey, { hash: false, der: true })),
    },
  ];
}
