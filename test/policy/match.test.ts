// Matching SBOM components against OSV records: whole fixture SBOMs against a fixture database modelled on real
// GHSA/PYSEC/GO records, then range semantics, fix_version picking and severity, table by table.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { PackageURL } from 'packageurl-js';
import { beforeAll, describe, expect, it } from 'vitest';
import { parseSbom, type SbomComponent } from '../../src/policy/sbom/parse-sbom.js';
import { VulnerabilityIndex, VulnMatchError } from '../../src/policy/vulndb/match.js';
import { loadOsvPath, type OsvRecord, parseOsvRecord } from '../../src/policy/vulndb/osv.js';
import { VersionError } from '../../src/policy/vulndb/versions.js';

const here = (p: string) => fileURLToPath(new URL(p, import.meta.url));
const purl = (text: string): SbomComponent => {
  const p = PackageURL.fromString(text);
  return { name: p.name, ...(p.version === undefined ? {} : { version: p.version }), purl: p };
};
/** [vulnId, severity, fixVersion] per finding, sorted by id. */
const brief = (index: VulnerabilityIndex, c: SbomComponent) =>
  index
    .findVulnerabilities(c)
    .map((m) => [m.vulnId, m.severity, m.fixVersion ?? null])
    .sort((a, b) => String(a[0]).localeCompare(String(b[0])));

let db: VulnerabilityIndex;
beforeAll(async () => {
  db = new VulnerabilityIndex(await loadOsvPath(here('../fixtures/osv/db')));
  expect(db.warnings).toEqual([]);
});

describe('fixture SBOMs against the fixture database', () => {
  const scan = (file: string) => {
    const sbom = parseSbom(readFileSync(here(`../fixtures/sbom/${file}`), 'utf8'));
    return sbom.components.flatMap((c) =>
      db.findVulnerabilities(c).map((m) => `${c.name}@${c.version}: ${m.vulnId} ${m.severity} fix=${m.fixVersion}`),
    );
  };

  it('SPDX 2.3 web app: npm, PyPI and Maven findings, with fix versions', () => {
    expect(scan('spdx-2.3-webapp.spdx.json')).toEqual([
      'lodash@4.17.20: GHSA-35jh-r3h4-6jhm HIGH fix=4.17.21',
      '@babel/traverse@7.22.5: GHSA-67hx-6x53-jw92 CRITICAL fix=7.23.2',
      'Django@3.2.12: PYSEC-2022-213 UNKNOWN fix=3.2.14',
      'log4j-core@2.14.1: GHSA-jfh8-c2jp-5v3q CRITICAL fix=2.15.0',
    ]);
  });

  it('CycloneDX 1.5 service: nested Maven components match; fixed and withdrawn records do not', () => {
    expect(scan('cyclonedx-1.5-service.cdx.json')).toEqual([
      'spring-webmvc@5.3.17: GHSA-36p3-wjmg-h94x CRITICAL fix=5.3.18',
      'spring-beans@5.3.17: GHSA-36p3-wjmg-h94x CRITICAL fix=5.3.18',
    ]);
  });

  it('CycloneDX 1.6 CLI: Go pseudo-versions, +incompatible, last_affected, a fixed pseudo-version below the installed one', () => {
    expect(scan('cyclonedx-1.6-cli.cdx.json')).toEqual([
      'github.com/gin-gonic/gin@v1.6.0: GHSA-h395-qcrw-5vmq MEDIUM fix=1.7.7',
      'golang.org/x/crypto@v0.0.0-20210921155107-089bfa567519: GO-2022-0968 UNKNOWN fix=0.0.0-20211202192323-5770296d904e',
      'github.com/docker/docker@v20.10.7+incompatible: GO-2022-0193 UNKNOWN fix=20.10.11+incompatible',
      'jinja2@2.11.2: PYSEC-2021-66 MEDIUM fix=undefined',
    ]);
  });

  it('a match carries the record id, aliases, summary (or the first line of details) and the component', () => {
    const c = purl('pkg:pypi/django@3.2.12');
    const [m] = db.findVulnerabilities(c);
    expect(m).toEqual({
      vulnId: 'PYSEC-2022-213',
      aliases: ['CVE-2022-34265', 'GHSA-p64x-8rxx-wf6q'],
      summary:
        'An issue was discovered in Django 3.2 before 3.2.14 and 4.0 before 4.0.6. The Trunc() and Extract() database functions are subject to SQL injection if untrusted data is used as a kind/lookup_name value.',
      severity: 'UNKNOWN',
      fixVersion: '3.2.14',
      component: c,
    });
  });
});

