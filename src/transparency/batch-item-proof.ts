// The item half of a batched signature's proof (docs/transparency.md, "A batch's items"): the item as its batch
// entry recorded it and its audit path in the batch's tree, from the batch's items in the store. The entry half is
// the log's inclusion proof of the batch entry (log-service.ts).
import type { Store } from '../store/store.js';
import { BatchTree } from './batch-tree.js';
import { LogNotFoundError } from './log-service.js';
import type { BatchItemJson } from './verify/batch-item.js';

/** The item `index` of the batch entry `seq` with its path; LogNotFoundError when the entry holds no such item. */
export async function batchItemProof(
  store: Pick<Store, 'signatures'>,
  seq: number,
  index: number,
): Promise<BatchItemJson> {
  const items = await store.signatures.batchItems(seq);
  const position = items.findIndex((i) => i.index === index);
  const item = items[position];
  if (item === undefined) {
    throw new LogNotFoundError(
      items.length === 0
        ? `log entry ${seq - 1} is not a batch of signatures`
        : `the batch at log entry ${seq - 1} has no signature at index ${index}`,
    );
  }
  return {
    index,
    position,
    digest: item.digest.toString('base64'),
    signature_sha256: item.signatureSha256.toString('hex'),
    proof: new BatchTree(items).proof(position).map((h) => h.toString('base64')),
  };
}
