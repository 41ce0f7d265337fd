// SBOM documents as the policy engine sees them: a flat list of components with their package URLs.
// Accepts SPDX 2.2/2.3 JSON and CycloneDX 1.4-1.6 JSON; anything else is rejected with a reason the caller can act on.
import { PackageURL } from 'packageurl-js';

export type PackageUrl = PackageURL;

export interface SbomComponent {
  name: string;
  version?: string;
  purl?: PackageUrl;
}

export interface Sbom {
  format: 'spdx' | 'cyclonedx';
  /** "2.2" / "2.3" for SPDX (without the "SPDX-" prefix), "1.4" / "1.5" / "1.6" for CycloneDX. */
  specVersion: string;
  components: SbomComponent[];
}

export class SbomError extends Error {
  constructor(reason: string) {
    super(reason);
    this.name = 'SbomError';
  }
}

export const MAX_SBOM_COMPONENTS = 50_000;
export const SPDX_VERSIONS = ['SPDX-2.2', 'SPDX-2.3'] as const;
export const CYCLONEDX_VERSIONS = ['1.4', '1.5', '1.6'] as const;

type Json = Record<string, unknown>;

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

export function parseSbom(text: string): Sbom {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    throw new SbomError(`not JSON: ${(err as Error).message}`);
  }
  if (!isObject(doc)) throw new SbomError('not an SBOM: the document is not a JSON object');
  if ('spdxVersion' in doc) return parseSpdx(doc);
  if ('bomFormat' in doc) return parseCycloneDx(doc);
  throw new SbomError(
    'not an SBOM: expected an SPDX 2.x document ("spdxVersion") or a CycloneDX document ("bomFormat": "CycloneDX")',
  );
}

function parseSpdx(doc: Json): Sbom {
  const version = doc['spdxVersion'];
  if (typeof version !== 'string') throw new SbomError('SPDX: spdxVersion must be a string');
  if (!(SPDX_VERSIONS as readonly string[]).includes(version)) {
    throw new SbomError(`SPDX: unsupported spdxVersion "${version}" (supported: ${SPDX_VERSIONS.join(', ')})`);
  }
  const packages = doc['packages'] ?? [];
  if (!Array.isArray(packages)) throw new SbomError('SPDX: packages must be an array');
  if (packages.length > MAX_SBOM_COMPONENTS) throw tooMany();
  const components = packages.map((pkg: unknown, i): SbomComponent => {
    const where = `packages[${i}]`;
    if (!isObject(pkg)) throw new SbomError(`SPDX: ${where} must be an object`);
    const name = requireString(pkg, 'name', where, 'SPDX');
    const version = optionalString(pkg, 'versionInfo', where, 'SPDX');
    const refs = pkg['externalRefs'] ?? [];
    if (!Array.isArray(refs)) throw new SbomError(`SPDX: ${where}.externalRefs must be an array`);
    let purl: PackageUrl | undefined;
    for (const [j, ref] of refs.entries()) {
      if (!isObject(ref)) throw new SbomError(`SPDX: ${where}.externalRefs[${j}] must be an object`);
      if (ref['referenceType'] !== 'purl') continue;
      const locator = requireString(ref, 'referenceLocator', `${where}.externalRefs[${j}]`, 'SPDX');
      // The first purl identifies the package; further ones (rare) are aliases.
      purl ??= parsePurl(locator, name, version, `${where}.externalRefs[${j}].referenceLocator`, 'SPDX');
    }
    return component(name, version, purl);
  });
  return { format: 'spdx', specVersion: version.slice('SPDX-'.length), components };
}

function parseCycloneDx(doc: Json): Sbom {
  if (doc['bomFormat'] !== 'CycloneDX') {
    throw new SbomError(`not an SBOM: bomFormat is ${JSON.stringify(doc['bomFormat'])}, expected "CycloneDX"`);
  }
  const version = doc['specVersion'];
  if (typeof version !== 'string') throw new SbomError('CycloneDX: specVersion must be a string');
  if (!(CYCLONEDX_VERSIONS as readonly string[]).includes(version)) {
    throw new SbomError(
      `CycloneDX: unsupported specVersion "${version}" (supported: ${CYCLONEDX_VERSIONS.join(', ')})`,
    );
  }
  const components: SbomComponent[] = [];
  // Depth-first, in document order (a component, then its nested components, then its next sibling), with an
  // explicit stack: nesting depth is the document's choice, not ours.
  const stack: Array<{ list: unknown[]; next: number; where: string }> = [
    { list: arrayAt(doc['components'] ?? [], 'components'), next: 0, where: 'components' },
  ];
  while (stack.length > 0) {
    const frame = stack[stack.length - 1]!;
    if (frame.next >= frame.list.length) {
      stack.pop();
      continue;
    }
    const i = frame.next++;
    const item = frame.list[i];
    const at = `${frame.where}[${i}]`;
    if (!isObject(item)) throw new SbomError(`CycloneDX: ${at} must be an object`);
    const name = requireString(item, 'name', at, 'CycloneDX');
    const version = optionalString(item, 'version', at, 'CycloneDX');
    const purlText = optionalString(item, 'purl', at, 'CycloneDX');
    const purl = purlText === undefined ? undefined : parsePurl(purlText, name, version, `${at}.purl`, 'CycloneDX');
    components.push(component(name, version, purl));
    if (components.length > MAX_SBOM_COMPONENTS) throw tooMany();
    if (item['components'] !== undefined) {
      const where = `${at}.components`;
      stack.push({ list: arrayAt(item['components'], where), next: 0, where });
    }
  }
  return { format: 'cyclonedx', specVersion: version, components };
}

function arrayAt(v: unknown, where: string): unknown[] {
  if (!Array.isArray(v)) throw new SbomError(`CycloneDX: ${where} must be an array`);
  return v;
}

function component(name: string, version: string | undefined, purl: PackageUrl | undefined): SbomComponent {
  const c: SbomComponent = { name };
  if (version !== undefined) c.version = version;
  if (purl !== undefined) c.purl = purl;
  return c;
}

function parsePurl(text: string, name: string, version: string | undefined, where: string, format: string) {
  try {
    return PackageURL.fromString(text);
  } catch (err) {
    const label = version === undefined ? name : `${name}@${version}`;
    throw new SbomError(`${format}: component "${label}" (${where}) has an invalid purl "${text}": ${purlReason(err)}`);
  }
}

function purlReason(err: unknown): string {
  // packageurl-js 2.0.1's golang validator refers to an undefined `throws` when a "v" version is not SemVer
  // (e.g. v17.03.2-ce): the ReferenceError stands for the message the library means to give.
  if (err instanceof ReferenceError && err.message === 'throws is not defined') {
    return 'Invalid purl: golang "version" component starting with a "v" must be followed by a valid semver version';
  }
  return (err as Error).message;
}

function requireString(obj: Json, key: string, where: string, format: string): string {
  const v = obj[key];
  if (typeof v !== 'string' || v === '') throw new SbomError(`${format}: ${where}.${key} must be a non-empty string`);
  return v;
}

function optionalString(obj: Json, key: string, where: string, format: string): string | undefined {
  const v = obj[key];
  if (v === undefined) return undefined;
  if (typeof v !== 'string') throw new SbomError(`${format}: ${where}.${key} must be a string`);
  return v;
}

function tooMany(): SbomError {
  return new SbomError(`too many components: more than ${MAX_SBOM_COMPONENTS}`);
}
