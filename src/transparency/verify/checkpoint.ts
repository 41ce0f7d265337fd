// C2SP tlog-checkpoint (c2sp.org/tlog-checkpoint): a signed note whose text is origin, tree size and root hash,
// then optional extension lines. Only a checkpoint signed by the pinned key is read, and its origin must be that
// key's name, so a note of another log signed by the same key is not taken for this log's.
import { EMPTY_ROOT, HASH_SIZE } from './merkle.js';
import { NoteError, strictBase64, type VerifierKey, verifyNote } from './note.js';

export interface Checkpoint {
  origin: string;
  size: number;
  root: Buffer;
  extensions: string[];
  /** The signed text (origin, size, root, extensions), with its final newline. */
  text: string;
}

export class CheckpointError extends Error {}

export function parseCheckpointText(text: string): Checkpoint {
  if (!text.endsWith('\n')) throw new CheckpointError('checkpoint text does not end with a newline');
  const lines = text.slice(0, -1).split('\n');
  if (lines.length < 3) throw new CheckpointError('checkpoint text has fewer than three lines');
  if (lines.some((l) => l.length === 0)) throw new CheckpointError('checkpoint text has an empty line');
  const [origin, sizeLine, rootLine, ...extensions] = lines as [string, string, string, ...string[]];
  if (!/^(?:0|[1-9][0-9]*)$/.test(sizeLine)) {
    throw new CheckpointError(`checkpoint size ${JSON.stringify(sizeLine)} is not a decimal without leading zeros`);
  }
  const size = Number(sizeLine);
  if (!Number.isSafeInteger(size)) throw new CheckpointError(`checkpoint size ${sizeLine} is too large`);
  const root = strictBase64(rootLine);
  if (root === undefined || root.length !== HASH_SIZE) {
    throw new CheckpointError(`checkpoint root ${JSON.stringify(rootLine)} is not a base64 SHA-256 hash`);
  }
  // RFC 9162: the empty tree's root is the hash of nothing; anything else is not a tree of size 0.
  if (size === 0 && !root.equals(EMPTY_ROOT))
    throw new CheckpointError('checkpoint of size 0 with a root that is not SHA-256("")');
  return { origin, size, root, extensions, text };
}

/** The checkpoint in `note` once `key` verifies it and its origin is the key's name. */
export function openCheckpoint(note: Uint8Array | string, key: VerifierKey): Checkpoint {
  let text: string;
  try {
    text = verifyNote(note, key);
  } catch (err) {
    if (err instanceof NoteError) throw new CheckpointError(`checkpoint: ${err.message}`);
    throw err;
  }
  const checkpoint = parseCheckpointText(text);
  if (checkpoint.origin !== key.name) {
    throw new CheckpointError(
      `checkpoint origin ${JSON.stringify(checkpoint.origin)} is not the key's name ${key.name}`,
    );
  }
  return checkpoint;
}
