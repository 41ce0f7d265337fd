// The audit log's hash chain: each entry's hash covers its content and its predecessor's hash, so editing,
// removing or reordering entries breaks the chain at that point. Shared by the stores and `admin audit verify`.
import { createRequire } from 'node:module';
import { packagePath } from '../../paths.js';
import type { AuditContent } from '../records/audit-entry.js';

/** An audit_log row as stored (details as JSON text). */
export interface AuditRow {
  seq: number;
  at: string;
  tenant_id: string | null;
  actor: string;
  action: string;
  outcome: string;
  details: string;
  prev_hash: string;
  hash: string;
}

/** An entry's canonical JSON split around its seq: `before + seq + after`. */
export interface EntryHashParts {
  before: string;
  after: string;
}

interface AuditHash {
  GENESIS_HASH: string;
  canonicalJson(value: unknown): string;
  entryHash(seq: number, prevHash: string, e: AuditContent): string;
  leafBytes(seq: number, e: AuditContent): Buffer;
  leafJson(seq: number, e: AuditContent): string;
  entryHashOfLeaf(prevHash: string, leafJson: string): string;
  entryHashParts(e: AuditContent, detailsJson?: string): EntryHashParts;
  leafJsonOfRow(row: AuditRow): string;
  entryTexts(e: AuditContent): { columns: Omit<AuditRow, 'seq' | 'prev_hash' | 'hash'>; parts: EntryHashParts };
  chainAuditRows(head: { seq: number | string; hash: string } | undefined, entries: AuditContent[]): AuditRow[];
}

// The computing part is CommonJS (audit-hash.cjs) so the store's writer thread runs the same code.
const auditHash = createRequire(import.meta.url)(packagePath('src', 'store', 'audit', 'audit-hash.cjs')) as AuditHash;

export const GENESIS_HASH = auditHash.GENESIS_HASH;
/** Canonical JSON: object keys sorted at every level, so the hash does not depend on key order. */
export const canonicalJson = auditHash.canonicalJson;
export const entryHash = auditHash.entryHash;
/** An entry's leaf bytes in the transparency log: canonicalJson(hashedFields(seq, e)) as UTF-8 (docs/transparency.md). */
export const leafBytes = auditHash.leafBytes;
/** An entry's leaf as text: canonicalJson(hashedFields(seq, e)); leafBytes is its UTF-8. */
export const leafJson = auditHash.leafJson;
/** entryHash from an entry's leafJson (the same hash; one canonical JSON instead of two). */
export const entryHashOfLeaf = auditHash.entryHashOfLeaf;
/** An entry's canonical JSON split around its seq (`before + seq + after`), for appenders that learn seq late. */
export const entryHashParts = auditHash.entryHashParts;
/**
 * A stored row's leaf JSON by concatenation: right only when its details text is canonical (rows written since
 * details are stored so); callers check it against the row's chain hash and fall back to leafJson.
 */
export const leafJsonOfRow = auditHash.leafJsonOfRow;
/** An entry's audit_log columns besides seq and the hashes (details as canonical JSON text), and its hash parts. */
export const entryTexts = auditHash.entryTexts;
/** The audit_log rows for `entries`, chained on the log's current head (undefined: the log is empty). */
export const chainAuditRows = auditHash.chainAuditRows;

/** An entry with its place in the chain, whatever words it holds (an AuditEntry, or a row being copied). */
export interface ChainedEntry extends AuditContent {
  seq: number;
  prevHash: string;
  hash: string;
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

  check(entry: ChainedEntry): ChainProblem | undefined {
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
