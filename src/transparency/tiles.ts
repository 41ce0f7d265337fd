// Interior hashes kept as tlog-tiles-style tiles (c2sp.org/tlog-tiles): the tile at level L, index N holds up to 256
// hashes of tree level 8·L, those of nodes N·256 .. N·256+255. A full tile (256 hashes, 8 KiB) never changes; the
// right-edge tile of each level grows until it is full. Any node of the tree is computed from at most 128 hashes
// of one tile, and a proof at 1M entries needs a handful of tiles.
import { type Tile, type TileKey, tileId } from '../store/records/tiles.js';
import type { NodeSource } from './merkle.js';
import { HASH_SIZE, nodeHash } from './verify/merkle.js';

export { type Tile, type TileKey, tileId };

export const TILE_HEIGHT = 8;
export const TILE_WIDTH = 2 ** TILE_HEIGHT;

/** Hashes at tree level 8·level in a tree of `size` leaves (complete nodes only). */
export function nodesAtTileLevel(size: number, level: number): number {
  return Math.floor(size / TILE_WIDTH ** level);
}

/** The root of 2^k consecutive hashes of one level (k ≤ 8), reduced pairwise. */
export function reduceHashes(hashes: Buffer, from: number, count: number): Buffer {
  let row: Buffer[] = [];
  for (let i = 0; i < count; i++) row.push(hashes.subarray((from + i) * HASH_SIZE, (from + i + 1) * HASH_SIZE));
  while (row.length > 1) {
    const next: Buffer[] = [];
    for (let i = 0; i < row.length; i += 2) next.push(nodeHash(row[i] as Buffer, row[i + 1] as Buffer));
    row = next;
  }
  return row[0] as Buffer;
}

/** Where node(level, index) comes from: which tile, and which of its hashes (2^r of them from `from`). */
export function tileSpan(level: number, index: number): TileKey & { from: number; count: number } {
  const tileLevel = Math.floor(level / TILE_HEIGHT);
  const count = 2 ** (level - tileLevel * TILE_HEIGHT);
  const first = index * count;
  return { level: tileLevel, index: Math.floor(first / TILE_WIDTH), from: first % TILE_WIDTH, count };
}

export class TileMissingError extends Error {}

/** Nodes from tiles in memory. A stored tile may be wider than a smaller tree needs: its prefix is that tree's. */
export class TileNodeSource implements NodeSource {
  constructor(private readonly tiles: ReadonlyMap<string, Buffer>) {}

  node(level: number, index: number): Buffer {
    const span = tileSpan(level, index);
    const hashes = this.tiles.get(tileId(span.level, span.index));
    if (!hashes || hashes.length < (span.from + span.count) * HASH_SIZE) {
      throw new TileMissingError(
        `tile ${span.level}/${span.index} lacks hashes ${span.from}..${span.from + span.count - 1} (node ${level}/${index})`,
      );
    }
    return reduceHashes(hashes, span.from, span.count);
  }
}

/** The tiles a computation over a NodeSource reads: it runs once against a recorder, which answers zeros. */
export function tilesNeeded(compute: (src: NodeSource) => unknown): TileKey[] {
  const seen = new Map<string, TileKey>();
  compute({
    node(level, index) {
      const span = tileSpan(level, index);
      seen.set(tileId(span.level, span.index), { level: span.level, index: span.index });
      return Buffer.alloc(HASH_SIZE);
    },
  });
  return [...seen.values()];
}

/** The right-edge (partial) tile of each level of a tree of `size`: what appending needs besides the new leaves. */
export function edgeTiles(size: number): TileKey[] {
  const out: TileKey[] = [];
  for (let level = 0; nodesAtTileLevel(size, level) > 0; level++) {
    const n = nodesAtTileLevel(size, level);
    if (n % TILE_WIDTH !== 0) out.push({ level, index: Math.floor(n / TILE_WIDTH) });
  }
  return out;
}

/**
 * Appends leaf hashes to a tree of `size` leaves. `edge` holds the stored right-edge tiles (edgeTiles(size)); the
 * result is every tile that changed or came to be, to be written. A tile that fills up yields its root, the next
 * level's new hash. Throws when an edge tile is not as wide as `size` says (the stored tree is damaged).
 */
export function appendLeaves(size: number, edge: ReadonlyMap<string, Buffer>, leaves: readonly Buffer[]): Tile[] {
  const written: Tile[] = [];
  let incoming: Buffer[] = [...leaves];
  for (let level = 0; incoming.length > 0; level++) {
    const count = nodesAtTileLevel(size, level);
    let index = Math.floor(count / TILE_WIDTH);
    const width = count % TILE_WIDTH;
    let current: Buffer[] = [];
    if (width > 0) {
      const stored = edge.get(tileId(level, index));
      if (!stored || stored.length < width * HASH_SIZE) {
        throw new TileMissingError(`edge tile ${level}/${index} should hold ${width} hashes for a tree of ${size}`);
      }
      for (let i = 0; i < width; i++) current.push(stored.subarray(i * HASH_SIZE, (i + 1) * HASH_SIZE));
    }
    const next: Buffer[] = [];
    for (const hash of incoming) {
      current.push(hash);
      if (current.length === TILE_WIDTH) {
        const full = Buffer.concat(current);
        written.push({ level, index, hashes: full });
        next.push(reduceHashes(full, 0, TILE_WIDTH));
        index++;
        current = [];
      }
    }
    if (current.length > 0) written.push({ level, index, hashes: Buffer.concat(current) });
    incoming = next;
  }
  return written;
}
