// src/paths.ts, the one place that knows where the native files are: the checkout's build folders without a layout
// file, and a package's signbridge-layout.json (relative paths against its folder, the first existing candidate
// first) with one.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import { LAYOUT_FILE_NAME, nativeCandidates, nativeMissingHint, nativePath, packagePath } from '../../src/paths.js';
import { makeTempDir } from '../helpers/service.js';

describe('the checkout (no layout file beside the code)', () => {
  it('finds the module and the addon where scripts/setup.sh builds them', () => {
    expect(MODULE_PATH).toBe(packagePath('build', 'native', 'libsignbridge-pkcs11.so'));
    const dir = makeTempDir('sb-layout-none-');
    expect(nativeCandidates(dir, () => '/repo')).toEqual({
      pkcs11Module: ['/repo/build/native/libsignbridge-pkcs11.so'],
      peercredAddon: ['/repo/daemon/native/peercred/build/Release/peercred.node'],
    });
    expect(nativeMissingHint(dir)).toBe('run scripts/setup.sh');
  });
});

describe('a package (signbridge-layout.json beside the bundle)', () => {
  const layout = (content: object) => {
    const dir = makeTempDir('sb-layout-');
    writeFileSync(join(dir, LAYOUT_FILE_NAME), JSON.stringify(content));
    return dir;
  };
  const noCheckout = () => {
    throw new Error('a package must not look for a checkout');
  };

  it('resolves relative candidates against its folder and keeps absolute ones', () => {
    const dir = layout({ pkcs11Module: ['/usr/lib/x/pkcs11/m.so'], peercredAddon: ['peercred.node'] });
    expect(nativeCandidates(dir, noCheckout)).toEqual({
      pkcs11Module: ['/usr/lib/x/pkcs11/m.so'],
      peercredAddon: [join(dir, 'peercred.node')],
    });
  });

  it('takes the first candidate that exists (a fallback build before the prebuilt file), else the first', () => {
    const dir = layout({
      pkcs11Module: ['build/m.so', 'prebuilt/m.so'],
      peercredAddon: ['build/p.node', 'prebuilt/p.node'],
      missingHint: 'reinstall it',
    });
    mkdirSync(join(dir, 'prebuilt'));
    mkdirSync(join(dir, 'build'));
    writeFileSync(join(dir, 'prebuilt', 'm.so'), '');
    expect(nativePath('pkcs11Module', nativeCandidates(dir, noCheckout))).toBe(join(dir, 'prebuilt', 'm.so'));
    writeFileSync(join(dir, 'build', 'm.so'), '');
    expect(nativePath('pkcs11Module', nativeCandidates(dir, noCheckout))).toBe(join(dir, 'build', 'm.so'));
    expect(nativePath('peercredAddon', nativeCandidates(dir, noCheckout))).toBe(join(dir, 'build', 'p.node'));
    expect(nativeMissingHint(dir)).toBe('reinstall it');
  });

  it('refuses a layout file that names no module', () => {
    const dir = layout({ peercredAddon: ['p.node'] });
    expect(() => nativeCandidates(dir, noCheckout)).toThrow(/names no pkcs11Module/);
  });

  it('refuses a damaged layout file with its path and what to do, for the paths and the hint alike', () => {
    for (const text of ['{"pkcs11Module": ["m.so"', '["m.so"]', 'null']) {
      const dir = makeTempDir('sb-layout-bad-');
      writeFileSync(join(dir, LAYOUT_FILE_NAME), text);
      const file = join(dir, LAYOUT_FILE_NAME);
      expect(() => nativeCandidates(dir, noCheckout), text).toThrow(`signbridge: ${file}`);
      expect(() => nativeCandidates(dir, noCheckout), text).toThrow(/reinstall the client package/);
      expect(() => nativeMissingHint(dir), text).toThrow(/reinstall the client package/);
    }
  });
});
