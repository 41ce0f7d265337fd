// C2SP tlog-proof@v1 (https://c2sp.org/tlog-proof): one text file holding an entry's inclusion proof and the signed
// checkpoint it leads to, verifiable offline. signbridge puts the entry itself in `extra`: the audit entry's
// canonical JSON, the exact bytes of the log leaf, so the record hash is SHA-256(0x00 || extra) (RFC 6962 §2.1)
// and a verifier needs nothing but the file and the log's key. `extra` is not authenticated by itself; it is by
// the proof, since its hash is the leaf the proof leads from. C2SP allows one `extra` line and nothing else
// between the header and the proof, so a signature of a batch (issue 46) carries its item in `extra` too: the
// UTF-8 of the canonical JSON {"batch_item": {...}, "entry": "<base64 leaf bytes>"} (docs/transparency.md, "Proof
// files"), from which the record hash is still SHA-256(0x00 || entry); an entry's own JSON never has those keys.
import type { BatchItemJson } from './batch-item.js';
import { canonicalJson } from './entry.js';
import type { InclusionBundleJson } from './inclusion-bundle.js';
import { leafHash, MAX_PROOF_HASHES } from './merkle.js';
import { strictBase64 } from './note.js';

export const TLOG_PROOF_HEADER = 'c2sp.org/tlog-proof@v1';

/** What a proof file says, unverified; verifyInclusionBundle checks it. */
export interface TlogProof {
  index: number;
  /** The entry's leaf bytes, from `extra` (absent: the file proves a leaf this tool cannot read). */
  entry?: Buffer;
  /** The inclusion proof, leaf's sibling first. */
  proof: Buffer[];
  /** The checkpoint, verbatim (its signature lines included). */
  checkpoint: string;
  /** A signature of a batch: its item in the entry (unverified; verifyInclusionBundle checks it). */
  batchItem?: BatchItemJson;
}

export class TlogProofFormatError extends Error {}

export function isTlogProof(text: string): boolean {
  return text.startsWith(`${TLOG_PROOF_HEADER}\n`);
}

export function encodeTlogProof(p: TlogProof): string {
  if (!p.checkpoint.endsWith('\n')) throw new TlogProofFormatError('a checkpoint ends with a newline');
  const lines = [
    TLOG_PROOF_HEADER,
    ...(p.entry !== undefined ? [`extra ${extraOf(p.entry, p.batchItem).toString('base64')}`] : []),
    `index ${p.index}`,
    ...p.proof.map((h) => h.toString('base64')),
    '',
  ];
  return `${lines.join('\n')}\n${p.checkpoint}`;
}

/** Reads the format strictly: anything it does not define is an error naming the line. */
export function decodeTlogProof(text: string): TlogProof {
  if (!isTlogProof(text)) throw new TlogProofFormatError(`the first line is not ${TLOG_PROOF_HEADER}`);
  const blank = text.indexOf('\n\n');
  if (blank < 0) throw new TlogProofFormatError('no empty line before the checkpoint');
  const head = text.slice(0, blank).split('\n').slice(1);
  const checkpoint = text.slice(blank + 2);
  let line = 0;
  let entry: Buffer | undefined;
  let batchItem: BatchItemJson | undefined;
  if (head[line]?.startsWith('extra ')) {
    const extra = strictBase64((head[line] as string).slice('extra '.length));
    if (extra === undefined) throw new TlogProofFormatError('the extra line is not standard base64');
    ({ entry, batchItem } = readExtra(extra));
    line++;
  }
  const indexLine = /^index (0|[1-9][0-9]*)$/.exec(head[line] ?? '');
  const index = Number(indexLine?.[1]);
  if (!indexLine || !Number.isSafeInteger(index)) {
    throw new TlogProofFormatError(`line ${line + 2} is not "index N" (a decimal without leading zeros)`);
  }
  const hashes = head.slice(line + 1);
  if (hashes.length > MAX_PROOF_HASHES) throw new TlogProofFormatError(`more than ${MAX_PROOF_HASHES} proof hashes`);
  const proof = hashes.map((h, i) => {
    const bytes = strictBase64(h);
    if (bytes === undefined || bytes.length !== 32) {
      throw new TlogProofFormatError(`line ${line + 3 + i} is not a base64 SHA-256 hash`);
    }
    return bytes;
  });
  if (checkpoint.length === 0) throw new TlogProofFormatError('no checkpoint after the empty line');
  return { index, ...(entry !== undefined && { entry }), proof, checkpoint, ...(batchItem && { batchItem }) };
}

/** `extra`: the entry's leaf bytes, or for a batch item the canonical JSON of the item and the entry. */
function extraOf(entry: Buffer, batchItem: BatchItemJson | undefined): Buffer {
  if (batchItem === undefined) return entry;
  return Buffer.from(canonicalJson({ batch_item: batchItem, entry: entry.toString('base64') }), 'utf8');
}

/** Reads `extra` back: an item with its entry (the only JSON with a top-level batch_item), else the entry. */
function readExtra(extra: Buffer): { entry: Buffer; batchItem?: BatchItemJson } {
  let value: unknown;
  try {
    value = JSON.parse(extra.toString('utf8'));
  } catch {
    return { entry: extra };
  }
  if (value === null || typeof value !== 'object' || !('batch_item' in value)) return { entry: extra };
  const { batch_item, entry, ...rest } = value as Record<string, unknown>;
  if (Object.keys(rest).length > 0 || typeof entry !== 'string') {
    throw new TlogProofFormatError('the extra line holds a batch item without its entry, or more than the two');
  }
  const bytes = strictBase64(entry);
  if (bytes === undefined) throw new TlogProofFormatError("the extra line's entry is not standard base64");
  // Shape-checked with the rest of the bundle (parseInclusionBundle); here it is only carried.
  return { entry: bytes, batchItem: batch_item as BatchItemJson };
}

/** The tree size a checkpoint claims (its second line), before its signature is checked. */
export function claimedTreeSize(checkpoint: string): number {
  const size = /^[^\n]+\n(0|[1-9][0-9]*)\n/.exec(checkpoint)?.[1];
  const n = Number(size);
  if (size === undefined || !Number.isSafeInteger(n)) throw new TlogProofFormatError('the checkpoint has no tree size');
  return n;
}

/** The JSON bundle's shape (what the service answers), for verifyInclusionBundle. */
export function tlogProofToBundle(p: TlogProof): InclusionBundleJson {
  return {
    index: p.index,
    tree_size: claimedTreeSize(p.checkpoint),
    // Without an entry there is no leaf to check: verifyInclusionBundle refuses it, naming why.
    leaf_hash: p.entry !== undefined ? leafHash(p.entry).toString('base64') : '',
    ...(p.entry !== undefined && { entry: p.entry.toString('base64') }),
    proof: p.proof.map((h) => h.toString('base64')),
    checkpoint: p.checkpoint,
    ...(p.batchItem && { batch_item: p.batchItem }),
  };
}

/** A verified bundle as a tlog-proof file (hashes decoded; the bundle was checked before it is kept). */
export function bundleToTlogProof(b: InclusionBundleJson): TlogProof {
  return {
    index: b.index,
    ...(b.entry !== undefined && { entry: Buffer.from(b.entry, 'base64') }),
    proof: b.proof.map((h) => Buffer.from(h, 'base64')),
    checkpoint: b.checkpoint,
    ...(b.batch_item && { batchItem: b.batch_item }),
  };
}
