// CVSS v3.0/v3.1 base scores, per the CVSS v3.1 specification (section 7.1 and Appendix A's Roundup).
// Only the base metrics count; temporal and environmental metrics in a vector are validated and ignored.

export type CvssRating = 'NONE' | 'LOW' | 'MEDIUM' | 'HIGH' | 'CRITICAL';

export class CvssError extends Error {
  constructor(reason: string) {
    super(reason);
    this.name = 'CvssError';
  }
}

const BASE: Record<string, Record<string, number>> = {
  AV: { N: 0.85, A: 0.62, L: 0.55, P: 0.2 },
  AC: { L: 0.77, H: 0.44 },
  PR: { N: 0.85, L: 0.62, H: 0.27 },
  UI: { N: 0.85, R: 0.62 },
  S: { U: 0, C: 1 },
  C: { H: 0.56, L: 0.22, N: 0 },
  I: { H: 0.56, L: 0.22, N: 0 },
  A: { H: 0.56, L: 0.22, N: 0 },
};
/** Privileges Required weighs more when the scope changes. */
const PR_SCOPE_CHANGED: Record<string, number> = { N: 0.85, L: 0.68, H: 0.5 };

const OTHER: Record<string, readonly string[]> = {
  E: ['X', 'U', 'P', 'F', 'H'],
  RL: ['X', 'O', 'T', 'W', 'U'],
  RC: ['X', 'U', 'R', 'C'],
  CR: ['X', 'L', 'M', 'H'],
  IR: ['X', 'L', 'M', 'H'],
  AR: ['X', 'L', 'M', 'H'],
  MAV: ['X', 'N', 'A', 'L', 'P'],
  MAC: ['X', 'L', 'H'],
  MPR: ['X', 'N', 'L', 'H'],
  MUI: ['X', 'N', 'R'],
  MS: ['X', 'U', 'C'],
  MC: ['X', 'N', 'L', 'H'],
  MI: ['X', 'N', 'L', 'H'],
  MA: ['X', 'N', 'L', 'H'],
};

/** CVSS v3.1 Roundup: the smallest number with one decimal that is >= the input, free of float noise. */
export function roundUp(input: number): number {
  const i = Math.round(input * 100_000);
  return i % 10_000 === 0 ? i / 100_000 : (Math.floor(i / 10_000) + 1) / 10;
}

/** Base score of a "CVSS:3.0/..." or "CVSS:3.1/..." vector. */
export function cvss3BaseScore(vector: string): number {
  const parts = vector.split('/');
  if (parts[0] !== 'CVSS:3.0' && parts[0] !== 'CVSS:3.1') {
    throw new CvssError(`"${vector}" is not a CVSS v3 vector (expected a CVSS:3.0/ or CVSS:3.1/ prefix)`);
  }
  const m: Record<string, string> = {};
  for (const part of parts.slice(1)) {
    const [key, value, ...rest] = part.split(':');
    if (key === undefined || value === undefined || rest.length > 0) {
      throw new CvssError(`"${vector}": malformed metric "${part}"`);
    }
    if (key in m) throw new CvssError(`"${vector}": metric ${key} appears twice`);
    const allowed = BASE[key] ? Object.keys(BASE[key]) : OTHER[key];
    if (allowed === undefined) throw new CvssError(`"${vector}": unknown metric ${key}`);
    if (!allowed.includes(value)) throw new CvssError(`"${vector}": ${key}:${value} is not a valid value`);
    m[key] = value;
  }
  const missing = Object.keys(BASE).filter((k) => !(k in m));
  if (missing.length > 0) throw new CvssError(`"${vector}": missing base metrics ${missing.join(', ')}`);

  const changed = m['S'] === 'C';
  const w = (k: string) => BASE[k]![m[k]!]!;
  const iss = 1 - (1 - w('C')) * (1 - w('I')) * (1 - w('A'));
  const impact = changed ? 7.52 * (iss - 0.029) - 3.25 * (iss - 0.02) ** 15 : 6.42 * iss;
  const pr = changed ? PR_SCOPE_CHANGED[m['PR']!]! : w('PR');
  const exploitability = 8.22 * w('AV') * w('AC') * pr * w('UI');
  if (impact <= 0) return 0;
  return changed
    ? roundUp(Math.min(1.08 * (impact + exploitability), 10))
    : roundUp(Math.min(impact + exploitability, 10));
}

/** The qualitative rating of a CVSS v3 score (specification table 14). */
export function cvssRating(score: number): CvssRating {
  if (score === 0) return 'NONE';
  if (score < 4) return 'LOW';
  if (score < 7) return 'MEDIUM';
  if (score < 9) return 'HIGH';
  return 'CRITICAL';
}
