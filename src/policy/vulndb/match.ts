// Which known vulnerabilities affect an SBOM component: OSV records indexed by (ecosystem, package name), ranges
// evaluated with the OSV semantics (https://ossf.github.io/osv-schema/#evaluation) in the ecosystem's version order.
import type { PackageUrl, SbomComponent } from '../sbom/parse-sbom.js';
import { CvssError, cvss3BaseScore, cvssRating } from './cvss.js';
import type { OsvAffected, OsvEvent, OsvRecord, OsvSeverity } from './osv.js';
import { compareSemver, compareVersions, type Ecosystem, isEcosystem, VersionError } from './versions.js';

export type MatchSeverity = 'LOW' | 'MEDIUM' | 'HIGH' | 'CRITICAL' | 'UNKNOWN';

export interface VulnerabilityMatch {
  vulnId: string;
  aliases: string[];
  summary: string;
  severity: MatchSeverity;
  /** The lowest `fixed` version above the installed one, over every range that affects it. */
  fixVersion?: string;
  component: SbomComponent;
}

/** A component that names a package with known vulnerabilities but cannot be checked (no or unparseable version). */
export class VulnMatchError extends Error {
  constructor(reason: string) {
    super(reason);
    this.name = 'VulnMatchError';
  }
}

export interface PackageKey {
  ecosystem: Ecosystem;
  name: string;
}

const PURL_ECOSYSTEMS: Record<string, Ecosystem> = { npm: 'npm', pypi: 'PyPI', maven: 'Maven', golang: 'Go' };

/** The OSV package a purl names, or undefined for purl types this index does not cover. */
export function purlToPackage(purl: PackageUrl): PackageKey | undefined {
  const ecosystem = PURL_ECOSYSTEMS[purl.type];
  if (ecosystem === undefined) return undefined;
  if (ecosystem === 'Maven') {
    return purl.namespace === undefined ? undefined : { ecosystem, name: `${purl.namespace}:${purl.name}` };
  }
  return { ecosystem, name: purl.namespace === undefined ? purl.name : `${purl.namespace}/${purl.name}` };
}

/** Names as each ecosystem compares them: PyPI per PEP 503, npm case-insensitively, Maven and Go exactly. */
export function normalizePackageName(ecosystem: Ecosystem, name: string): string {
  if (ecosystem === 'PyPI') return name.toLowerCase().replace(/[-_.]+/g, '-');
  if (ecosystem === 'npm') return name.toLowerCase();
  return name;
}

type Compare = (a: string, b: string) => number;

interface PreparedRange {
  compare: Compare;
  /** Sorted in version order; "introduced: 0" first. */
  events: OsvEvent[];
  limits: string[];
}

interface Entry {
  record: OsvRecord;
  ecosystem: Ecosystem;
  ranges: PreparedRange[];
  versions: string[];
  severity: MatchSeverity;
}

export interface IndexOptions {
  /** What to do with a record whose range events do not parse: throw (default) or skip the range with a warning. */
  invalid?: 'throw' | 'skip';
}

const eventVersion = (e: OsvEvent): string =>
  'introduced' in e ? e.introduced : 'fixed' in e ? e.fixed : 'last_affected' in e ? e.last_affected : e.limit;

export class VulnerabilityIndex {
  /** Problems tolerated while building (invalid: 'skip', unreadable CVSS vectors). */
  readonly warnings: string[] = [];
  private readonly byPackage = new Map<string, Entry[]>();
  private readonly records = new Map<string, OsvRecord>();

  constructor(records: Iterable<OsvRecord>, options: IndexOptions = {}) {
    // The same id loaded twice (two database snapshots): the most recently modified record wins.
    for (const record of records) {
      const seen = this.records.get(record.id);
      if (seen === undefined || Date.parse(record.modified) > Date.parse(seen.modified)) {
        this.records.set(record.id, record);
      }
    }
    for (const record of this.records.values()) {
      if (record.withdrawn !== undefined) continue;
      for (const [i, affected] of record.affected.entries()) {
        const pkg = affected.package;
        if (pkg === undefined) continue;
        const ecosystem = pkg.ecosystem.split(':')[0]!;
        if (!isEcosystem(ecosystem)) continue;
        const entry: Entry = {
          record,
          ecosystem,
          ranges: this.prepareRanges(record, i, ecosystem, affected, options),
          versions: affected.versions ?? [],
          severity: this.severityOf(record, affected),
        };
        const key = `${ecosystem}\0${normalizePackageName(ecosystem, pkg.name)}`;
        const list = this.byPackage.get(key);
        if (list === undefined) this.byPackage.set(key, [entry]);
        else list.push(entry);
      }
    }
  }

  /** Number of distinct (non-duplicate) records loaded, withdrawn ones included. */
  get size(): number {
    return this.records.size;
  }

