// ML-DSA-65 on each Node runtime of this machine, one thread, no service: noble signing μ (the software key store's
// fallback), noble verifying the message, and where node:crypto has ML-DSA (Node 24, OpenSSL 3.5) its signing and
// verifying of the message, and the service's native signer (src/keys/software/ml-dsa-addon.ts) signing μ with that same
// OpenSSL. The aim (issue 34): the addon at >= 0.5x node:crypto's own signing rate, per core.
//   node dist/bench/ml-dsa-runtimes.js              every runtime (this Node, and Node 24 if there is one), writes
//                                                   the section of docs/benchmarks.md; BENCH_SECONDS per row
//   node dist/bench/ml-dsa-runtimes.js measure 8    this runtime only, JSON lines on stdout (what the above runs)
// `npm run bench` runs the same and writes the same section.
import { execFileSync } from 'node:child_process';
import { createPrivateKey, sign as nodeSign, randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { pathToFileURL } from 'node:url';
import { ml_dsa65 } from '@noble/post-quantum/ml-dsa.js';
import { mlDsaMu } from '../src/crypto/message-representatives.js';
import { nativeMlDsaAvailable, verifyMlDsaJs, verifyMlDsaNative } from '../src/crypto/ml-dsa-verify.js';
import { loadMlDsaAddon } from '../src/keys/software/ml-dsa-addon.js';
import { packagePath } from '../src/paths.js';
import { node24Binary } from '../test/helpers/node-runtimes.js';
import { type Summary, timedLoop } from './stats.js';

/** The single-thread native signing rate issue 23 measured on this machine under load (docs/benchmarks.md). */
export const ISSUE_NATIVE_SIGN_RATE = 1500;

export type MlDsaOperation =
  | 'JS sign (noble, μ)'
  | 'JS verify (noble, message)'
  | 'native sign'
  | 'native verify'
  | 'addon sign (OpenSSL, μ)';

/** Issue 34's aim for the addon: at least this share of node:crypto's signing rate on the same runtime. */
export const ADDON_AIM = 0.5;

export interface MlDsaRuntimeRow extends Summary {
  node: string;
  operation: MlDsaOperation;
  cpuMs: number;
}

/** A 1 KiB message: ML-DSA hashes it once into μ, so its length barely matters next to the lattice arithmetic. */
const MESSAGE = randomBytes(1024);

/** PKCS#8 holding only the seed ξ (RFC 9881), so node:crypto signs with the very key noble made. */
function seedPkcs8Mldsa65(seed: Buffer): Buffer {
  return Buffer.concat([Buffer.from('3034020100300b0609608648016503040312042280200', 'hex'), seed]);
}

/** Every ML-DSA-65 operation this runtime has, `seconds` each. */
export function measureThisRuntime(seconds: number): MlDsaRuntimeRow[] {
  const seed = randomBytes(32);
  const { secretKey, publicKey } = ml_dsa65.keygen(seed);
  const mu = mlDsaMu(Buffer.from(publicKey), [MESSAGE]);
  const signature = ml_dsa65.internal.sign(mu, secretKey, { externalMu: true });
  const node = process.versions.node;
  const row = (operation: MlDsaOperation, op: () => unknown): MlDsaRuntimeRow => ({
    node,
    operation,
    ...timedLoop(seconds, () => {
      if (op() === false) throw new Error(`${operation}: a valid signature did not verify`);
    }),
  });
  const rows = [
    row('JS sign (noble, μ)', () => ml_dsa65.internal.sign(mu, secretKey, { externalMu: true })),
    row('JS verify (noble, message)', () => verifyMlDsaJs(65, publicKey, { message: MESSAGE }, signature)),
  ];
  if (nativeMlDsaAvailable()) {
    const privateKey = createPrivateKey({ key: seedPkcs8Mldsa65(seed), format: 'der', type: 'pkcs8' });
    rows.push(row('native sign', () => nodeSign(null, MESSAGE, privateKey)));
    rows.push(row('native verify', () => verifyMlDsaNative(65, publicKey, { message: MESSAGE }, signature)));
  }
  // The key store's path: the expanded secret key imported for each signature, as the service does.
  const addon = loadMlDsaAddon().addon;
  if (addon) rows.push(row('addon sign (OpenSSL, μ)', () => addon.signMu(65, secretKey, mu)));
  return rows;
}

/** This Node and Node 24 (if there is one; SIGNBRIDGE_NODE24), each in a process of its own, one after the other. */
export function measureMlDsaRuntimes(seconds: number, log: (msg: string) => void): MlDsaRuntimeRow[] {
  const script = packagePath('dist', 'bench', 'ml-dsa-runtimes.js');
  const runtimes = [process.execPath];
  const node24 = node24Binary();
  if (node24) runtimes.push(node24);
  else log('no Node 24 binary (SIGNBRIDGE_NODE24, or runtime/node24 as scripts/setup.sh installs it)');
  return runtimes.flatMap((node) => {
    log(`ML-DSA-65 on ${node} (1 thread, ${seconds} s per row)`);
    const out = execFileSync(node, [script, 'measure', String(seconds)], { encoding: 'utf8' });
    return out
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as MlDsaRuntimeRow);
  });
}

