// Version ordering per OSV ecosystem. Each comparator throws VersionError for a version it cannot parse:
// a vulnerability check that silently guessed an order would be worse than one that refuses.
import semver from 'semver';

export const ECOSYSTEMS = ['npm', 'PyPI', 'Maven', 'Go'] as const;
export type Ecosystem = (typeof ECOSYSTEMS)[number];

export class VersionError extends Error {
  constructor(reason: string) {
    super(reason);
    this.name = 'VersionError';
  }
}

export function isEcosystem(name: string): name is Ecosystem {
  return (ECOSYSTEMS as readonly string[]).includes(name);
}

/** Negative, zero or positive as `a` sorts before, with or after `b` in `ecosystem`. */
export function compareVersions(ecosystem: string, a: string, b: string): number {
  switch (ecosystem) {
    case 'npm':
      return compareSemver(a, b, 'npm');
    case 'Go':
      return compareGo(a, b);
    case 'PyPI':
      return comparePep440(a, b);
    case 'Maven':
      return compareMaven(a, b);
    default:
      throw new VersionError(`unsupported ecosystem "${ecosystem}" (supported: ${ECOSYSTEMS.join(', ')})`);
  }
}

/** Whether `version` parses in `ecosystem`. */
export function isValidVersion(ecosystem: string, version: string): boolean {
  try {
    compareVersions(ecosystem, version, version);
    return true;
  } catch {
    return false;
  }
}

// --- numbers as digit strings: versions hold numbers (dates, build numbers) beyond 2^53 --------------------------

function compareDigits(a: string, b: string): number {
  const x = a.replace(/^0+(?=\d)/, '');
  const y = b.replace(/^0+(?=\d)/, '');
  if (x.length !== y.length) return x.length < y.length ? -1 : 1;
  return x < y ? -1 : x > y ? 1 : 0;
}

const sign = (n: number) => (n < 0 ? -1 : n > 0 ? 1 : 0);

// --- SemVer 2.0 (npm, and OSV's SEMVER range type) ----------------------------------------------------------------

function parseSemver(v: string, label: string): semver.SemVer {
  // Strict SemVer 2.0; node-semver also tolerates one leading "v" or "=", which OSV's SEMVER ranges allow.
  const parsed = semver.parse(v, { loose: false });
  if (parsed === null) throw new VersionError(`"${v}" is not a valid ${label} version`);
  return parsed;
}

/** SemVer 2.0 precedence: build metadata is ignored, a pre-release sorts before its release. */
export function compareSemver(a: string, b: string, label = 'SemVer'): number {
  return sign(semver.compare(parseSemver(a, label), parseSemver(b, label)));
}

// --- Go modules ---------------------------------------------------------------------------------------------------

// Go module versions are SemVer with a leading "v" (OSV's Go records omit it). "+incompatible" is build metadata
// and so does not change the order; pseudo-versions (v0.0.0-20210101000000-abcdef123456,
// v1.2.4-0.20210101000000-abcdef123456) are pre-releases whose timestamp orders them, which SemVer already gives.
function compareGo(a: string, b: string): number {
  return sign(semver.compare(parseGo(a), parseGo(b)));
}

function parseGo(v: string): semver.SemVer {
  const bare = v.startsWith('v') ? v.slice(1) : v;
  const build = bare.indexOf('+');
  if (build !== -1 && bare.slice(build) !== '+incompatible') {
    throw new VersionError(`"${v}" is not a valid Go version (the only build suffix Go allows is +incompatible)`);
  }
  const parsed = /^\d/.test(bare) ? semver.parse(bare, { loose: false }) : null;
  if (parsed === null) throw new VersionError(`"${v}" is not a valid Go version`);
  return parsed;
}

// --- PyPI: PEP 440 -------------------------------------------------------------------------------------------------

// The canonical PEP 440 pattern (Appendix B), case-insensitive, surrounding whitespace allowed.
const PEP440 =
  /^\s*v?(?:(?:(\d+)!)?(\d+(?:\.\d+)*)(?:[-_.]?(a|b|c|rc|alpha|beta|pre|preview)[-_.]?(\d+)?)?(?:-(\d+)|[-_.]?(post|rev|r)[-_.]?(\d+)?)?(?:[-_.]?(dev)[-_.]?(\d+)?)?)(?:\+([a-z0-9]+(?:[-_.][a-z0-9]+)*))?\s*$/i;

