// The engine seam end to end: SBOM text in, the engine's VulnerabilityMatch list out; unusable SBOMs rejected.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { SbomRejected } from '../../src/policy/rules-engine.js';
import { VulnerabilityIndex } from '../../src/policy/vulndb/match.js';
import { loadOsvPath } from '../../src/policy/vulndb/osv.js';
import { OsvSbomScanner } from '../../src/policy/vulndb/sbom-scanner.js';

const here = (p: string) => fileURLToPath(new URL(p, import.meta.url));
let scanner: OsvSbomScanner;
beforeAll(async () => {
  scanner = new OsvSbomScanner(new VulnerabilityIndex(await loadOsvPath(here('../fixtures/osv/db'))));
});

describe('OsvSbomScanner', () => {
  it('reports every finding as the engine expects it', () => {
    expect(scanner.scan(readFileSync(here('../fixtures/sbom/spdx-2.3-webapp.spdx.json'), 'utf8'))).toEqual([
      { vulnId: 'GHSA-35jh-r3h4-6jhm', severity: 'HIGH', fixVersion: '4.17.21', component: 'pkg:npm/lodash@4.17.20' },
      {
        vulnId: 'GHSA-67hx-6x53-jw92',
        severity: 'CRITICAL',
        fixVersion: '7.23.2',
        component: 'pkg:npm/@babel/traverse@7.22.5',
      },
      { vulnId: 'PYSEC-2022-213', severity: 'UNKNOWN', fixVersion: '3.2.14', component: 'pkg:pypi/django@3.2.12' },
      {
        vulnId: 'GHSA-jfh8-c2jp-5v3q',
        severity: 'CRITICAL',
        fixVersion: '2.15.0',
        component: 'pkg:maven/org.apache.logging.log4j/log4j-core@2.14.1',
      },
    ]);
  });

  it('no fix version, no field', () => {
    const sbom = JSON.stringify({
      bomFormat: 'CycloneDX',
      specVersion: '1.6',
      components: [{ name: 'jinja2', version: '2.11.2', purl: 'pkg:pypi/jinja2@2.11.2' }],
    });
    expect(scanner.scan(sbom)).toEqual([
      { vulnId: 'PYSEC-2021-66', severity: 'MEDIUM', component: 'pkg:pypi/jinja2@2.11.2' },
    ]);
  });

  it.each([
    ['not JSON', 'nope', /^not JSON: /],
    [
      'unversioned vulnerable package',
      JSON.stringify({
        spdxVersion: 'SPDX-2.3',
        packages: [{ name: 'lodash', externalRefs: [{ referenceType: 'purl', referenceLocator: 'pkg:npm/lodash' }] }],
      }),
      /^component lodash \(pkg:npm\/lodash\) has no version, so it cannot be checked against 1 known vulnerabilities$/,
    ],
  ])('rejects: %s', (_label, text, message) => {
    expect(() => scanner.scan(text)).toThrow(SbomRejected);
    expect(() => scanner.scan(text)).toThrow(message);
  });
});
