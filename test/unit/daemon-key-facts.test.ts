// The daemon takes every fact about a key spec (curve, field size, RSA modulus, ML-DSA signature length) from
// src/crypto/algorithms.ts, the service's one table. It kept its own before: EC_FIELD_BYTES by key spec in
// daemon/ecdsa.ts and RSA_MODULUS_BYTES in daemon/handler.ts, beside the same numbers in algorithms.ts and spki.ts.
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { EC_FIELD_BYTES, KEY_SPECS, keyInfo } from '../../src/crypto/algorithms.js';

const ROOT = join(import.meta.dirname, '../..');

function tsFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return e.name === 'node_modules' || e.name === 'build' ? [] : tsFiles(path);
    return /\.(ts|mts|cts)$/.test(e.name) ? [path] : [];
  });
}

/** A table keyed by key spec or curve name: `RSA_2048:`, `ECC_NIST_P256:`, `ML_DSA_44:`, `'P-256':` as a key. */
const KEY_FACT_TABLE =
  /(?:\b(?:RSA_(?:2048|3072|4096)|ECC_NIST_P(?:256|384|521)|ML_DSA_(?:44|65|87)|SM2)|'P-(?:256|384|521)')\s*:/;

describe("the daemon's key facts", () => {
  it('no file under daemon/ keeps a table keyed by key spec or curve', () => {
    const tables = tsFiles(join(ROOT, 'daemon')).flatMap((file) =>
      readFileSync(file, 'utf8')
        .split('\n')
        .flatMap((line, i) => (KEY_FACT_TABLE.test(line) ? [`${relative(ROOT, file)}:${i + 1}: ${line.trim()}`] : [])),
    );
    expect(tables).toEqual([]);
  });

  it('the facts it reads instead are in the table for every key spec', () => {
    for (const spec of KEY_SPECS) {
      const info = keyInfo(spec);
      if (info.family === 'ec') expect(EC_FIELD_BYTES[info.curve]).toBeGreaterThan(0);
      if (info.family === 'rsa') expect(info.bits % 8).toBe(0);
      if (info.family === 'ml-dsa') expect(info.signatureBytes).toBeGreaterThan(0);
    }
  });
});