describe('ranges per ecosystem (fixture records)', () => {
  it.each([
    // Log4Shell: three disjoint ranges, listed out of order in the record.
    ['pkg:maven/org.apache.logging.log4j/log4j-core@2.0-alpha1', []],
    ['pkg:maven/org.apache.logging.log4j/log4j-core@2.0-beta9', [['GHSA-jfh8-c2jp-5v3q', 'CRITICAL', '2.3.1']]],
    ['pkg:maven/org.apache.logging.log4j/log4j-core@2.3', [['GHSA-jfh8-c2jp-5v3q', 'CRITICAL', '2.3.1']]],
    ['pkg:maven/org.apache.logging.log4j/log4j-core@2.3.1', []],
    ['pkg:maven/org.apache.logging.log4j/log4j-core@2.4', [['GHSA-jfh8-c2jp-5v3q', 'CRITICAL', '2.12.2']]],
    ['pkg:maven/org.apache.logging.log4j/log4j-core@2.12.1', [['GHSA-jfh8-c2jp-5v3q', 'CRITICAL', '2.12.2']]],
    ['pkg:maven/org.apache.logging.log4j/log4j-core@2.12.2', []],
    ['pkg:maven/org.apache.logging.log4j/log4j-core@2.13.0', [['GHSA-jfh8-c2jp-5v3q', 'CRITICAL', '2.15.0']]],
    ['pkg:maven/org.apache.logging.log4j/log4j-core@2.15.0-rc1', [['GHSA-jfh8-c2jp-5v3q', 'CRITICAL', '2.15.0']]],
    ['pkg:maven/org.apache.logging.log4j/log4j-core@2.15.0', []],
    ['pkg:maven/org.apache.logging.log4j/log4j-api@2.14.1', []],
    [
      'pkg:maven/org.springframework/spring-beans@5.2.19.RELEASE',
      [['GHSA-36p3-wjmg-h94x', 'CRITICAL', '5.2.20.RELEASE']],
    ],
    ['pkg:maven/org.springframework/spring-beans@5.2.20.RELEASE', []],
    // Django: two intervals in one range; a versions-list-only hit (4.0rc1 precedes "introduced: 4.0").
    ['pkg:pypi/django@3.1.14', []],
    ['pkg:pypi/Django@3.2', [['PYSEC-2022-213', 'UNKNOWN', '3.2.14']]],
    ['pkg:pypi/django@3.2.13.0', [['PYSEC-2022-213', 'UNKNOWN', '3.2.14']]],
    ['pkg:pypi/django@3.2.14', []],
    ['pkg:pypi/django@4.0rc1', [['PYSEC-2022-213', 'UNKNOWN', null]]],
    ['pkg:pypi/django@4.0.5', [['PYSEC-2022-213', 'UNKNOWN', '4.0.6']]],
    ['pkg:pypi/django@4.0.6', []],
    // last_affected is inclusive; PyPI names compare per PEP 503 (record says "Jinja2").
    ['pkg:pypi/Jinja2@2.11.2', [['PYSEC-2021-66', 'MEDIUM', null]]],
    ['pkg:pypi/jinja2@2.11.2.post1', []],
    ['pkg:pypi/jinja2@2.11.3', []],
    ['pkg:pypi/requests@2.3.0', [['PYSEC-2023-74', 'UNKNOWN', '2.31.0']]],
    ['pkg:pypi/requests@2.2.1', []],
    // npm: a second package in the same record, and a pre-release-only range.
    ['pkg:npm/lodash-es@4.17.15', [['GHSA-35jh-r3h4-6jhm', 'HIGH', '4.17.21']]],
    ['pkg:npm/lodash@4.17.21', []],
    ['pkg:npm/%40babel/traverse@8.0.0-alpha.3', [['GHSA-67hx-6x53-jw92', 'CRITICAL', '8.0.0-alpha.4']]],
    ['pkg:npm/%40babel/traverse@8.0.0-alpha.4', []],
    ['pkg:npm/%40babel/traverse@7.23.2', []],
    // Go: records without the "v", pseudo-versions, +incompatible.
    [
      'pkg:golang/golang.org/x/net@v0.0.0-20210226172049-e18ecbb05110',
      [['GO-2022-0236', 'UNKNOWN', '0.0.0-20210428140749-89ef3d95e781']],
    ],
    ['pkg:golang/golang.org/x/net@v0.0.0-20210428140749-89ef3d95e781', []],
    ['pkg:golang/golang.org/x/net@v0.3.0', []],
    [
      'pkg:golang/golang.org/x/crypto@v0.0.0-20190308221718-c2843e01d9a2',
      [
        ['GO-2022-0229', 'UNKNOWN', '0.0.0-20200124225646-8b5121be2f68'],
        ['GO-2022-0968', 'UNKNOWN', '0.0.0-20211202192323-5770296d904e'],
      ],
    ],
    [
      'pkg:golang/github.com/docker/docker@v17.12.1-ce%2Bincompatible',
      [['GO-2022-0193', 'UNKNOWN', '20.10.11+incompatible']],
    ],
    ['pkg:golang/github.com/docker/docker@v20.10.11%2Bincompatible', []],
  ])('%s', (text, expected) => {
    expect(brief(db, purl(text))).toEqual(expected);
  });
});

