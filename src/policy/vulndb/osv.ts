// OSV records (https://ossf.github.io/osv-schema/): the subset the matcher reads, validated on load so a bad record
// is reported with its file and JSON path instead of silently matching nothing.
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';

export type OsvRangeType = 'SEMVER' | 'ECOSYSTEM' | 'GIT';
export type OsvEvent = { introduced: string } | { fixed: string } | { last_affected: string } | { limit: string };

export interface OsvRange {
  type: OsvRangeType;
  repo?: string;
  events: OsvEvent[];
}

export interface OsvSeverity {
  /** CVSS_V2, CVSS_V3, CVSS_V4, Ubuntu, ... */
  type: string;
  score: string;
}

export interface OsvAffected {
  package?: { ecosystem: string; name: string; purl?: string };
  ranges?: OsvRange[];
  versions?: string[];
  severity?: OsvSeverity[];
  ecosystem_specific?: Record<string, unknown>;
  database_specific?: Record<string, unknown>;
}

export interface OsvRecord {
  id: string;
  modified: string;
  aliases: string[];
  published?: string;
  withdrawn?: string;
  summary?: string;
  details?: string;
  severity?: OsvSeverity[];
  affected: OsvAffected[];
  database_specific?: Record<string, unknown>;
}

export class OsvError extends Error {
  constructor(reason: string) {
    super(reason);
    this.name = 'OsvError';
  }
}

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

const RANGE_TYPES: readonly string[] = ['SEMVER', 'ECOSYSTEM', 'GIT'];
const EVENT_KEYS = ['introduced', 'fixed', 'last_affected', 'limit'] as const;

/** Validates one record; `source` names where it came from ("file.json", "file.json[3]") for error messages. */
export function parseOsvRecord(value: unknown, source: string): OsvRecord {
  const fail = (path: string, reason: string): never => {
    throw new OsvError(`${source}: ${path}: ${reason}`);
  };
  if (!isObject(value)) return fail('$', 'an OSV record must be a JSON object');
  const str = (obj: Json, key: string, path: string, required: boolean): string | undefined => {
    const v = obj[key];
    if (v === undefined && !required) return undefined;
    if (typeof v !== 'string' || v === '') return fail(`${path}.${key}`, 'must be a non-empty string');
    return v;
  };
  const strings = (obj: Json, key: string, path: string): string[] | undefined => {
    const v = obj[key];
    if (v === undefined || v === null) return undefined;
    if (!Array.isArray(v)) return fail(`${path}.${key}`, 'must be an array of strings');
    for (const [i, s] of v.entries()) if (typeof s !== 'string') fail(`${path}.${key}[${i}]`, 'must be a string');
    return v as string[];
  };
  const objectAt = (obj: Json, key: string, path: string): Json | undefined => {
    const v = obj[key];
    if (v === undefined || v === null) return undefined;
    if (!isObject(v)) return fail(`${path}.${key}`, 'must be an object');
    return v;
  };
  const arrayAt = (obj: Json, key: string, path: string): unknown[] => {
    const v = obj[key];
    if (v === undefined || v === null) return [];
    if (!Array.isArray(v)) return fail(`${path}.${key}`, 'must be an array');
    return v;
  };
  const severities = (obj: Json, path: string): OsvSeverity[] | undefined => {
    if (obj['severity'] === undefined || obj['severity'] === null) return undefined;
    return arrayAt(obj, 'severity', path).map((s, i) => {
      const at = `${path}.severity[${i}]`;
      if (!isObject(s)) return fail(at, 'must be an object');
      return { type: str(s, 'type', at, true)!, score: str(s, 'score', at, true)! };
    });
  };

  const id = str(value, 'id', '$', true)!;
  const modified = str(value, 'modified', '$', true)!;
  if (Number.isNaN(Date.parse(modified))) fail('$.modified', `"${modified}" is not an RFC 3339 timestamp`);
  const record: OsvRecord = { id, modified, aliases: strings(value, 'aliases', '$') ?? [], affected: [] };
  for (const key of ['published', 'withdrawn', 'summary', 'details'] as const) {
    const v = str(value, key, '$', false);
    if (v !== undefined) record[key] = v;
  }
  const severity = severities(value, '$');
  if (severity !== undefined) record.severity = severity;
  const dbSpecific = objectAt(value, 'database_specific', '$');
  if (dbSpecific !== undefined) record.database_specific = dbSpecific;

  for (const [i, a] of arrayAt(value, 'affected', '$').entries()) {
    const at = `$.affected[${i}]`;
    if (!isObject(a)) fail(at, 'must be an object');
    const affected: OsvAffected = {};
    const pkg = objectAt(a as Json, 'package', at);
    if (pkg !== undefined) {
      const p = `${at}.package`;
      affected.package = { ecosystem: str(pkg, 'ecosystem', p, true)!, name: str(pkg, 'name', p, true)! };
      const purl = str(pkg, 'purl', p, false);
      if (purl !== undefined) affected.package.purl = purl;
    }
    const ranges = (a as Json)['ranges'];
    if (ranges !== undefined && ranges !== null) {
      affected.ranges = arrayAt(a as Json, 'ranges', at).map((r, j) => parseRange(r, `${at}.ranges[${j}]`, fail));
    }
    const versions = strings(a as Json, 'versions', at);
    if (versions !== undefined) affected.versions = versions;
    const sev = severities(a as Json, at);
    if (sev !== undefined) affected.severity = sev;
    for (const key of ['ecosystem_specific', 'database_specific'] as const) {
      const v = objectAt(a as Json, key, at);
      if (v !== undefined) affected[key] = v;
    }
    record.affected.push(affected);
  }
  return record;
}

