// Loading OSV records: a file with one record, a file with an array, folders (recursively), and errors that name
// the file and the JSON path of the problem.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { loadOsvPath, OsvError, parseOsvRecord, parseOsvText } from '../../src/policy/vulndb/osv.js';

const here = (p: string) => fileURLToPath(new URL(p, import.meta.url));

describe('loadOsvPath', () => {
  it('a file with one record', async () => {
    const records = await loadOsvPath(here('../fixtures/osv/db/npm/GHSA-35jh-r3h4-6jhm.json'));
    expect(records.map((r) => r.id)).toEqual(['GHSA-35jh-r3h4-6jhm']);
    const [r] = records;
    expect(r!.aliases).toEqual(['CVE-2021-23337']);
    expect(r!.affected.map((a) => a.package?.name)).toEqual(['lodash', 'lodash-es']);
    expect(r!.affected[0]!.ranges).toEqual([
      { type: 'ECOSYSTEM', events: [{ introduced: '0' }, { fixed: '4.17.21' }] },
    ]);
    expect(r!.database_specific?.['severity']).toBe('HIGH');
  });

  it('a file with an array of records', async () => {
    const records = await loadOsvPath(here('../fixtures/osv/db/pypi/PYSEC-django.json'));
    expect(records.map((r) => r.id)).toEqual(['PYSEC-2022-213', 'PYSEC-2021-66', 'PYSEC-2023-74']);
  });

  it('a folder, recursively, in name order, *.json only', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'osv-'));
    writeFileSync(join(dir, 'README.md'), '# not a record');
    const records = await loadOsvPath(here('../fixtures/osv/db'));
    expect(records.map((r) => r.id)).toEqual([
      'GO-2022-0236',
      'GO-2022-0229',
      'GO-2022-0968',
      'GO-2022-0193',
      'GO-2022-1144',
      'GHSA-h395-qcrw-5vmq',
      'GHSA-36p3-wjmg-h94x',
      'GHSA-jfh8-c2jp-5v3q',
      'GHSA-35jh-r3h4-6jhm',
      'GHSA-67hx-6x53-jw92',
      'PYSEC-2022-213',
      'PYSEC-2021-66',
      'PYSEC-2023-74',
    ]);
    expect(await loadOsvPath(dir)).toEqual([]);
  });

  it('errors name the file (and array index) and the JSON path', async () => {
    const invalid = here('../fixtures/osv/invalid');
    await expect(loadOsvPath(join(invalid, 'two-keys-event.json'))).rejects.toThrow(
      new OsvError(
        `${join(invalid, 'two-keys-event.json')}: $.affected[0].ranges[0].events[1]: must have exactly one of introduced, fixed, last_affected, limit (got ["fixed","introduced"])`,
      ),
    );
    await expect(loadOsvPath(join(invalid, 'folder'))).rejects.toThrow(
      new OsvError(
        `${join(invalid, 'folder/nested/bad-modified.json')}[1]: $.modified: "yesterday" is not an RFC 3339 timestamp`,
      ),
    );
    await expect(loadOsvPath(join(invalid, 'not-json.json'))).rejects.toThrow(
      new OsvError(`${join(invalid, 'not-json.json')}: not JSON: Unexpected end of JSON input`),
    );
    await expect(loadOsvPath(join(invalid, 'missing.json'))).rejects.toThrow(/ENOENT/);
  });
});

describe('parseOsvRecord: invalid records', () => {
  const base = { id: 'GHSA-x', modified: '2024-01-01T00:00:00Z' };
  const withRange = (range: unknown) => ({
    ...base,
    affected: [{ package: { ecosystem: 'npm', name: 'x' }, ranges: [range] }],
  });
  it.each([
    ['not an object', [], '$: an OSV record must be a JSON object'],
    ['no id', { modified: base.modified }, '$.id: must be a non-empty string'],
    ['no modified', { id: 'X' }, '$.modified: must be a non-empty string'],
    ['aliases not strings', { ...base, aliases: ['CVE-1', 2] }, '$.aliases[1]: must be a string'],
    ['affected not an array', { ...base, affected: {} }, '$.affected: must be an array'],
    [
      'package without name',
      { ...base, affected: [{ package: { ecosystem: 'npm' } }] },
      '$.affected[0].package.name: must be a non-empty string',
    ],
    [
      'unknown range type',
      withRange({ type: 'SEMVER2', events: [{ introduced: '0' }] }),
      '$.affected[0].ranges[0].type: must be one of SEMVER, ECOSYSTEM, GIT (got "SEMVER2")',
    ],
    [
      'GIT range without repo',
      withRange({ type: 'GIT', events: [{ introduced: '0' }] }),
      '$.affected[0].ranges[0].repo: a GIT range needs a repo',
    ],
    [
      'empty events',
      withRange({ type: 'ECOSYSTEM', events: [] }),
      '$.affected[0].ranges[0].events: must be a non-empty array',
    ],
    [
      'no introduced event',
      withRange({ type: 'ECOSYSTEM', events: [{ fixed: '1.0.0' }] }),
      '$.affected[0].ranges[0].events: needs at least one "introduced" event',
    ],
    [
      'unknown event',
      withRange({ type: 'ECOSYSTEM', events: [{ introduced: '0' }, { patched: '1.0.0' }] }),
      '$.affected[0].ranges[0].events[1]: must have exactly one of introduced, fixed, last_affected, limit (got ["patched"])',
    ],
    [
      'event version not a string',
      withRange({ type: 'ECOSYSTEM', events: [{ introduced: 0 }] }),
      '$.affected[0].ranges[0].events[0].introduced: must be a non-empty string',
    ],
    [
      'severity without score',
      { ...base, severity: [{ type: 'CVSS_V3' }] },
      '$.severity[0].score: must be a non-empty string',
    ],
    ['versions not strings', { ...base, affected: [{ versions: [1] }] }, '$.affected[0].versions[0]: must be a string'],
  ])('%s', (_label, value, message) => {
    expect(() => parseOsvRecord(value, 'db/x.json')).toThrow(new OsvError(`db/x.json: ${message}`));
  });

  it('minimal records get empty aliases and affected lists', () => {
    expect(parseOsvText(JSON.stringify(base), 'x.json')).toEqual([{ ...base, aliases: [], affected: [] }]);
  });
});