const rec = (affected: unknown[], extra: Record<string, unknown> = {}): OsvRecord =>
  parseOsvRecord({ id: 'TEST-1', modified: '2024-01-01T00:00:00Z', affected, ...extra }, 'inline');
const npm = (ranges: unknown[], versions?: string[]) => ({
  package: { ecosystem: 'npm', name: 'pkg' },
  ranges,
  ...(versions ? { versions } : {}),
});
const eco = (...events: unknown[]) => ({ type: 'ECOSYSTEM', events });

describe('OSV range semantics and fix_version', () => {
  it.each([
    [
      'overlapping ranges: the lowest fix above the installed version',
      [eco({ introduced: '1.0.0' }, { fixed: '1.5.0' }), eco({ introduced: '1.2.0' }, { fixed: '1.3.0' })],
      '1.2.5',
      '1.3.0',
    ],
    [
      'a range that does not apply gives no fix',
      [eco({ introduced: '1.0.0' }, { fixed: '1.5.0' }), eco({ introduced: '2.0.0' }, { fixed: '2.0.1' })],
      '1.2.5',
      '1.5.0',
    ],
    [
      'fixes below the installed version are skipped',
      [eco({ introduced: '0' }, { fixed: '1.0.0' }, { introduced: '2.0.0' }, { fixed: '2.1.0' })],
      '2.0.5',
      '2.1.0',
    ],
    [
      'events out of order are sorted first',
      [eco({ fixed: '2.1.0' }, { introduced: '2.0.0' }, { fixed: '1.0.0' }, { introduced: '0' })],
      '2.0.5',
      '2.1.0',
    ],
    [
      'a later fix in the same range after a re-introduction',
      [eco({ introduced: '1.0.0' }, { fixed: '1.1.0' }, { introduced: '1.1.0' }, { fixed: '1.2.0' })],
      '1.1.0',
      '1.2.0',
    ],
    [
      'SEMVER ranges in npm',
      [{ type: 'SEMVER', events: [{ introduced: '0' }, { fixed: '1.0.0-rc.2' }] }],
      '1.0.0-rc.1',
      '1.0.0-rc.2',
    ],
    [
      'last_affected and fixed together: the fixed one is the fix',
      [eco({ introduced: '0' }, { last_affected: '1.4.0' }), eco({ introduced: '1.0.0' }, { fixed: '1.6.0' })],
      '1.4.0',
      '1.6.0',
    ],
  ])('%s', (_label, ranges, version, fix) => {
    const index = new VulnerabilityIndex([rec([npm(ranges)])]);
    expect(brief(index, purl(`pkg:npm/pkg@${version}`))).toEqual([['TEST-1', 'UNKNOWN', fix]]);
  });

  it.each([
    [
      'fixed is exclusive',
      [eco({ introduced: '0' }, { fixed: '1.0.0' })],
      { '0.9.9': true, '1.0.0': false, '1.0.1': false },
    ],
    [
      'last_affected is inclusive',
      [eco({ introduced: '1.0.0' }, { last_affected: '1.4.0' })],
      { '0.9.0': false, '1.0.0': true, '1.4.0': true, '1.4.1': false },
    ],
    [
      'introduced "0" covers everything before the first fix, pre-releases too',
      [eco({ introduced: '0' }, { fixed: '0.0.1' })],
      { '0.0.0': true, '0.0.1-alpha': true, '0.0.1': false },
    ],
    [
      'an open range (no fix) covers everything after introduced',
      [eco({ introduced: '3.0.0' })],
      { '2.9.9': false, '3.0.0': true, '99.0.0': true },
    ],
    [
      'limit bounds the range from above',
      [eco({ introduced: '0' }, { limit: '2.0.0' })],
      { '1.9.9': true, '2.0.0': false },
    ],
    ['limit "*" does not bound', [eco({ introduced: '0' }, { limit: '*' })], { '100.0.0': true }],
    [
      'introduced then fixed at one version is an empty range',
      [eco({ introduced: '1.0.0' }, { fixed: '1.0.0' })],
      { '1.0.0': false, '0.5.0': false },
    ],
  ])('%s', (_label, ranges, table) => {
    const index = new VulnerabilityIndex([rec([npm(ranges)])]);
    for (const [version, affected] of Object.entries(table)) {
      expect(index.findVulnerabilities(purl(`pkg:npm/pkg@${version}`)).length, version).toBe(affected ? 1 : 0);
    }
  });

  it('explicit versions lists match (exactly, or equal in the ecosystem order), without a fix version', () => {
    const index = new VulnerabilityIndex([
      rec([{ package: { ecosystem: 'PyPI', name: 'zope.interface' }, versions: ['4.0', 'weird-legacy-1'] }]),
    ]);
    expect(brief(index, purl('pkg:pypi/zope-interface@4.0.0'))).toEqual([['TEST-1', 'UNKNOWN', null]]);
    expect(brief(index, purl('pkg:pypi/zope.interface@4.0.1'))).toEqual([]);
  });

  it('one match per record, however many affected entries apply', () => {
    const index = new VulnerabilityIndex([
      rec([
        npm([eco({ introduced: '0' }, { fixed: '2.0.0' })]),
        npm([eco({ introduced: '1.0.0' }, { fixed: '1.5.0' })]),
      ]),
    ]);
    expect(brief(index, purl('pkg:npm/pkg@1.2.0'))).toEqual([['TEST-1', 'UNKNOWN', '1.5.0']]);
  });

  it('Maven names are group:artifact; Go names namespace/name; other purl types and purl-less components never match', () => {
    const index = new VulnerabilityIndex([
      rec([
        { package: { ecosystem: 'Maven', name: 'com.example:lib' }, ranges: [eco({ introduced: '0' })] },
        {
          package: { ecosystem: 'Go', name: 'example.com/mod/v2' },
          ranges: [{ type: 'SEMVER', events: [{ introduced: '0' }] }],
        },
        { package: { ecosystem: 'RubyGems', name: 'lib' }, ranges: [eco({ introduced: '0' })] },
      ]),
    ]);
    expect(index.findVulnerabilities(purl('pkg:maven/com.example/lib@1.0'))).toHaveLength(1);
    expect(index.findVulnerabilities(purl('pkg:maven/com.example/other@1.0'))).toHaveLength(0);
    expect(index.findVulnerabilities(purl('pkg:golang/example.com/mod/v2@v2.0.0'))).toHaveLength(1);
    expect(index.findVulnerabilities(purl('pkg:gem/lib@1.0.0'))).toHaveLength(0);
    expect(index.findVulnerabilities({ name: 'lib', version: '1.0' })).toHaveLength(0);
  });

  it('a component naming a vulnerable package without a usable version is an error, not a pass', () => {
    const index = new VulnerabilityIndex([rec([npm([eco({ introduced: '0' })])])]);
    expect(() => index.findVulnerabilities(purl('pkg:npm/pkg'))).toThrow(
      new VulnMatchError(
        'component pkg (pkg:npm/pkg) has no version, so it cannot be checked against 1 known vulnerabilities',
      ),
    );
    expect(() => index.findVulnerabilities(purl('pkg:npm/pkg@latest'))).toThrow(
      new VulnMatchError('component pkg (pkg:npm/pkg@latest): "latest" is not a valid npm version'),
    );
    // The component's own version stands in when the purl has none.
    expect(index.findVulnerabilities({ ...purl('pkg:npm/pkg'), version: '1.0.0' })).toHaveLength(1);
    // Packages with no known vulnerabilities are not checked at all.
    expect(index.findVulnerabilities(purl('pkg:npm/other@latest'))).toEqual([]);
  });

  it('record events that do not parse: an error naming the record, or a warning with invalid: "skip"', () => {
    const bad = rec([npm([eco({ introduced: '0' }, { fixed: '1.0' }), eco({ introduced: '2.0.0' })])]);
    expect(() => new VulnerabilityIndex([bad])).toThrow(
      new VersionError('TEST-1: affected[0].ranges[0] (npm ECOSYSTEM): "1.0" is not a valid npm version'),
    );
    const index = new VulnerabilityIndex([bad], { invalid: 'skip' });
    expect(index.warnings).toEqual([
      'skipped TEST-1: affected[0].ranges[0] (npm ECOSYSTEM): "1.0" is not a valid npm version',
    ]);
    expect(index.findVulnerabilities(purl('pkg:npm/pkg@0.5.0'))).toEqual([]);
    expect(index.findVulnerabilities(purl('pkg:npm/pkg@2.0.0'))).toHaveLength(1);
  });

  it('the same id twice: the most recently modified record wins; withdrawn records never match', () => {
    const older = rec([npm([eco({ introduced: '0' }, { fixed: '1.0.0' })])], { modified: '2023-01-01T00:00:00Z' });
    const newer = rec([npm([eco({ introduced: '0' }, { fixed: '2.0.0' })])], { modified: '2024-06-01T00:00:00Z' });
    for (const order of [
      [older, newer],
      [newer, older],
    ]) {
      const index = new VulnerabilityIndex(order);
      expect(index.size).toBe(1);
      expect(brief(index, purl('pkg:npm/pkg@1.5.0'))).toEqual([['TEST-1', 'UNKNOWN', '2.0.0']]);
    }
    const withdrawn = rec([npm([eco({ introduced: '0' })])], { withdrawn: '2024-02-01T00:00:00Z' });
    expect(new VulnerabilityIndex([withdrawn]).findVulnerabilities(purl('pkg:npm/pkg@1.0.0'))).toEqual([]);
  });
});

