// An inclusion proof as the service answers it (GET /log/proof/inclusion) and as `signbridge audit prove --out`
// keeps it beside an artifact: the entry, its index, the proof hashes and the signed checkpoint of exactly that
// tree size; for a signature of a batch, the item and its path in the batch entry too (batch-item.ts). Verifying
// it needs the log's public key and nothing else.
import {
  BatchItemError,
  type BatchItemJson,
  parseBatchItem,
  type VerifiedBatchItem,
  verifyBatchItem,
} from './batch-item.js';
import { type Checkpoint, CheckpointError, openCheckpoint } from './checkpoint.js';
import { EntryError, type LogEntry, parseLeafEntry } from './entry.js';
import { HASH_SIZE, leafHash, MAX_PROOF_HASHES, verifyInclusion } from './merkle.js';
import { strictBase64, type VerifierKey } from './note.js';

export const BUNDLE_FORMAT = 'signbridge-log-inclusion-v1';

/** The JSON form: the service's answer, with `format` added when it is saved. */
export interface InclusionBundleJson {
  format?: string;
  index: number;
  tree_size: number;
  leaf_hash: string;
  entry?: string;
  proof: string[];
  checkpoint: string;
  /** A signature of a batch: the item, and its path to the batch entry's root. */
  batch_item?: BatchItemJson;
}

export interface VerifiedInclusion {
  index: number;
  checkpoint: Checkpoint;
  entry: LogEntry;
  leafHash: Buffer;
  /** The batch item proved in `entry`, when the proof is of a signature of a batch. */
  item?: VerifiedBatchItem;
}

/** What a proof fails on: the log (or whoever made the bundle) does not prove the entry. */
export class InclusionError extends Error {}

/** Reads the JSON shape without trusting anything in it yet. */
export function parseInclusionBundle(value: unknown): InclusionBundleJson {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new InclusionError('the proof is not a JSON object');
  }
  const v = value as Record<string, unknown>;
  if (v.format !== undefined && v.format !== BUNDLE_FORMAT) {
    throw new InclusionError(`the proof's format is ${JSON.stringify(v.format)}, not ${BUNDLE_FORMAT}`);
  }
  if (!Number.isSafeInteger(v.index) || (v.index as number) < 0) throw new InclusionError('the proof has no index');
  if (!Number.isSafeInteger(v.tree_size) || (v.tree_size as number) < 1) {
    throw new InclusionError('the proof has no tree_size');
  }
  if (typeof v.leaf_hash !== 'string') throw new InclusionError('the proof has no leaf_hash');
  if (v.entry !== undefined && typeof v.entry !== 'string') throw new InclusionError('the proof entry is not base64');
  if (!Array.isArray(v.proof) || v.proof.length > MAX_PROOF_HASHES || !v.proof.every((p) => typeof p === 'string')) {
    throw new InclusionError('the proof has no list of hashes');
  }
  if (typeof v.checkpoint !== 'string') throw new InclusionError('the proof has no checkpoint');
  let batchItem: BatchItemJson | undefined;
  try {
    batchItem = v.batch_item === undefined ? undefined : parseBatchItem(v.batch_item);
  } catch (err) {
    if (err instanceof BatchItemError) throw new InclusionError(err.message);
    throw err;
  }
  return {
    index: v.index as number,
    tree_size: v.tree_size as number,
    leaf_hash: v.leaf_hash,
    ...(v.entry !== undefined && { entry: v.entry as string }),
    proof: v.proof as string[],
    checkpoint: v.checkpoint,
    ...(batchItem && { batch_item: batchItem }),
  };
}

export function hashFromBase64(value: string, what: string): Buffer {
  const bytes = strictBase64(value);
  if (bytes === undefined || bytes.length !== HASH_SIZE)
    throw new InclusionError(`${what} is not a base64 SHA-256 hash`);
  return bytes;
}

/**
 * Checks, in order: the checkpoint is signed by `key` and is of the proof's tree size; the entry's bytes hash to
 * the leaf hash; the proof leads from that leaf at `index` to the checkpoint's root; the entry is an audit entry
 * whose seq is index + 1; and a batch item, if the bundle has one, leads by its path to the entry's batch root.
 * Throws InclusionError naming the first check that fails.
 */
export function verifyInclusionBundle(bundle: InclusionBundleJson, key: VerifierKey): VerifiedInclusion {
  let checkpoint: Checkpoint;
  try {
    checkpoint = openCheckpoint(bundle.checkpoint, key);
  } catch (err) {
    if (err instanceof CheckpointError) throw new InclusionError(err.message);
    throw err;
  }
  if (checkpoint.size !== bundle.tree_size) {
    throw new InclusionError(`the checkpoint is of tree size ${checkpoint.size}, the proof of ${bundle.tree_size}`);
  }
  if (bundle.index >= bundle.tree_size) {
    throw new InclusionError(`index ${bundle.index} is outside the tree of ${bundle.tree_size} entries`);
  }
  if (bundle.entry === undefined) throw new InclusionError('the proof carries no entry (another tenant’s entry?)');
  const entryBytes = strictBase64(bundle.entry);
  if (entryBytes === undefined) throw new InclusionError('the entry is not base64');
  const leaf = leafHash(entryBytes);
  if (!leaf.equals(hashFromBase64(bundle.leaf_hash, 'leaf_hash'))) {
    throw new InclusionError('the entry does not hash to the proof’s leaf hash (the entry was changed)');
  }
  const proof = bundle.proof.map((p, i) => hashFromBase64(p, `proof hash ${i}`));
  if (!verifyInclusion(bundle.index, bundle.tree_size, leaf, proof, checkpoint.root)) {
    throw new InclusionError(
      `the inclusion proof does not lead from entry ${bundle.index} to the root of the signed checkpoint of size ${checkpoint.size}`,
    );
  }
  let entry: LogEntry;
  try {
    entry = parseLeafEntry(entryBytes);
  } catch (err) {
    if (err instanceof EntryError) throw new InclusionError(err.message);
    throw err;
  }
  if (entry.seq !== bundle.index + 1) {
    throw new InclusionError(
      `the entry's seq is ${entry.seq}, but the leaf at index ${bundle.index} is seq ${bundle.index + 1}`,
    );
  }
  let item: VerifiedBatchItem | undefined;
  try {
    item = bundle.batch_item === undefined ? undefined : verifyBatchItem(entry, parseBatchItem(bundle.batch_item));
  } catch (err) {
    if (err instanceof BatchItemError) throw new InclusionError(err.message);
    throw err;
  }
  return { index: bundle.index, checkpoint, entry, leafHash: leaf, ...(item && { item }) };
}
