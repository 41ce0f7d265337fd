// docs/keys.md's table of key specs names exactly the key specs of src/crypto/algorithms.ts, each once: a spec added
// to the table of the code and not to the page (or the other way round) fails here.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { KEY_SPECS } from '../../src/crypto/algorithms.js';
import { packagePath } from '../../src/paths.js';

/** The first cell of each row of the table under "## Key specs and where they live", its short forms expanded. */
function documentedSpecs(): string[] {
  const page = readFileSync(packagePath('docs', 'keys.md'), 'utf8');
  const section = page.split('## Key specs and where they live')[1]?.split('\n## ')[0] ?? '';
  const rows = section.split('\n').filter((line) => line.startsWith('| ') && !line.startsWith('| key spec'));
  return rows.flatMap((row) => {
    // "RSA_2048/3072/4096", "ECC_NIST_P256/P384/P521", "ECC_SECG_P256K1 (secp256k1)"
    const [first, ...others] = (row.split('|')[1]?.trim().split(' ')[0] ?? '').split('/');
    const stem = first?.slice(0, first.lastIndexOf('_') + 1) ?? '';
    return [first ?? '', ...others.map((suffix) => stem + suffix)];
  });
}

describe('docs/keys.md and the table of key specs', () => {
  it('name the same key specs, each once', () => {
    const documented = documentedSpecs();
    expect([...documented].sort()).toEqual([...KEY_SPECS].sort());
  });
});