describe('severity', () => {
  const severityOf = (extra: Record<string, unknown>, affectedExtra: Record<string, unknown> = {}) => {
    const index = new VulnerabilityIndex([rec([{ ...npm([eco({ introduced: '0' })]), ...affectedExtra }], extra)]);
    return { severity: index.findVulnerabilities(purl('pkg:npm/pkg@1.0.0'))[0]!.severity, warnings: index.warnings };
  };
  const v3 = (vector: string) => ({ type: 'CVSS_V3', score: vector });

  it.each([
    ['CVSS 3.1 critical (9.8)', { severity: [v3('CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H')] }, 'CRITICAL'],
    ['CVSS 3.0 high (7.5)', { severity: [v3('CVSS:3.0/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:H')] }, 'HIGH'],
    ['CVSS medium (6.1)', { severity: [v3('CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:C/C:L/I:L/A:N')] }, 'MEDIUM'],
    ['CVSS low (3.1)', { severity: [v3('CVSS:3.1/AV:N/AC:H/PR:N/UI:R/S:U/C:L/I:N/A:N')] }, 'LOW'],
    ['CVSS 0.0 still counts, as LOW', { severity: [v3('CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:N')] }, 'LOW'],
    [
      'CVSS wins over the database word',
      { severity: [v3('CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H')], database_specific: { severity: 'LOW' } },
      'CRITICAL',
    ],
    [
      'the highest of several CVSS v3 vectors',
      {
        severity: [
          v3('CVSS:3.1/AV:L/AC:H/PR:H/UI:R/S:U/C:L/I:N/A:N'),
          v3('CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:H/I:H/A:H'),
        ],
      },
      'HIGH',
    ],
    ['GHSA MODERATE is MEDIUM', { database_specific: { severity: 'MODERATE' } }, 'MEDIUM'],
    ['GHSA LOW', { database_specific: { severity: 'LOW' } }, 'LOW'],
    ['GHSA CRITICAL', { database_specific: { severity: 'CRITICAL' } }, 'CRITICAL'],
    [
      'only CVSS v4 (not scored here) falls back to the database word',
      {
        severity: [{ type: 'CVSS_V4', score: 'CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N' }],
        database_specific: { severity: 'HIGH' },
      },
      'HIGH',
    ],
    ['nothing usable is UNKNOWN', { database_specific: { severity: 'whatever' } }, 'UNKNOWN'],
  ])('%s', (_label, extra, expected) => {
    expect(severityOf(extra).severity).toBe(expected);
  });

  it("the package's own severity wins over the record's", () => {
    expect(
      severityOf(
        { severity: [v3('CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H')] },
        { severity: [v3('CVSS:3.1/AV:N/AC:H/PR:N/UI:R/S:U/C:L/I:N/A:N')] },
      ).severity,
    ).toBe('LOW');
  });

  it('an unreadable vector is a warning and the next source decides', () => {
    expect(severityOf({ severity: [v3('CVSS:3.1/AV:N/AC:L')], database_specific: { severity: 'HIGH' } })).toEqual({
      severity: 'HIGH',
      warnings: ['TEST-1: ignored severity: "CVSS:3.1/AV:N/AC:L": missing base metrics PR, UI, S, C, I, A'],
    });
  });
});
