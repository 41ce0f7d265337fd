// Version ordering per ecosystem: each table is an ascending chain (every pair is checked both ways), plus
// equalities and versions that must not parse.
import { describe, expect, it } from 'vitest';
import { compareVersions, isValidVersion, VersionError } from '../../src/policy/vulndb/versions.js';

function expectAscending(ecosystem: string, chain: string[]) {
  for (let i = 0; i < chain.length; i++) {
    for (let j = 0; j < chain.length; j++) {
      const expected = Math.sign(i - j);
      const got = compareVersions(ecosystem, chain[i]!, chain[j]!);
      expect(got, `${ecosystem}: ${chain[i]} vs ${chain[j]}`).toBe(expected);
    }
  }
}

function expectEqual(ecosystem: string, pairs: Array<[string, string]>) {
  for (const [a, b] of pairs) {
    expect(compareVersions(ecosystem, a, b), `${a} == ${b}`).toBe(0);
    expect(compareVersions(ecosystem, b, a), `${b} == ${a}`).toBe(0);
  }
}

function expectInvalid(ecosystem: string, versions: string[], message: (v: string) => string) {
  for (const v of versions) {
    expect(() => compareVersions(ecosystem, v, v), v).toThrow(new VersionError(message(v)));
    expect(isValidVersion(ecosystem, v)).toBe(false);
  }
}

describe('npm (SemVer 2.0)', () => {
  it('orders pre-releases before releases, numerically and lexically per identifier', () => {
    expectAscending('npm', [
      '0.0.1',
      '0.9.0',
      '0.10.0',
      '1.0.0-alpha',
      '1.0.0-alpha.1',
      '1.0.0-alpha.beta',
      '1.0.0-beta',
      '1.0.0-beta.2',
      '1.0.0-beta.11',
      '1.0.0-rc.1',
      '1.0.0',
      '1.0.1',
      '1.2.0',
      '4.17.20',
      '4.17.21',
      '10.0.0',
    ]);
  });
  it('ignores build metadata', () => expectEqual('npm', [['1.0.0+build.5', '1.0.0']]));
  it('rejects non-SemVer versions', () =>
    expectInvalid('npm', ['1.0', 'latest', '1.0.0.0', '01.0.0', ''], (v) => `"${v}" is not a valid npm version`));
});

describe('PyPI (PEP 440)', () => {
  it('orders dev < pre < release < post, per release, with epochs first', () => {
    expectAscending('PyPI', [
      '0.9',
      '1.0.dev0',
      '1.0.dev1',
      '1.0a1.dev1',
      '1.0a1',
      '1.0a1.post1',
      '1.0a2',
      '1.0b1',
      '1.0b2.post345.dev456',
      '1.0b2.post345',
      '1.0rc1',
      '1.0',
      '1.0+abc.5',
      '1.0+abc.7',
      '1.0+5',
      '1.0.post1.dev1',
      '1.0.post1',
      '1.0.post2',
      '1.0.1',
      '1.1.dev1',
      '1.2',
      '1.10',
      '2.0',
      '2013.10',
      '1!0.1',
      '1!1.0',
      '2!0.0.1',
    ]);
  });
  it('normalises spellings: case, separators, alpha/beta/c/pre/preview/rev/r, implicit numbers, trailing zeros', () => {
    expectEqual('PyPI', [
      ['1.0', '1.0.0'],
      ['1', '1.0.0.0'],
      ['1.0a1', '1.0-alpha-1'],
      ['1.0a1', '1.0.ALPHA1'],
      ['1.0b', '1.0beta0'],
      ['1.0rc1', '1.0c1'],
      ['1.0rc1', '1.0pre1'],
      ['1.0rc1', '1.0preview1'],
      ['1.0.post1', '1.0-1'],
      ['1.0.post1', '1.0rev1'],
      ['1.0.post1', '1.0.r1'],
      ['1.0.post', '1.0.post0'],
      ['1.0.dev', '1.0.dev0'],
      ['v1.0', '1.0'],
      ['0!1.0', '1.0'],
      ['01.02', '1.2'],
      ['1.0+ABC', '1.0+abc'],
      ['1.0+abc-1', '1.0+abc.1'],
      ['  1.0  ', '1.0'],
    ]);
  });
  it('epochs dominate: 1!0.1 > 2.0', () => expect(compareVersions('PyPI', '1!0.1', '2.0')).toBe(1));
  it('rejects what PEP 440 does not allow', () =>
    expectInvalid(
      'PyPI',
      ['1.0-SNAPSHOT', 'abc', '1.0+', '1..0', '1.0a1b1', ''],
      (v) => `"${v}" is not a valid PEP 440 version`,
    ));
});

