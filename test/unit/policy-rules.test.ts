// The rule engine, table-driven: every rule alone and in combination, in the documented precedence
// (deny > pending > allow), with per-tenant overrides and exceptions. SBOM scanning is given as a table of
// matches here; the real SBOM/OSV scanner has its own tests.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { packagePath } from '../../src/paths.js';
import type { PolicyInput } from '../../src/policy/policy.js';
import { PolicyFileError, parsePolicyDocument } from '../../src/policy/policy-file.js';
import {
  canonicalInputsText,
  inputsDigest,
  REMEMBERED_DIGESTS,
  RULES,
  RulesPolicyEngine,
  rememberedInputDigests,
  SbomRejected,
  type SbomScanner,
  type VulnerabilityMatch,
} from '../../src/policy/rules-engine.js';

const base: PolicyInput = {
  tenantId: 'acme',
  keyId: 'k',
  keySpec: 'RSA_2048',
  algorithm: 'RSASSA_PKCS1_V1_5_SHA_256',
  callerId: 'c',
};

const lodash: VulnerabilityMatch = {
  vulnId: 'GHSA-35jh-r3h4-6jhm',
  severity: 'HIGH',
  fixVersion: '4.17.21',
  component: 'lodash@4.17.20',
};
const lowOne: VulnerabilityMatch = { vulnId: 'GHSA-low', severity: 'LOW', component: 'left-pad@1.0.0' };
const unknownOne: VulnerabilityMatch = { vulnId: 'OSV-unknown', severity: 'UNKNOWN', component: 'x@1' };
const scannerOf = (matches: VulnerabilityMatch[]): SbomScanner => ({ scan: () => matches });

const POLICY = `
version: 1
rules:
  projects: { deny: [legacy] }
  artifactTypes: { allow: [jar, exe, container] }
  environments:
    deny: [dev-laptop]
    requireApproval: [production]
    attested: [enclave]
  sbom: { denySeverity: MEDIUM }
tenants:
  strict:
    projects: { allow: [payments] }
    sbom: { required: true, denySeverity: LOW }
`;

describe('rules, one by one and combined', () => {
  const engine = (matches: VulnerabilityMatch[] = []) =>
    new RulesPolicyEngine(parsePolicyDocument(POLICY, 'test'), scannerOf(matches));
  const cases: Array<[string, Partial<PolicyInput>, VulnerabilityMatch[], string, string]> = [
    ['nothing special', { artifactType: 'jar' }, [], 'allow', 'default-allow'],
    [
      'an inactive identity',
      { artifactType: 'jar', identityStatus: 'inactive', identityId: 'bob' },
      [],
      'deny',
      'identity-inactive',
    ],
    ['an active identity', { artifactType: 'jar', identityStatus: 'active' }, [], 'allow', 'default-allow'],
    ['a denied project', { artifactType: 'jar', project: 'legacy' }, [], 'deny', 'project-lists'],
    ['an artifact type not allowed', { artifactType: 'zip' }, [], 'deny', 'artifact-type-lists'],
    ['no artifact type where a list is set', {}, [], 'deny', 'artifact-type-lists'],
    ['a denied environment', { artifactType: 'jar', environment: 'dev-laptop' }, [], 'deny', 'environment-lists'],
    ['production', { artifactType: 'jar', environment: 'production' }, [], 'pending_approval', 'environment-approval'],
    [
      'require_tee elsewhere',
      { artifactType: 'jar', requireTee: true, environment: 'ci' },
      [],
      'pending_security_review',
      'tee-security-review',
    ],
    [
      'require_tee in an attested env',
      { artifactType: 'jar', requireTee: true, environment: 'enclave' },
      [],
      'allow',
      'default-allow',
    ],
    ['a HIGH vulnerability', { artifactType: 'jar', sbom: '{}' }, [lodash], 'deny', 'sbom-vulnerable'],
    ['a LOW one under a MEDIUM threshold', { artifactType: 'jar', sbom: '{}' }, [lowOne], 'allow', 'default-allow'],
    [
      'an UNKNOWN severity (denies by default)',
      { artifactType: 'jar', sbom: '{}' },
      [unknownOne],
      'deny',
      'sbom-vulnerable',
    ],
    [
      'deny beats pending',
      { artifactType: 'jar', environment: 'production', sbom: '{}' },
      [lodash],
      'deny',
      'sbom-vulnerable',
    ],
    [
      'the first deny in order wins',
      { artifactType: 'zip', project: 'legacy', identityStatus: 'inactive' },
      [],
      'deny',
      'identity-inactive',
    ],
    [
      'security review before approval',
      { artifactType: 'jar', environment: 'production', requireTee: true },
      [],
      'pending_security_review',
      'tee-security-review',
    ],
    [
      'tenant override: project not on its allow list',
      { tenantId: 'strict', artifactType: 'jar', project: 'web', sbom: '{}' },
      [],
      'deny',
      'project-lists',
    ],
    [
      'tenant override: SBOM required',
      { tenantId: 'strict', artifactType: 'jar', project: 'payments' },
      [],
      'deny',
      'sbom-required',
    ],
    [
      'tenant override: LOW denies there',
      { tenantId: 'strict', artifactType: 'jar', project: 'payments', sbom: '{}' },
      [lowOne],
      'deny',
      'sbom-vulnerable',
    ],
    [
      'tenant override keeps other global sections',
      { tenantId: 'strict', artifactType: 'zip', project: 'payments', sbom: '{}' },
      [],
      'deny',
      'artifact-type-lists',
    ],
  ];
  it.each(cases)('%s -> %s', async (_name, input, matches, outcome, rule) => {
    const decision = await engine(matches).evaluate({ ...base, ...input });
    expect(decision.outcome).toBe(outcome);
    expect(decision.rule).toBe(rule);
    expect(decision.inputsDigest).toMatch(/^sha256:[0-9a-f]{64}$/);
  });

  it('names the vulnerability, the component and the fix in a denial', async () => {
    const d = await engine([lodash]).evaluate({ ...base, artifactType: 'jar', sbom: '{}' });
    expect(d).toMatchObject({ outcome: 'deny', vulnId: 'GHSA-35jh-r3h4-6jhm', fixVersion: '4.17.21' });
    expect(d.reason).toBe('lodash@4.17.20 is affected by GHSA-35jh-r3h4-6jhm (HIGH); fixed in 4.17.21');
  });

  it('lists every pending stage in order', async () => {
    const d = await engine().evaluate({ ...base, artifactType: 'jar', environment: 'production', requireTee: true });
    expect(d).toMatchObject({
      outcome: 'pending_security_review',
      stages: ['pending_security_review', 'pending_approval'],
    });
  });
});