function parseRange(r: unknown, at: string, fail: (path: string, reason: string) => never): OsvRange {
  if (!isObject(r)) return fail(at, 'must be an object');
  const type = r['type'];
  if (typeof type !== 'string' || !RANGE_TYPES.includes(type)) {
    return fail(`${at}.type`, `must be one of ${RANGE_TYPES.join(', ')} (got ${JSON.stringify(type)})`);
  }
  const range: OsvRange = { type: type as OsvRangeType, events: [] };
  if (r['repo'] !== undefined) {
    if (typeof r['repo'] !== 'string') fail(`${at}.repo`, 'must be a string');
    range.repo = r['repo'] as string;
  }
  if (type === 'GIT' && range.repo === undefined) fail(`${at}.repo`, 'a GIT range needs a repo');
  const events = r['events'];
  if (!Array.isArray(events) || events.length === 0) return fail(`${at}.events`, 'must be a non-empty array');
  for (const [k, e] of events.entries()) {
    const ev = `${at}.events[${k}]`;
    if (!isObject(e)) fail(ev, 'must be an object');
    const keys = Object.keys(e as Json);
    const key = keys[0];
    if (keys.length !== 1 || !(EVENT_KEYS as readonly string[]).includes(key!)) {
      fail(ev, `must have exactly one of ${EVENT_KEYS.join(', ')} (got ${JSON.stringify(keys)})`);
    }
    const v = (e as Json)[key!];
    if (typeof v !== 'string' || v === '') fail(`${ev}.${key}`, 'must be a non-empty string');
    range.events.push({ [key!]: v } as OsvEvent);
  }
  if (!range.events.some((e) => 'introduced' in e)) fail(`${at}.events`, 'needs at least one "introduced" event');
  return range;
}

/** One record or an array of records, as JSON text. */
export function parseOsvText(text: string, source: string): OsvRecord[] {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new OsvError(`${source}: not JSON: ${(err as Error).message}`);
  }
  if (Array.isArray(value)) return value.map((v, i) => parseOsvRecord(v, `${source}[${i}]`));
  return [parseOsvRecord(value, source)];
}

/** A file holding one record or an array of records, or a folder searched recursively for *.json files. */
export async function loadOsvPath(path: string): Promise<OsvRecord[]> {
  const info = await stat(path);
  if (!info.isDirectory()) return parseOsvText(await readFile(path, 'utf8'), path);
  const records: OsvRecord[] = [];
  // Sorted, so the same folder always loads in the same order.
  const entries = (await readdir(path, { withFileTypes: true })).sort((a, b) => (a.name < b.name ? -1 : 1));
  for (const entry of entries) {
    const child = join(path, entry.name);
    if (entry.isDirectory()) records.push(...(await loadOsvPath(child)));
    else if (entry.isFile() && entry.name.endsWith('.json')) records.push(...(await loadOsvPath(child)));
  }
  return records;
}