const fmt = (n: number | undefined, digits = 0) =>
  n === undefined || Number.isNaN(n)
    ? 'n/a'
    : n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

/** The docs/benchmarks.md section: the rows, then the arithmetic against the native single-thread rate. */
export function mlDsaRuntimeSection(rows: MlDsaRuntimeRow[], seconds: number): string {
  const table = [
    '| Node | operation | signatures/s (1 thread) | p50 ms | p99 ms | CPU ms per operation |',
    '|---|---|---|---|---|---|',
    ...rows.map(
      (r) =>
        `| ${r.node} | ${r.operation} | ${fmt(r.perSecond)} | ${fmt(r.p50Ms, 2)} | ${fmt(r.p99Ms, 2)} | ${fmt(r.cpuMs, 3)} |`,
    ),
  ].join('\n');
  const rate = (op: MlDsaOperation, node?: string) =>
    rows.find((r) => r.operation === op && (node === undefined || r.node === node));
  const here = process.versions.node;
  const jsSign = rate('JS sign (noble, μ)', here);
  const nativeSign = rate('native sign');
  const nativeVerify = rate('native verify');
  const jsVerify = rate('JS verify (noble, message)', nativeVerify?.node ?? here);
  const addonSign = rate('addon sign (OpenSSL, μ)');
  const cores = cpus().length;
  const lines = [
    `JS signing (Node ${here}, the service's fallback where the addon does not load): ${fmt(jsSign?.perSecond)}/s on 1 thread = ${fmt(jsSign?.cpuMs, 2)} ms CPU per signature; ${cores} cores bound it at ${fmt(jsSign ? (1000 / jsSign.cpuMs) * cores : undefined)}/s.`,
  ];
  if (nativeSign) {
    lines.push(
      `Native signing (Node ${nativeSign.node}): ${fmt(nativeSign.perSecond)}/s on 1 thread = ${fmt(nativeSign.cpuMs, 3)} ms CPU per signature, ${fmt(jsSign ? nativeSign.perSecond / jsSign.perSecond : undefined, 1)}× the JS rate; against the ~${fmt(ISSUE_NATIVE_SIGN_RATE)}/s issue 23 measured: ${fmt((100 * nativeSign.perSecond) / ISSUE_NATIVE_SIGN_RATE)}%. ${cores} cores would bound a native signer at ${fmt((1000 / nativeSign.cpuMs) * cores)}/s; node:crypto cannot sign an external μ (docs/keys.md), the addon does.`,
      `Verification (Node ${nativeVerify?.node}): native ${fmt(nativeVerify?.perSecond)}/s against noble ${fmt(jsVerify?.perSecond)}/s on the same runtime = ${fmt(nativeVerify && jsVerify ? nativeVerify.perSecond / jsVerify.perSecond : undefined, 1)}×; a client's check of one signature costs ${fmt(nativeVerify?.cpuMs, 3)} ms instead of ${fmt(jsVerify?.cpuMs, 2)} ms.`,
    );
  } else {
    lines.push('No runtime with ML-DSA in node:crypto was measured (no Node 24 binary): no native rows.');
  }
  if (addonSign) {
    const same = rate('native sign', addonSign.node);
    const jsSame = rate('JS sign (noble, μ)', addonSign.node);
    const share = same ? addonSign.perSecond / same.perSecond : undefined;
    const perCpu = same ? same.cpuMs / addonSign.cpuMs : undefined;
    lines.push(
      `The service's signer (the addon, Node ${addonSign.node}, the key imported for each signature): ${fmt(addonSign.perSecond)}/s on 1 thread = ${fmt(addonSign.cpuMs, 3)} ms CPU per signature, ${fmt(share, 2)}× node:crypto's signing rate (${fmt(perCpu, 2)}× by CPU time; aim ≥ ${ADDON_AIM}×: ${share !== undefined && share >= ADDON_AIM ? 'met' : 'not met'}) and ${fmt(jsSame ? addonSign.perSecond / jsSame.perSecond : undefined, 1)}× noble's; ${cores} cores bound the service at ${fmt((1000 / addonSign.cpuMs) * cores)}/s.`,
    );
  } else {
    lines.push(
      'The addon did not load in any runtime measured (src/keys/native/ml-dsa/build.sh, Node 24): no addon row.',
    );
  }
  const measured = `Measured ${new Date().toISOString().slice(0, 10)} on ${cores} × ${cpus()[0]?.model ?? 'unknown CPU'}, ${seconds} s per row, other work on the machine as it came.`;
  return `<!-- bench:ml-dsa-runtimes:start -->\n${measured}\n\n${table}\n\n${lines.map((l) => `- ${l}`).join('\n')}\n<!-- bench:ml-dsa-runtimes:end -->`;
}

