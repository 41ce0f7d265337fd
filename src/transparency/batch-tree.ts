// The Merkle tree over one batch's items (verify/batch-item.ts defines their leaves): built in memory, since a
// batch holds at most BATCH_MAX items, with the log's own RFC 9162 tree code (merkle.ts) over a NodeSource that
// hashes complete subtrees from the leaves and remembers them.

import { inclusionProof, type NodeSource, rootAt } from './merkle.js';
import { batchItemLeafHash } from './verify/batch-item.js';
import { nodeHash } from './verify/merkle.js';

/** An item as the store keeps it: its place in the request, the digest signed, the signature's SHA-256. */
export interface BatchItemLeaf {
  index: number;
  digest: Buffer;
  signatureSha256: Buffer;
}

export class BatchTree implements NodeSource {
  private readonly levels: Buffer[][];

  /** `items` in leaf order (their positions). */
  constructor(items: readonly BatchItemLeaf[]) {
    if (items.length === 0) throw new RangeError('a batch tree has at least one item');
    this.levels = [items.map((i) => batchItemLeafHash(i.index, i.digest, i.signatureSha256))];
  }

  get size(): number {
    return (this.levels[0] as Buffer[]).length;
  }

  node(level: number, index: number): Buffer {
    let row = this.levels[level];
    if (row === undefined) {
      row = [];
      this.levels[level] = row;
    }
    let hash = row[index];
    if (hash === undefined) {
      hash = nodeHash(this.node(level - 1, 2 * index), this.node(level - 1, 2 * index + 1));
      row[index] = hash;
    }
    return hash;
  }

  root(): Buffer {
    return rootAt(this, this.size);
  }

  /** The audit path of the item at `position`, deepest sibling first. */
  proof(position: number): Buffer[] {
    return inclusionProof(this, position, this.size);
  }
}
