// SBOM parsing: real-looking SPDX 2.3 and CycloneDX 1.5/1.6 documents, and every way a document is rejected.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { MAX_SBOM_COMPONENTS, parseSbom, type Sbom, SbomError } from '../../src/policy/sbom/parse-sbom.js';

const fixture = (name: string) =>
  readFileSync(fileURLToPath(new URL(`../fixtures/sbom/${name}`, import.meta.url)), 'utf8');

/** name@version -> purl string, the shape the tests compare. */
const summary = (sbom: Sbom) =>
  sbom.components.map((c) => [`${c.name}@${c.version ?? ''}`, c.purl?.toString() ?? null]);

describe('parseSbom: accepted documents', () => {
  it('SPDX 2.3: every package, purl from externalRefs, versionInfo as version', () => {
    const sbom = parseSbom(fixture('spdx-2.3-webapp.spdx.json'));
    expect(sbom.format).toBe('spdx');
    expect(sbom.specVersion).toBe('2.3');
    expect(summary(sbom)).toEqual([
      ['acme-webapp@2.4.0', null],
      ['lodash@4.17.20', 'pkg:npm/lodash@4.17.20'],
      ['@babel/traverse@7.22.5', 'pkg:npm/%40babel/traverse@7.22.5'],
      ['Django@3.2.12', 'pkg:pypi/django@3.2.12'],
      ['log4j-core@2.14.1', 'pkg:maven/org.apache.logging.log4j/log4j-core@2.14.1?type=jar'],
      ['zlib@1.2.13', null],
    ]);
    const babel = sbom.components[2]!.purl!;
    expect([babel.type, babel.namespace, babel.name, babel.version]).toEqual(['npm', '@babel', 'traverse', '7.22.5']);
  });

  it('CycloneDX 1.5: nested components in document order (depth first); metadata.component is not a component', () => {
    const sbom = parseSbom(fixture('cyclonedx-1.5-service.cdx.json'));
    expect(sbom.format).toBe('cyclonedx');
    expect(sbom.specVersion).toBe('1.5');
    expect(summary(sbom)).toEqual([
      ['spring-webmvc@5.3.17', 'pkg:maven/org.springframework/spring-webmvc@5.3.17?type=jar'],
      ['spring-beans@5.3.17', 'pkg:maven/org.springframework/spring-beans@5.3.17?type=jar'],
      ['spring-core@5.3.17', 'pkg:maven/org.springframework/spring-core@5.3.17?type=jar'],
      ['requests@2.31.0', 'pkg:pypi/requests@2.31.0'],
      ['golang.org/x/net@v0.7.0', 'pkg:golang/golang.org/x/net@v0.7.0'],
      ['/etc/ssl/openssl.cnf@', null],
    ]);
    expect(sbom.components[5]).toEqual({ name: '/etc/ssl/openssl.cnf' });
  });

  it('CycloneDX 1.6: Go pseudo-versions and +incompatible survive purl decoding', () => {
    const sbom = parseSbom(fixture('cyclonedx-1.6-cli.cdx.json'));
    expect(sbom.specVersion).toBe('1.6');
    expect(sbom.components.map((c) => [c.purl?.namespace, c.purl?.name, c.purl?.version])).toEqual([
      ['github.com/gin-gonic', 'gin', 'v1.6.0'],
      ['golang.org/x', 'crypto', 'v0.0.0-20210921155107-089bfa567519'],
      ['github.com/docker', 'docker', 'v20.10.7+incompatible'],
      [undefined, 'jinja2', '2.11.2'],
    ]);
  });

  it.each([
    ['SPDX-2.2', { spdxVersion: 'SPDX-2.2', packages: [] }, 'spdx', '2.2'],
    ['SPDX without packages', { spdxVersion: 'SPDX-2.3' }, 'spdx', '2.3'],
    ['CycloneDX 1.4', { bomFormat: 'CycloneDX', specVersion: '1.4', components: [] }, 'cyclonedx', '1.4'],
    ['CycloneDX without components', { bomFormat: 'CycloneDX', specVersion: '1.6' }, 'cyclonedx', '1.6'],
  ])('%s', (_label, doc, format, specVersion) => {
    expect(parseSbom(JSON.stringify(doc))).toEqual({ format, specVersion, components: [] });
  });

  it('SPDX: a package with two purls keeps the first', () => {
    const doc = {
      spdxVersion: 'SPDX-2.3',
      packages: [
        {
          name: 'x',
          externalRefs: [
            { referenceType: 'purl', referenceLocator: 'pkg:npm/x@1.0.0' },
            { referenceType: 'purl', referenceLocator: 'pkg:npm/y@2.0.0' },
          ],
        },
      ],
    };
    expect(parseSbom(JSON.stringify(doc)).components[0]!.purl!.toString()).toBe('pkg:npm/x@1.0.0');
  });

  it('deeply nested CycloneDX components do not overflow the stack', () => {
    // Built as text: JSON.stringify would itself overflow at this depth; JSON.parse does not.
    const depth = 3000;
    const leaf = '{"name":"leaf","version":"1.0.0","purl":"pkg:npm/leaf@1.0.0"}';
    let inner = leaf;
    for (let i = 0; i < depth; i++) inner = `{"name":"n${i}","components":[${inner}]}`;
    const sbom = parseSbom(`{"bomFormat":"CycloneDX","specVersion":"1.5","components":[${inner}]}`);
    expect(sbom.components).toHaveLength(3001);
    expect(sbom.components.at(-1)!.name).toBe('leaf');
  });
});