describe('exceptions', () => {
  const engine = new RulesPolicyEngine(parsePolicyDocument('version: 1\n', 't'), scannerOf([lodash]));
  const exc = { id: 'e1', vulnId: lodash.vulnId };
  it.each([
    ['an exception for the vulnerability', [exc], {}, 'allow'],
    ['an exception for another vulnerability', [{ ...exc, vulnId: 'GHSA-other' }], {}, 'deny'],
    ['an exception scoped to the project', [{ ...exc, project: 'payments' }], { project: 'payments' }, 'allow'],
    ['an exception scoped to another project', [{ ...exc, project: 'web' }], { project: 'payments' }, 'deny'],
    ['an exception scoped to the artifact type', [{ ...exc, artifactType: 'jar' }], { artifactType: 'exe' }, 'deny'],
  ])('%s -> %s', async (_n, exceptions, extra, outcome) => {
    const d = await engine.evaluate({ ...base, sbom: '{}', exceptions, ...extra });
    expect(d.outcome).toBe(outcome);
    if (outcome === 'allow') expect(d.reason).toContain('exceptions applied: GHSA-35jh-r3h4-6jhm (exception e1)');
  });
});

describe('SBOM problems and digests', () => {
  it('turns a rejected SBOM into a 400 invalid_sbom naming the field', async () => {
    const engine = new RulesPolicyEngine(parsePolicyDocument('version: 1\n', 't'), {
      scan() {
        throw new SbomRejected('not an SPDX or CycloneDX document');
      },
    });
    await expect(engine.evaluate({ ...base, sbom: '{"x":1}' })).rejects.toMatchObject({
      code: 'invalid_sbom',
      message: 'body.sbom: not an SPDX or CycloneDX document',
    });
  });

  it('digests inputs canonically: key order does not matter, any value does', () => {
    const a = inputsDigest({ ...base, project: 'p', environment: 'e' });
    const b = inputsDigest({ environment: 'e', project: 'p', ...base });
    expect(a).toBe(b);
    expect(inputsDigest({ ...base, project: 'q', environment: 'e' })).not.toBe(a);
  });

  it("builds the inputs' canonical text as JSON.stringify with the sorted keys as replacer did", () => {
    const replacer = (input: PolicyInput) => {
      const { exceptions: _e, ...rest } = input;
      return JSON.stringify(rest, Object.keys(rest).sort());
    };
    const inputs: PolicyInput[] = [
      base,
      { ...base, project: 'p "quoted" \\ ünïcode \u2028', environment: undefined, requireTee: true },
      { ...base, exceptions: [{ id: 'x', vulnId: 'CVE-1' }], identityStatus: 'active' },
      { ...base, workloadIssuer: 'https://token.actions.githubusercontent.com', workloadSubject: 'repo:a/b' },
      // A value that is not a string, number or boolean: the generic form, nested keys filtered as before.
      { ...base, ...({ nested: { tenantId: 't', other: 1 }, list: [1, 'a'] } as object) },
    ];
    for (const input of inputs) expect(canonicalInputsText(input)).toBe(replacer(input));
  });

  it('remembers recent digests by their inputs: a changed input gets its own, the memory stays bounded', () => {
    const fresh = (input: PolicyInput) => {
      const { exceptions: _e, ...rest } = input;
      const text = JSON.stringify(rest, Object.keys(rest).sort());
      return `sha256:${createHash('sha256').update(text).digest('hex')}`;
    };
    const first = { ...base, project: 'p' };
    expect(inputsDigest(first)).toBe(fresh(first));
    expect(inputsDigest(first)).toBe(fresh(first)); // remembered
    // Each input that changes after the first request (a rotated key, a changed context) gets the digest of what
    // it is now, never the remembered one.
    for (const changed of [
      { ...first, keyId: 'k2' },
      { ...first, project: 'q' },
      { ...first, environment: 'prod' },
      { ...first, callerId: 'other' },
    ]) {
      expect(inputsDigest(changed)).toBe(fresh(changed));
      expect(inputsDigest(changed)).not.toBe(inputsDigest(first));
    }
    for (let i = 0; i < REMEMBERED_DIGESTS + 10; i++) inputsDigest({ ...base, project: `p${i}` });
    expect(rememberedInputDigests()).toBeLessThanOrEqual(REMEMBERED_DIGESTS);
    const sbom = { ...base, sbom: 'x'.repeat(5000) };
    const before = rememberedInputDigests();
    expect(inputsDigest(sbom)).toBe(fresh(sbom));
    expect(rememberedInputDigests()).toBe(before); // long texts (an SBOM) are not kept
  });

  it('docs/policy.md lists the rules in RULES order', () => {
    const doc = readFileSync(packagePath('docs', 'policy.md'), 'utf8');
    const listed = [...doc.matchAll(/^\| (\d+) \| ([a-z-]+) \|/gm)].map((m) => m[2]);
    expect(listed).toEqual(RULES.map((r) => r.id));
  });

  it('every rule has an id and a description (docs/policy.md lists them)', () => {
    for (const r of RULES) {
      expect(r.id).toMatch(/^[a-z-]+$/);
      expect(r.description.length).toBeGreaterThan(20);
    }
  });
});