interface Pep440 {
  epoch: string;
  release: string[];
  /** [rank of a/b/rc, number] */
  pre?: [number, string];
  post?: string;
  dev?: string;
  local?: string[];
}

export function parsePep440(v: string): Pep440 {
  const m = PEP440.exec(v);
  if (m === null) throw new VersionError(`"${v}" is not a valid PEP 440 version`);
  const [, epoch, release, preL, preN, postN1, postL, postN2, devL, devN, local] = m;
  const out: Pep440 = { epoch: epoch ?? '0', release: release!.split('.') };
  if (preL !== undefined) {
    const l = preL.toLowerCase();
    const rank = l === 'a' || l === 'alpha' ? 0 : l === 'b' || l === 'beta' ? 1 : 2;
    out.pre = [rank, preN ?? '0'];
  }
  if (postN1 !== undefined) out.post = postN1;
  else if (postL !== undefined) out.post = postN2 ?? '0';
  if (devL !== undefined) out.dev = devN ?? '0';
  if (local !== undefined) out.local = local.toLowerCase().split(/[-_.]/);
  return out;
}

function comparePep440(a: string, b: string): number {
  const x = parsePep440(a);
  const y = parsePep440(b);
  return (
    compareDigits(x.epoch, y.epoch) ||
    compareRelease(x.release, y.release) ||
    comparePhase(x, y) ||
    compareLocal(x.local, y.local)
  );
}

/** Release segments compare numerically, missing trailing segments count as 0 (1.0 == 1.0.0). */
function compareRelease(a: string[], b: string[]): number {
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const c = compareDigits(a[i] ?? '0', b[i] ?? '0');
    if (c !== 0) return c;
  }
  return 0;
}

// Within one release: X.devN < X.aN.devM < X.aN < X.aN.postM < ... < X.rcN < X < X.postN.devM < X.postN.
// Encoded as packaging's sort key: (pre, post, dev) with -inf/+inf for absent parts.
function comparePhase(x: Pep440, y: Pep440): number {
  return (
    compareKey(preKey(x), preKey(y)) ||
    compareKey(x.post === undefined ? [-1] : [0, x.post], y.post === undefined ? [-1] : [0, y.post]) ||
    compareKey(x.dev === undefined ? [1] : [0, x.dev], y.dev === undefined ? [1] : [0, y.dev])
  );
}

/** A final release sorts after its pre-releases; a bare dev release (1.0.dev1) before them all. */
function preKey(v: Pep440): Array<number | string> {
  if (v.pre !== undefined) return [0, v.pre[0], v.pre[1]];
  if (v.post === undefined && v.dev !== undefined) return [-1];
  return [1];
}

/** Keys: a leading -1/0/1 tier, then numbers (rank) and digit strings compared numerically. */
function compareKey(a: Array<number | string>, b: Array<number | string>): number {
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const p = a[i];
    const q = b[i];
    if (p === undefined || q === undefined) return p === undefined ? (q === undefined ? 0 : -1) : 1;
    const c = typeof p === 'number' && typeof q === 'number' ? sign(p - q) : compareDigits(String(p), String(q));
    if (c !== 0) return c;
  }
  return 0;
}

/** No local label < any local label; segment by segment, numbers sort after strings, then a longer label wins. */
function compareLocal(a: string[] | undefined, b: string[] | undefined): number {
  if (a === undefined || b === undefined) return a === undefined ? (b === undefined ? 0 : -1) : 1;
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const p = a[i];
    const q = b[i];
    if (p === undefined || q === undefined) return p === undefined ? -1 : 1;
    const pn = /^\d+$/.test(p);
    const qn = /^\d+$/.test(q);
    const c = pn && qn ? compareDigits(p, q) : pn ? 1 : qn ? -1 : p < q ? -1 : p > q ? 1 : 0;
    if (c !== 0) return c;
  }
  return 0;
}

// --- Maven: ComparableVersion ----------------------------------------------------------------------------------------

// Maven's documented version order (maven.apache.org/pom.html#version-order-specification), as implemented by
// org.apache.maven.artifact.versioning.ComparableVersion: the version is split at "." and "-" and at every
// digit/letter transition; "-" and transitions open a sub-list; trailing null items (0, "", final, ga, release)
// are dropped from each list. Integers sort after strings and lists; known qualifiers in the order
// alpha < beta < milestone < rc = cr < snapshot < "" (release) < sp, unknown ones after them, alphabetically.