describe('parseSbom: rejected documents, exact reasons', () => {
  const cdx = (components: unknown) => JSON.stringify({ bomFormat: 'CycloneDX', specVersion: '1.5', components });
  const spdx = (packages: unknown) => JSON.stringify({ spdxVersion: 'SPDX-2.3', packages });

  it.each([
    ['not JSON', '{"spdxVersion": ', 'not JSON: Unexpected end of JSON input'],
    ['XML CycloneDX', '<bom xmlns="http://cyclonedx.org/schema/bom/1.5"/>', /^not JSON: Unexpected token/],
    ['a JSON array', '[]', 'not an SBOM: the document is not a JSON object'],
    ['a JSON string', '"SPDX-2.3"', 'not an SBOM: the document is not a JSON object'],
    [
      'JSON but neither format',
      '{"name":"package.json","dependencies":{}}',
      'not an SBOM: expected an SPDX 2.x document ("spdxVersion") or a CycloneDX document ("bomFormat": "CycloneDX")',
    ],
    [
      'wrong bomFormat',
      '{"bomFormat":"SPDX","specVersion":"1.5"}',
      'not an SBOM: bomFormat is "SPDX", expected "CycloneDX"',
    ],
    [
      'SPDX 2.1',
      '{"spdxVersion":"SPDX-2.1","packages":[]}',
      'SPDX: unsupported spdxVersion "SPDX-2.1" (supported: SPDX-2.2, SPDX-2.3)',
    ],
    ['SPDX version not a string', '{"spdxVersion":2.3}', 'SPDX: spdxVersion must be a string'],
    [
      'CycloneDX 1.3',
      '{"bomFormat":"CycloneDX","specVersion":"1.3"}',
      'CycloneDX: unsupported specVersion "1.3" (supported: 1.4, 1.5, 1.6)',
    ],
    ['CycloneDX version missing', '{"bomFormat":"CycloneDX"}', 'CycloneDX: specVersion must be a string'],
    ['SPDX packages not an array', spdx({}), 'SPDX: packages must be an array'],
    ['SPDX package without name', spdx([{ versionInfo: '1' }]), 'SPDX: packages[0].name must be a non-empty string'],
    [
      'SPDX versionInfo a number',
      spdx([{ name: 'a', versionInfo: 1 }]),
      'SPDX: packages[0].versionInfo must be a string',
    ],
    [
      'SPDX invalid purl',
      spdx([
        { name: 'ok', externalRefs: [{ referenceType: 'purl', referenceLocator: 'pkg:npm/ok@1.0.0' }] },
        {
          name: 'lodash',
          versionInfo: '4.17.20',
          externalRefs: [{ referenceType: 'purl', referenceLocator: 'lodash@4.17.20' }],
        },
      ]),
      'SPDX: component "lodash@4.17.20" (packages[1].externalRefs[0].referenceLocator) has an invalid purl "lodash@4.17.20": Invalid purl: missing required "pkg" scheme component',
    ],
    [
      'CycloneDX invalid nested purl',
      cdx([{ name: 'app', components: [{ name: 'commons-text', purl: 'pkg:maven/commons-text@1.9' }] }]),
      'CycloneDX: component "commons-text" (components[0].components[0].purl) has an invalid purl "pkg:maven/commons-text@1.9": Invalid purl: maven requires a "namespace" component',
    ],
    [
      'Go purl whose v-version is not SemVer',
      cdx([{ name: 'docker', purl: 'pkg:golang/github.com/docker/docker@v17.03.2-ce' }]),
      'CycloneDX: component "docker" (components[0].purl) has an invalid purl "pkg:golang/github.com/docker/docker@v17.03.2-ce": Invalid purl: golang "version" component starting with a "v" must be followed by a valid semver version',
    ],
    ['CycloneDX components not an array', cdx({ name: 'x' }), 'CycloneDX: components must be an array'],
    [
      'CycloneDX nested not an array',
      cdx([{ name: 'x', components: 'y' }]),
      'CycloneDX: components[0].components must be an array',
    ],
    ['CycloneDX component not an object', cdx(['lodash']), 'CycloneDX: components[0] must be an object'],
    [
      'CycloneDX component without name',
      cdx([{ version: '1' }]),
      'CycloneDX: components[0].name must be a non-empty string',
    ],
    ['CycloneDX purl not a string', cdx([{ name: 'a', purl: {} }]), 'CycloneDX: components[0].purl must be a string'],
  ])('%s', (_label, text, reason) => {
    let caught: unknown;
    try {
      parseSbom(text);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(SbomError);
    if (typeof reason === 'string') expect((caught as Error).message).toBe(reason);
    else expect((caught as Error).message).toMatch(reason);
  });

  it(`accepts ${MAX_SBOM_COMPONENTS} components and rejects one more (SPDX and nested CycloneDX)`, () => {
    const pkgs = (n: number) => Array.from({ length: n }, (_, i) => ({ name: `p${i}` }));
    expect(parseSbom(spdx(pkgs(MAX_SBOM_COMPONENTS))).components).toHaveLength(MAX_SBOM_COMPONENTS);
    expect(() => parseSbom(spdx(pkgs(MAX_SBOM_COMPONENTS + 1)))).toThrow('too many components: more than 50000');
    const nested = [{ name: 'root', components: pkgs(MAX_SBOM_COMPONENTS) }];
    expect(() => parseSbom(cdx(nested))).toThrow('too many components: more than 50000');
    expect(parseSbom(cdx([{ name: 'root', components: pkgs(MAX_SBOM_COMPONENTS - 1) }])).components).toHaveLength(
      MAX_SBOM_COMPONENTS,
    );
  });
});