describe('policy documents', () => {
  it.each([
    ['version: 2\n', /\/version/],
    ['version: 1\nrules:\n  projets: {}\n', /\/rules/],
    ['version: 1\nrules:\n  projects: { allow: [a], deny: [a] }\n', /projects: a both allowed and denied/],
    ['version: 1\nrules:\n  sbom: { denySeverity: SEVERE }\n', /\/rules\/sbom\/denySeverity/],
    ['version: 1\ntenants:\n  "bad/tenant": {}\n', /tenants/],
    ['version: [\n', /not valid YAML/],
    ['version: 1\nrules:\n  workload: { require: { branch: main } }\n', /workload\/require\/branch: not a CI fact/],
    [
      'version: 1\nrules:\n  workload: { require: { ref: "**" } }\n',
      /workload\/require\/ref: the pattern has only wildcards/,
    ],
    ['version: 1\nrules:\n  workload: { require: { ref: "" } }\n', /workload\/require\/ref: the pattern is empty/],
    ['version: 1\nrules:\n  velocity: { perRun: { max: 0, windowSeconds: 60 } }\n', /\/rules\/velocity\/perRun\/max/],
    ['version: 1\nrules:\n  velocity: { perTenant: { max: 5, windowSeconds: 604801 } }\n', /windowSeconds/],
  ])('rejects %j with the path and what is wrong', (text, pattern) => {
    expect(() => parsePolicyDocument(text, 'p.yaml')).toThrow(PolicyFileError);
    expect(() => parsePolicyDocument(text, 'p.yaml')).toThrow(pattern);
    expect(() => parsePolicyDocument(text, 'p.yaml')).toThrow(/^p\.yaml/);
  });
});
