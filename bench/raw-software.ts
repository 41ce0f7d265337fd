// The software key store's arithmetic alone: a loop of ML-DSA-65 (external μ: the native addon where this Node loads
// it, as the key store signs, else noble) and SM2 (sm-crypto, over e) signatures on one thread, no sealing, no
// service. Its rate times the cores bounds what the service can reach for these key specs: every signature costs
// this much CPU wherever it runs.
import { randomBytes } from 'node:crypto';
import { ml_dsa65 } from '@noble/post-quantum/ml-dsa.js';
import smCrypto from 'sm-crypto';
import { loadMlDsaAddon } from '../src/keys/software/ml-dsa-addon.js';
import { timedLoop as loop, type Summary } from './stats.js';

export interface SoftwareRow extends Summary {
  spec: 'ML_DSA_65' | 'SM2';
  /** Which library signed: what the service's key store uses on this runtime. */
  library: 'OpenSSL (addon)' | 'noble' | 'sm-crypto';
  /** CPU time per signature (process.cpuUsage): unlike the latencies, it does not grow when others load the machine. */
  cpuMs: number;
}

export function measureSoftwareSigning(seconds: number): SoftwareRow[] {
  const { secretKey } = ml_dsa65.keygen(randomBytes(32));
  const mu = randomBytes(64);
  const pair = smCrypto.sm2.generateKeyPairHex();
  const e = Array.from(randomBytes(32));
  const addon = loadMlDsaAddon().addon;
  return [
    addon
      ? { spec: 'ML_DSA_65', library: 'OpenSSL (addon)', ...loop(seconds, () => addon.signMu(65, secretKey, mu)) }
      : {
          spec: 'ML_DSA_65',
          library: 'noble',
          ...loop(seconds, () => ml_dsa65.internal.sign(mu, secretKey, { externalMu: true })),
        },
    {
      spec: 'SM2',
      library: 'sm-crypto',
      ...loop(seconds, () => smCrypto.sm2.doSignature(e, pair.privateKey, { hash: false, der: true })),
    },
  ];
}