describe('Maven (ComparableVersion)', () => {
  it('orders qualifiers alpha < beta < milestone < rc < snapshot < release < sp < unknown', () => {
    expectAscending('Maven', [
      '1.0-alpha-1',
      '1.0-alpha-2',
      '1.0-beta-1',
      '1.0-milestone-1',
      '1.0-rc-1',
      '1.0-SNAPSHOT',
      '1.0',
      '1.0-sp1',
      '1.0-abc',
      '1.0-xyz',
      '1.0-1',
      '1.0.1',
      '1.1',
      '2.0.0-M1',
      '2.0.0',
    ]);
  });
  it('hard cases from the Maven test suite', () => {
    // A number after "-" opens a sub-list, and lists sort before numbers: 1-1 < 1.1 (and 2-1 < 2.0.2).
    expectAscending('Maven', ['1', '1-1', '1.1', '1.1.1']);
    expectAscending('Maven', ['2.0', '2-1', '2.0.2', '2.1-1', '2.1.0.1']);
    expectAscending('Maven', ['1-snapshot', '1', '1-sp', '1-foo2', '1-foo10', '1-1', '1.1']);
    expectAscending('Maven', ['2.14.1', '2.15.0-rc1', '2.15.0-rc2', '2.15.0', '2.16.0', '2.17.0']);
    expectAscending('Maven', ['5.3.17', '5.3.18', '5.3.19.RELEASE']);
    expectAscending('Maven', ['1.9', '1.10', '1.10.0.1']);
  });
  it('treats trailing zeros, "final", "ga", "release", aliases and case as equal', () => {
    expectEqual('Maven', [
      ['1.0.0', '1.0'],
      ['1.0', '1'],
      ['1.0.0', '1'],
      ['1-0', '1'],
      ['1.0-ga', '1'],
      ['1.0.FINAL', '1'],
      ['1.0.RELEASE', '1.0'],
      ['1a1', '1-alpha-1'],
      ['1b2', '1-beta-2'],
      ['1m3', '1-milestone-3'],
      ['1.0-cr1', '1.0-rc1'],
      ['1.0-RC1', '1.0-rc1'],
      ['1.0-alpha1', '1.0-ALPHA1'],
      ['1.01', '1.1'],
    ]);
  });
  it('1.0-alpha < 1.0 < 1.0-sp1', () => {
    expect(compareVersions('Maven', '1.0-alpha', '1.0')).toBe(-1);
    expect(compareVersions('Maven', '1.0', '1.0-sp1')).toBe(-1);
  });
  it('handles numbers beyond 2^53', () =>
    expectAscending('Maven', ['1.20210101000000000', '1.20210101000000001', '1.100000000000000000000']));
  it('rejects empty and whitespace', () =>
    expectInvalid('Maven', ['', ' ', '1.0 beta'], (v) => `"${v}" is not a valid Maven version`));
});

describe('Go (module versions)', () => {
  it('orders pseudo-versions by their timestamp and before the release they precede', () => {
    expectAscending('Go', [
      'v0.0.0-20190308221718-c2843e01d9a2',
      'v0.0.0-20210101000000-abcdef123456',
      'v0.0.0-20210921155107-089bfa567519',
      'v0.1.0',
      'v0.1.1-0.20220101000000-0123456789ab',
      'v0.1.1',
      'v1.0.0-rc.1',
      'v1.0.0',
      'v1.6.0',
      'v1.7.7',
      'v2.0.0+incompatible',
      'v20.10.7+incompatible',
      'v20.10.8',
    ]);
  });
  it('accepts OSV spellings without the leading v; +incompatible does not change the order', () =>
    expectEqual('Go', [
      ['v1.7.7', '1.7.7'],
      ['v20.10.7+incompatible', '20.10.7'],
      ['0.0.0-20210921155107-089bfa567519', 'v0.0.0-20210921155107-089bfa567519'],
    ]));
  it('rejects non-module versions', () => {
    expectInvalid('Go', ['v1.2', 'latest', 'vv1.0.0', ''], (v) => `"${v}" is not a valid Go version`);
    expectInvalid(
      'Go',
      ['v1.0.0+meta'],
      (v) => `"${v}" is not a valid Go version (the only build suffix Go allows is +incompatible)`,
    );
  });
});

it('unknown ecosystems are an error, not an order', () => {
  expect(() => compareVersions('crates.io', '1.0.0', '1.0.1')).toThrow(
    'unsupported ecosystem "crates.io" (supported: npm, PyPI, Maven, Go)',
  );
});
