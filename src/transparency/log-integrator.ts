// Extends the tree with audit entries, in batches, off the signing path: reads entries past the tree's size, checks
// that they continue the hash chain from the tree's last entry (so a rewritten history is never taken into the
// tree), hashes them as leaves and writes the tiles that changed with the new size, all in one store write.
import {
  type AuditRow,
  entryHashOfLeaf,
  GENESIS_HASH,
  leafBytes,
  leafJson,
  leafJsonOfRow,
} from '../store/audit/audit-chain.js';
import type { LogReader, LogWrites } from '../store/log/log-store.js';
import type { AuditContent } from '../store/store.js';
import { appendLeaves, edgeTiles } from './tiles.js';
import { leafHashOfText } from './verify/merkle.js';

/** The stored log does not hold together: the service refuses to extend or sign it (docs/transparency.md). */
export class LogIntegrityError extends Error {
  override readonly name = 'LogIntegrityError';
}

/** An audit row as the chain and the tree see it. */
export function entryOfRow(row: AuditRow): AuditContent {
  return {
    at: row.at,
    tenantId: row.tenant_id,
    actor: row.actor,
    action: row.action,
    outcome: row.outcome,
    details: JSON.parse(row.details),
  };
}

/** The leaf bytes of an audit row (leafBytes over the row's fields). */
export function leafBytesOfRow(row: AuditRow): Buffer {
  return leafBytes(row.seq, entryOfRow(row));
}

/**
 * The plan of one integration step (`full`: it took as many entries as it could, so more may be waiting): up to
 * `batch` entries appended, but not past `checkpointEvery` entries after
 * the latest checkpoint (so that one is published at least every so many entries), or undefined when none are
 * waiting. Throws LogIntegrityError when the entries do not continue the chain the tree was built on.
 */
export async function planIntegration(
  reader: LogReader,
  batch: number,
  checkpointEvery: number,
): Promise<(LogWrites & { full: boolean }) | undefined> {
  const from = await reader.state();
  const latest = await reader.latestCheckpoint();
  const toNextCheckpoint = latest ? latest.treeSize + checkpointEvery - from.treeSize : batch;
  const limit = Math.max(1, Math.min(batch, toNextCheckpoint));
  const rows = await reader.auditRows(from.treeSize, limit);
  if (rows.length === 0) return undefined;
  let prev = from.treeSize === 0 ? GENESIS_HASH : from.chainHash;
  const leaves: Buffer[] = [];
  for (const [i, row] of rows.entries()) {
    const seq = from.treeSize + 1 + i;
    if (row.seq !== seq) {
      throw new LogIntegrityError(`audit entry ${seq} is missing (found ${row.seq} next): not extending the log`);
    }
    if (row.prev_hash !== prev) {
      throw new LogIntegrityError(
        `audit entry ${seq} does not follow entry ${seq - 1} as the log recorded it (history rewritten): not extending the log`,
      );
    }
    // The row's texts put together are the leaf when they hash to the chain's hash (then they are the very text
    // hashed when the entry was written); rows stored before details were canonical take the parsing way.
    let json = leafJsonOfRow(row);
    if (entryHashOfLeaf(prev, json) !== row.hash) {
      json = leafJson(seq, entryOfRow(row));
      if (entryHashOfLeaf(prev, json) !== row.hash) {
        throw new LogIntegrityError(`audit entry ${seq} does not match its chain hash (edited): not extending the log`);
      }
    }
    leaves.push(leafHashOfText(json));
    prev = row.hash;
  }
  const edge = await reader.tiles(edgeTiles(from.treeSize));
  let tiles: ReturnType<typeof appendLeaves>;
  try {
    tiles = appendLeaves(from.treeSize, edge, leaves);
  } catch (err) {
    throw new LogIntegrityError(`the stored tiles do not match the tree's size: ${(err as Error).message}`);
  }
  return { from, to: { treeSize: from.treeSize + rows.length, chainHash: prev }, tiles, full: rows.length === limit };
}