/** Puts `section` into docs/benchmarks.md in place of the last one (appended under its heading the first time). */
export function writeMlDsaRuntimeSection(section: string): void {
  const docPath = packagePath('docs', 'benchmarks.md');
  let doc = readFileSync(docPath, 'utf8');
  if (!doc.includes('<!-- bench:ml-dsa-runtimes:start -->')) {
    doc += '\n## ML-DSA-65 per runtime\n\n<!-- bench:ml-dsa-runtimes:start -->\n<!-- bench:ml-dsa-runtimes:end -->\n';
  }
  doc = doc.replace(/<!-- bench:ml-dsa-runtimes:start -->[\s\S]*<!-- bench:ml-dsa-runtimes:end -->/, section);
  writeFileSync(docPath, doc);
}

function secondsArg(raw: string | undefined, fallback: number): number {
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d+$/.test(raw) || Number(raw) < 1) {
    process.stderr.write(`ml-dsa-runtimes: seconds must be a whole number, at least 1; got "${raw}"\n`);
    process.exit(2);
  }
  return Number(raw);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  if (process.argv[2] === 'measure') {
    const seconds = secondsArg(process.argv[3], 8);
    for (const row of measureThisRuntime(seconds)) process.stdout.write(`${JSON.stringify(row)}\n`);
  } else {
    const seconds = secondsArg(process.env.BENCH_SECONDS, 8);
    const rows = measureMlDsaRuntimes(seconds, (msg) => process.stderr.write(`[bench] ${msg}\n`));
    const section = mlDsaRuntimeSection(rows, seconds);
    writeMlDsaRuntimeSection(section);
    process.stdout.write(`${section}\n`);
  }
}
