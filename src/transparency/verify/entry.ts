// A log leaf is an audit entry's canonical JSON: the bytes the audit hash chain hashes (src/store/audit/audit-hash.cjs),
// keys sorted at every level, fields seq, at, tenant_id, actor, action, outcome, details. The leaf is only read
// when it is exactly canonical, so that what is shown to the user is the one meaning the hashed bytes have (a
// duplicated key, say, would let two JSON readers see two different entries).

export interface LogEntry {
  seq: number;
  at: string;
  tenantId: string | null;
  actor: string;
  action: string;
  outcome: string;
  details: Record<string, unknown>;
}

export class EntryError extends Error {}

/** Same rules as audit-hash.cjs's canonicalJson (test/unit/transparency-verify.test.ts compares the two). */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

const FIELDS = new Set(['seq', 'at', 'tenant_id', 'actor', 'action', 'outcome', 'details']);

export function parseLeafEntry(bytes: Uint8Array): LogEntry {
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    throw new EntryError('entry is not valid UTF-8');
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new EntryError('entry is not JSON');
  }
  if (canonicalJson(value) !== text) throw new EntryError('entry is not in canonical JSON form');
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    throw new EntryError('entry is not an object');
  const v = value as Record<string, unknown>;
  const extra = Object.keys(v).filter((k) => !FIELDS.has(k));
  if (extra.length > 0) throw new EntryError(`entry has fields an audit entry does not: ${extra.join(', ')}`);
  const { seq, at, tenant_id, actor, action, outcome, details } = v;
  if (!Number.isSafeInteger(seq) || (seq as number) < 1) throw new EntryError('entry seq is not a positive integer');
  for (const [name, field] of Object.entries({ at, actor, action, outcome })) {
    if (typeof field !== 'string') throw new EntryError(`entry ${name} is not a string`);
  }
  if (tenant_id !== undefined && tenant_id !== null && typeof tenant_id !== 'string') {
    throw new EntryError('entry tenant_id is not a string');
  }
  if (details === null || typeof details !== 'object' || Array.isArray(details)) {
    throw new EntryError('entry details is not an object');
  }
  return {
    seq: seq as number,
    at: at as string,
    tenantId: (tenant_id as string | null | undefined) ?? null,
    actor: actor as string,
    action: action as string,
    outcome: outcome as string,
    details: details as Record<string, unknown>,
  };
}
