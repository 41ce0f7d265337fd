// ML-DSA verification has two implementations behind src/crypto/ml-dsa-verify.ts: node:crypto (Node 24) and
// @noble/post-quantum (Node 20, and μ everywhere). They must give the same answer for the same key, message and
// signature, valid or not. Here on this runtime (Node 20: the JavaScript path only) and, through the built
// dist/test/helpers/ml-dsa-agreement.js, on the Node 24 binary where there is one (native path).
import { execFileSync } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { nativeMlDsaAvailable, verifyMlDsa, verifyMlDsaJs, verifyMlDsaNative } from '../../src/crypto/ml-dsa-verify.js';
import { packagePath } from '../../src/paths.js';
import { type AgreementReport, agreementReport } from '../helpers/ml-dsa-agreement.js';
import { node24Binary } from '../helpers/node-runtimes.js';

/** Every verifier accepts the valid signatures and refuses every altered one; the entry point agrees with them. */
function expectAgreement(report: AgreementReport): void {
  expect(report.rows.length).toBeGreaterThan(0);
  for (const row of report.rows) {
    const expected = row.check === 'valid';
    const label = `Node ${report.node}: ML-DSA-${row.level}, ${row.signer}, ${row.check}`;
    expect(row.jsMessage, `${label}: noble over the message`).toBe(expected);
    expect(row.jsMu, `${label}: noble over μ`).toBe(expected);
    if (report.native) expect(row.native, `${label}: node:crypto`).toBe(expected);
    else expect(row.native, label).toBeUndefined();
    expect(row.chosen, `${label}: verifyMlDsa`).toBe(expected);
  }
}

function runtimeHasMlDsa(): boolean {
  try {
    generateKeyPairSync('ml-dsa-65' as never);
    return true;
  } catch (err) {
    expect((err as { code?: string }).code).toBe('ERR_INVALID_ARG_VALUE');
    return false;
  }
}

describe('ML-DSA verification, native and JavaScript', () => {
  it('on this runtime: the feature test is right, and every verifier it has agrees on valid and altered signatures', () => {
    expect(nativeMlDsaAvailable()).toBe(runtimeHasMlDsa());
    const report = agreementReport();
    expect(report.native).toBe(nativeMlDsaAvailable());
    expectAgreement(report);
    // 3 levels x 2 noble signers (x 3 with node:crypto) x 5 checks.
    expect(report.rows.length).toBe(report.native ? 45 : 30);
  });

  it('refuses what neither path can check the same way: a wrong-length key or μ throws; native never takes μ', () => {
    const publicKey = new Uint8Array(1952);
    const signature = new Uint8Array(3309);
    expect(() => verifyMlDsaJs(65, publicKey.subarray(1), { message: Buffer.from('m') }, signature)).toThrow(
      /ML-DSA-65 public key has 1952 bytes, not 1951/,
    );
    expect(() => verifyMlDsa(65, publicKey, { mu: new Uint8Array(32) }, signature)).toThrow(/μ has 64 bytes, not 32/);
    expect(() => verifyMlDsaNative(65, publicKey, { mu: new Uint8Array(64) }, signature)).toThrow(
      /over the message only/,
    );
    if (!nativeMlDsaAvailable()) {
      expect(() => verifyMlDsaNative(65, publicKey, { message: Buffer.from('m') }, signature)).toThrow(/has no ML-DSA/);
    }
  });

  const node24 = node24Binary();
  it.skipIf(!node24)('on Node 24: node:crypto verifies, and agrees with noble on the same keys and signatures', () => {
    const script = packagePath('dist', 'test', 'helpers', 'ml-dsa-agreement.js');
    expect(existsSync(script), `${script}: build with tsc -p tsconfig.build.json`).toBe(true);
    const out = execFileSync(node24 as string, [script], { encoding: 'utf8', timeout: 300_000 });
    const there = JSON.parse(out) as AgreementReport;
    expect(there.node).toMatch(/^24\./);
    expect(there.native).toBe(true);
    expectAgreement(there);
    expect(there.rows.filter((r) => r.signer === 'node:crypto message')).toHaveLength(15);
    // Same seeds, deterministic noble signing: the very signatures checked here were checked there.
    const here = agreementReport();
    expect(Object.keys(there.deterministic)).toHaveLength(6);
    expect(there.deterministic).toEqual(here.deterministic);
    const verdicts = (r: AgreementReport) =>
      r.rows.filter((row) => row.signer !== 'node:crypto message').map((row) => [row.jsMessage, row.jsMu, row.chosen]);
    expect(verdicts(there)).toEqual(verdicts(here));
  });
});
