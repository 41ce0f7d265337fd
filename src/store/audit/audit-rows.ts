// The audit_log rows as read: a row stored compactly (migration 0032: entry-packing.cjs) rebuilt into the row every
// reader and verifier knows (AuditRow: hashes in hex, details as canonical JSON), its prev_hash taken from the row
// before it. Every read of audit_log rows that hands out their hashes or details goes through expandAuditRows.
import { createRequire } from 'node:module';
import type { Kysely } from 'kysely';
import { packagePath } from '../../paths.js';
import { narrowTables } from '../part-context.js';
import { type AuditRow, GENESIS_HASH } from './audit-chain.js';

/** An audit_log row as stored: old rows as AuditRow, compact ones with hash as bytes and details packed. */
export interface StoredAuditRow extends Omit<AuditRow, 'hash'> {
  hash: string | Buffer;
  signature_sha256?: Buffer | null;
  /** Migration 0032: a `signed` entry's details packed (details then '0'); null on other rows. */
  packed?: Buffer | null;
  /** Migration 0032: a packed entry's digest (details.hash), the key of the lookup by digest. */
  digest?: Buffer | null;
}

interface EntryPacking {
  PACKED_DETAILS: string;
  packDetails(
    detailsJson: string,
    wordId: (text: string) => number,
    signatureHex?: string,
    digestBase64?: string,
  ): Buffer;
  unpackDetails(
    packed: Uint8Array,
    wordOf: (id: number) => string,
    columns: { signature_sha256?: Uint8Array | null; digest?: Uint8Array | null },
  ): string;
  hashHex(hash: string | Uint8Array): string;
  isPacked(row: Pick<StoredAuditRow, 'details' | 'packed'>): boolean;
  expandRow<R extends StoredAuditRow>(
    row: R,
    prevHash: string,
    wordOf: (id: number) => string,
  ): Omit<R, 'packed' | 'digest' | 'hash'> & { hash: string };
  wordIdsOf(row: Pick<StoredAuditRow, 'details' | 'packed'>): number[];
  compactRow(
    row: AuditRow,
    details: Record<string, unknown>,
    signatureHex: string | undefined,
    words: { idOf(text: string): number; textOf(id: number): string },
  ): StoredAuditRow;
}

/** The CommonJS module, shared with the SQLite writer thread. */
export const ENTRY_PACKING_PATH = packagePath('src', 'store', 'audit', 'entry-packing.cjs');
export const entryPacking = createRequire(import.meta.url)(ENTRY_PACKING_PATH) as EntryPacking;

export interface WordTables {
  audit_words: { id: number; text: string };
  audit_log: StoredAuditRow;
}

/**
 * Words read per database (ids are never reused: a word once read stays right), keyed by the Kysely instance's
 * adapter, which its transactions share: a reader in a transaction (the log's integrator) keeps its words.
 */
const wordCache = new WeakMap<object, Map<number, string>>();

/**
 * `rows` as AuditRow (plus whatever other columns they hold, packed and digest left out): packed details rebuilt
 * through audit_words, and prev_hash where the row stores none taken from the previous row by seq (from `rows`, or
 * read: the log's first entry follows the genesis hash).
 */
export async function expandAuditRows<DB extends WordTables, R extends StoredAuditRow>(
  db: Kysely<DB>,
  rows: readonly R[],
): Promise<Array<Omit<R, 'packed' | 'digest' | 'hash'> & { hash: string }>> {
  const tables = narrowTables<WordTables, DB>(db);
  const hashes = new Map<number, string>();
  for (const r of rows) hashes.set(Number(r.seq), entryPacking.hashHex(r.hash));
  const missingPrev = new Set<number>();
  for (const r of rows) {
    const prevSeq = Number(r.seq) - 1;
    if (r.prev_hash === '' && prevSeq > 0 && !hashes.has(prevSeq)) missingPrev.add(prevSeq);
  }
  if (missingPrev.size > 0) {
    const prevRows = await tables
      .selectFrom('audit_log')
      .select(['seq', 'hash'])
      .where('seq', 'in', [...missingPrev])
      .execute();
    for (const p of prevRows) hashes.set(Number(p.seq), entryPacking.hashHex(p.hash));
  }
  const wordOf = await wordsFor(db, rows);
  return rows.map((r) => {
    const prevSeq = Number(r.seq) - 1;
    const prev = prevSeq === 0 ? GENESIS_HASH : (hashes.get(prevSeq) ?? '');
    return entryPacking.expandRow(r, prev, wordOf);
  });
}

/** The details of `rows` as their canonical JSON text, packed ones unpacked (for readers that need no hashes). */
export async function detailsOfRows<DB extends WordTables>(
  db: Kysely<DB>,
  rows: ReadonlyArray<Pick<StoredAuditRow, 'details' | 'packed' | 'digest' | 'signature_sha256'>>,
): Promise<string[]> {
  const wordOf = await wordsFor(db, rows);
  return rows.map((r) =>
    r.packed
      ? entryPacking.unpackDetails(r.packed, wordOf, { signature_sha256: r.signature_sha256, digest: r.digest })
      : r.details,
  );
}

/** The dictionary lookup for `rows`: their unknown words read from audit_words in one query. */
async function wordsFor<DB extends WordTables>(
  db: Kysely<DB>,
  rows: ReadonlyArray<Pick<StoredAuditRow, 'details' | 'packed'>>,
): Promise<(id: number) => string> {
  const key = db.getExecutor().adapter;
  let words = wordCache.get(key);
  if (!words) {
    words = new Map();
    wordCache.set(key, words);
  }
  const unknown = new Set<number>();
  for (const r of rows) for (const id of entryPacking.wordIdsOf(r)) if (!words.has(id)) unknown.add(id);
  if (unknown.size > 0) {
    const read = await narrowTables<WordTables, DB>(db)
      .selectFrom('audit_words')
      .select(['id', 'text'])
      .where('id', 'in', [...unknown])
      .execute();
    for (const w of read) words.set(Number(w.id), w.text);
  }
  const known = words;
  return (id: number) => {
    const text = known.get(id);
    if (text === undefined) throw new Error(`audit_words has no word ${id}`);
    return text;
  };
}
