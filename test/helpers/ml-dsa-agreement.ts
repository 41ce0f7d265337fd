// The same ML-DSA keys and signatures put to every verifier this runtime has: noble over the message, noble over μ,
// and node:crypto over the message where the runtime has ML-DSA (Node 24). Pure JavaScript (no native addon), so
// test/unit/ml-dsa-verify.test.ts runs it in-process on Node 20 and, built into dist/, as a script on Node 24:
//   node dist/test/helpers/ml-dsa-agreement.js   -> prints the report as JSON
import { createHash, createPrivateKey, sign as nodeSign } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { ml_dsa44, ml_dsa65, ml_dsa87 } from '@noble/post-quantum/ml-dsa.js';
import { mlDsaMu } from '../../src/crypto/message-representatives.js';
import {
  type MlDsaLevel,
  nativeMlDsaAvailable,
  verifyMlDsa,
  verifyMlDsaJs,
  verifyMlDsaNative,
} from '../../src/crypto/ml-dsa-verify.js';

const NOBLE = { 44: ml_dsa44, 65: ml_dsa65, 87: ml_dsa87 } as const;
const LEVELS: MlDsaLevel[] = [44, 65, 87];
const MESSAGE = Buffer.from('release-1.2.3.tar: the bytes a build signs');
const OTHER_MESSAGE = Buffer.from('release-1.2.4.tar: not the bytes that were signed');

export type Check = 'valid' | 'tampered' | 'short' | 'other message' | 'other key';

export interface AgreementRow {
  level: MlDsaLevel;
  /** Who made the signature: noble over the message, noble over μ (as the service signs), node:crypto. */
  signer: 'noble message' | 'noble mu' | 'node:crypto message';
  check: Check;
  jsMessage: boolean;
  jsMu: boolean;
  /** Only where the runtime has ML-DSA in node:crypto. */
  native?: boolean;
  /** What verifyMlDsa (the one entry point) answered for the message. */
  chosen: boolean;
}

export interface AgreementReport {
  node: string;
  native: boolean;
  rows: AgreementRow[];
  /** SHA-256 of each deterministic signature (noble, no hedging): equal on every runtime for the same seeds. */
  deterministic: Record<string, string>;
}

/** PKCS#8 holding only the 32-byte seed ξ (RFC 9881 "seed" choice), which node:crypto expands as noble does. */
function seedPkcs8(level: MlDsaLevel, seed: Buffer): Buffer {
  const oidTail = { 44: '11', 65: '12', 87: '13' }[level];
  return Buffer.concat([Buffer.from(`3034020100300b06096086480165030403${oidTail}042280200`, 'hex'), seed]);
}

function tamper(signature: Uint8Array): Buffer {
  const copy = Buffer.from(signature);
  const at = copy.length >> 1;
  copy.writeUInt8(copy.readUInt8(at) ^ 1, at);
  return copy;
}

export function agreementReport(): AgreementReport {
  const native = nativeMlDsaAvailable();
  const rows: AgreementRow[] = [];
  const deterministic: Record<string, string> = {};
  for (const level of LEVELS) {
    const seed = Buffer.alloc(32, level);
    const { secretKey, publicKey } = NOBLE[level].keygen(seed);
    const otherKey = NOBLE[level].keygen(Buffer.alloc(32, level + 1)).publicKey;
    const mu = mlDsaMu(Buffer.from(publicKey), [MESSAGE]);
    const signatures: [AgreementRow['signer'], Uint8Array][] = [
      ['noble message', NOBLE[level].sign(MESSAGE, secretKey, { extraEntropy: false })],
      ['noble mu', NOBLE[level].internal.sign(mu, secretKey, { externalMu: true, extraEntropy: false })],
    ];
    if (native) {
      const privateKey = createPrivateKey({ key: seedPkcs8(level, seed), format: 'der', type: 'pkcs8' });
      signatures.push(['node:crypto message', nodeSign(null, MESSAGE, privateKey)]);
    }
    for (const [signer, signature] of signatures) {
      if (signer !== 'node:crypto message') {
        deterministic[`${level} ${signer}`] = createHash('sha256').update(signature).digest('hex');
      }
      const cases: [Check, Uint8Array, Buffer, Uint8Array][] = [
        ['valid', signature, MESSAGE, publicKey],
        ['tampered', tamper(signature), MESSAGE, publicKey],
        ['short', signature.subarray(1), MESSAGE, publicKey],
        ['other message', signature, OTHER_MESSAGE, publicKey],
        ['other key', signature, MESSAGE, otherKey],
      ];
      for (const [check, sig, message, key] of cases) {
        const keyMu = mlDsaMu(Buffer.from(key), [message]);
        rows.push({
          level,
          signer,
          check,
          jsMessage: verifyMlDsaJs(level, key, { message }, sig),
          jsMu: verifyMlDsaJs(level, key, { mu: keyMu }, sig),
          ...(native ? { native: verifyMlDsaNative(level, key, { message }, sig) } : {}),
          chosen: verifyMlDsa(level, key, { message }, sig),
        });
      }
    }
  }
  return { node: process.versions.node, native, rows, deterministic };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.stdout.write(`${JSON.stringify(agreementReport())}\n`);
}