  findVulnerabilities(component: SbomComponent): VulnerabilityMatch[] {
    if (component.purl === undefined) return [];
    const pkg = purlToPackage(component.purl);
    if (pkg === undefined) return [];
    const entries = this.byPackage.get(`${pkg.ecosystem}\0${normalizePackageName(pkg.ecosystem, pkg.name)}`);
    if (entries === undefined) return [];

    const label = `${component.name} (${component.purl.toString()})`;
    const version = component.purl.version ?? component.version;
    if (version === undefined || version === '') {
      throw new VulnMatchError(
        `component ${label} has no version, so it cannot be checked against ${entries.length} known vulnerabilities`,
      );
    }
    const own: Compare = (a, b) => compareVersions(pkg.ecosystem, a, b);
    try {
      own(version, version);
    } catch (err) {
      if (err instanceof VersionError) throw new VulnMatchError(`component ${label}: ${err.message}`);
      throw err;
    }

    // One match per record, however many of its affected entries and ranges apply.
    const found = new Map<string, { entry: Entry; fix?: string }>();
    for (const entry of entries) {
      let affected = entry.versions.some((v) => v === version || sameVersion(own, v, version));
      let fix: string | undefined;
      for (const range of entry.ranges) {
        if (!rangeAffects(range, version)) continue;
        affected = true;
        for (const e of range.events) {
          if (!('fixed' in e) || range.compare(e.fixed, version) <= 0) continue;
          if (fix === undefined || range.compare(e.fixed, fix) < 0) fix = e.fixed;
        }
      }
      if (!affected) continue;
      const prior = found.get(entry.record.id);
      if (prior === undefined) found.set(entry.record.id, fix === undefined ? { entry } : { entry, fix });
      else if (fix !== undefined && (prior.fix === undefined || own(fix, prior.fix) < 0)) prior.fix = fix;
    }

    return [...found.values()].map(({ entry, fix }) => {
      const r = entry.record;
      const match: VulnerabilityMatch = {
        vulnId: r.id,
        aliases: r.aliases,
        summary: r.summary ?? r.details?.split('\n', 1)[0] ?? '',
        severity: entry.severity,
        component,
      };
      if (fix !== undefined) match.fixVersion = fix;
      return match;
    });
  }

  private prepareRanges(
    record: OsvRecord,
    index: number,
    ecosystem: Ecosystem,
    affected: OsvAffected,
    options: IndexOptions,
  ): PreparedRange[] {
    const out: PreparedRange[] = [];
    for (const [j, range] of (affected.ranges ?? []).entries()) {
      // GIT ranges speak of commits; an SBOM speaks of versions. The record's `versions` list covers them.
      if (range.type === 'GIT') continue;
      // Go records use SEMVER ranges without the "v"; the Go comparator reads both spellings.
      const compare: Compare =
        ecosystem === 'Go' || range.type === 'ECOSYSTEM'
          ? (a, b) => compareVersions(ecosystem, a, b)
          : (a, b) => compareSemver(a, b);
      try {
        const events = range.events.filter((e) => !('limit' in e));
        for (const e of events) {
          const v = eventVersion(e);
          if (!('introduced' in e && v === '0')) compare(v, v);
        }
        const limits = range.events.flatMap((e) => ('limit' in e && e.limit !== '*' ? [e.limit] : []));
        for (const l of limits) compare(l, l);
        events.sort((a, b) => {
          const x = eventVersion(a);
          const y = eventVersion(b);
          const zeroA = 'introduced' in a && x === '0';
          const zeroB = 'introduced' in b && y === '0';
          // Equal versions keep the record's order (the sort is stable): "fixed: X, introduced: X" re-opens the
          // range at X, "introduced: X, fixed: X" is empty.
          return zeroA || zeroB ? Number(zeroB) - Number(zeroA) : compare(x, y);
        });
        out.push({ compare, events, limits });
      } catch (err) {
        if (!(err instanceof VersionError)) throw err;
        const where = `${record.id}: affected[${index}].ranges[${j}] (${ecosystem} ${range.type}): ${err.message}`;
        if (options.invalid === 'skip') this.warnings.push(`skipped ${where}`);
        else throw new VersionError(where);
      }
    }
    return out;
  }

  /** The package's own severity first, then the record's; CVSS v3 before a database's word; UNKNOWN otherwise. */
  private severityOf(record: OsvRecord, affected: OsvAffected): MatchSeverity {
    return (
      this.cvssSeverity(record.id, affected.severity) ??
      this.cvssSeverity(record.id, record.severity) ??
      databaseSeverity(affected.database_specific) ??
      databaseSeverity(record.database_specific) ??
      'UNKNOWN'
    );
  }

  private cvssSeverity(id: string, severities: OsvSeverity[] | undefined): MatchSeverity | undefined {
    let best: number | undefined;
    for (const s of severities ?? []) {
      if (s.type !== 'CVSS_V3') continue;
      try {
        const score = cvss3BaseScore(s.score);
        if (best === undefined || score > best) best = score;
      } catch (err) {
        if (!(err instanceof CvssError)) throw err;
        this.warnings.push(`${id}: ignored severity: ${err.message}`);
      }
    }
    if (best === undefined) return undefined;
    const rating = cvssRating(best);
    // A 0.0 score still names a vulnerability: it ranks with the least severe rather than disappearing.
    return rating === 'NONE' ? 'LOW' : rating;
  }
}

function databaseSeverity(db: Record<string, unknown> | undefined): MatchSeverity | undefined {
  const s = db?.['severity'];
  if (typeof s !== 'string') return undefined;
  const upper = s.toUpperCase();
  if (upper === 'MODERATE' || upper === 'MEDIUM') return 'MEDIUM';
  if (upper === 'LOW' || upper === 'HIGH' || upper === 'CRITICAL') return upper;
  return undefined;
}

function sameVersion(compare: Compare, a: string, b: string): boolean {
  try {
    return compare(a, b) === 0;
  } catch {
    // `versions` lists carry whatever the registry published; one that does not parse can only match exactly.
    return false;
  }
}

/** OSV evaluation: walk the sorted events, entering at introduced and leaving after fixed/last_affected. */
function rangeAffects(range: PreparedRange, version: string): boolean {
  if (range.limits.length > 0 && !range.limits.some((l) => range.compare(version, l) < 0)) return false;
  let affected = false;
  for (const e of range.events) {
    if ('introduced' in e) {
      if (e.introduced === '0' || range.compare(version, e.introduced) >= 0) affected = true;
    } else if ('fixed' in e) {
      if (range.compare(version, e.fixed) >= 0) affected = false;
    } else if ('last_affected' in e) {
      if (range.compare(version, e.last_affected) > 0) affected = false;
    }
  }
  return affected;
}