type MavenItem =
  | { kind: 'int'; value: string }
  | { kind: 'string'; value: string }
  | { kind: 'list'; items: MavenItem[] };

const QUALIFIERS = ['alpha', 'beta', 'milestone', 'rc', 'snapshot', '', 'sp'];
const RELEASE_INDEX = String(QUALIFIERS.indexOf(''));
const ALIASES: Record<string, string> = { ga: '', final: '', release: '', cr: 'rc' };

function stringItem(value: string, followedByDigit: boolean): MavenItem {
  let v = value;
  if (followedByDigit && v.length === 1) v = v === 'a' ? 'alpha' : v === 'b' ? 'beta' : v === 'm' ? 'milestone' : v;
  return { kind: 'string', value: ALIASES[v] ?? v };
}

function parseItem(isDigit: boolean, text: string): MavenItem {
  return isDigit ? { kind: 'int', value: text.replace(/^0+(?=\d)/, '') } : stringItem(text, false);
}

export function parseMaven(version: string): MavenItem {
  if (version.trim() === '' || /\s/.test(version)) throw new VersionError(`"${version}" is not a valid Maven version`);
  const v = version.toLowerCase();
  const root: MavenItem & { kind: 'list' } = { kind: 'list', items: [] };
  let list = root;
  const stack = [root];
  const openList = () => {
    const next: MavenItem & { kind: 'list' } = { kind: 'list', items: [] };
    list.items.push(next);
    list = next;
    stack.push(next);
  };
  let isDigit = false;
  let start = 0;
  for (let i = 0; i < v.length; i++) {
    const c = v[i]!;
    if (c === '.' || c === '-') {
      list.items.push(i === start ? { kind: 'int', value: '0' } : parseItem(isDigit, v.slice(start, i)));
      start = i + 1;
      if (c === '-') openList();
    } else if (c >= '0' && c <= '9') {
      if (!isDigit && i > start) {
        list.items.push(stringItem(v.slice(start, i), true));
        start = i;
        openList();
      }
      isDigit = true;
    } else {
      if (isDigit && i > start) {
        list.items.push(parseItem(true, v.slice(start, i)));
        start = i;
        openList();
      }
      isDigit = false;
    }
  }
  if (v.length > start) list.items.push(parseItem(isDigit, v.slice(start)));
  for (let k = stack.length - 1; k >= 0; k--) normalize(stack[k]!);
  return root;
}

const isNull = (item: MavenItem) =>
  item.kind === 'int' ? item.value === '0' : item.kind === 'string' ? item.value === '' : item.items.length === 0;

function normalize(list: MavenItem & { kind: 'list' }): void {
  for (let i = list.items.length - 1; i >= 0; i--) {
    const item = list.items[i]!;
    if (isNull(item)) list.items.splice(i, 1);
    else if (item.kind !== 'list') break;
  }
}

function qualifierKey(q: string): string {
  const i = QUALIFIERS.indexOf(q);
  return i === -1 ? `${QUALIFIERS.length}-${q}` : String(i);
}

const cmpStr = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/** ComparableVersion's Item.compareTo; `b` undefined stands for the padding null item. */
function compareItem(a: MavenItem, b: MavenItem | undefined): number {
  if (b === undefined) {
    if (a.kind === 'int') return a.value === '0' ? 0 : 1;
    if (a.kind === 'string') return cmpStr(qualifierKey(a.value), RELEASE_INDEX);
    return a.items.length === 0 ? 0 : compareItem(a.items[0]!, undefined);
  }
  if (a.kind === 'int') return b.kind === 'int' ? compareDigits(a.value, b.value) : 1;
  if (a.kind === 'string') return b.kind === 'string' ? cmpStr(qualifierKey(a.value), qualifierKey(b.value)) : -1;
  if (b.kind === 'int') return -1;
  if (b.kind === 'string') return 1;
  for (let i = 0; i < Math.max(a.items.length, b.items.length); i++) {
    const l = a.items[i];
    const r = b.items[i];
    const c = l === undefined ? (r === undefined ? 0 : -compareItem(r, undefined)) : compareItem(l, r);
    if (c !== 0) return c;
  }
  return 0;
}

function compareMaven(a: string, b: string): number {
  return sign(compareItem(parseMaven(a), parseMaven(b)));
}
