// The audit log's hash chain: each entry's hash covers its content and its predecessor's hash, so editing,
// removing or reordering entries breaks the chain at that point. Shared by the stores and `admin audit verify`.
import { createHash } from 'node:crypto';
import type { AuditEntry, AuditEntryInput } from './store.js';

export const GENESIS_HASH = '0'.repeat(64);

/** Canonical JSON: object keys sorted at every level, so the hash does not depend on key order. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

export function entryHash(seq: number, prevHash: string, e: AuditEntryInput): string {
  const body = canonicalJson({
    seq,
    at: e.at,
    tenant_id: e.tenantId,
    actor: e.actor,
    action: e.action,
    outcome: e.outcome,
    details: e.details,
  });
  return createHash('sha256').update(`${prevHash}\n${body}`).digest('hex');
}

export interface ChainProblem {
  seq: number;
  problem: string;
}

/** Walks entries in order and reports the first place the chain breaks, or undefined if it is whole. */
export class ChainVerifier {
  private expectedPrev = GENESIS_HASH;
  private expectedSeq: number | undefined;
  count = 0;

  check(entry: AuditEntry): ChainProblem | undefined {
    if (this.expectedSeq !== undefined && entry.seq !== this.expectedSeq) {
      return {
        seq: entry.seq,
        problem: `entries ${this.expectedSeq}..${entry.seq - 1} are missing (removed or reordered)`,
      };
    }
    if (entry.prevHash !== this.expectedPrev) {
      return {
        seq: entry.seq,
        problem: 'does not follow its predecessor (an entry before it was removed, inserted or reordered)',
      };
    }
    if (entryHash(entry.seq, entry.prevHash, entry) !== entry.hash) {
      return { seq: entry.seq, problem: 'content does not match its hash (edited)' };
    }
    this.expectedPrev = entry.hash;
    this.expectedSeq = entry.seq + 1;
    this.count++;
    return undefined;
  }
}
