// A tile of the transparency log's Merkle tree, as the store keeps it (the tiles themselves: src/transparency/tiles.ts).

export interface TileKey {
  level: number;
  index: number;
}

export interface Tile extends TileKey {
  /** Concatenated 32-byte hashes, 1 to 256 of them. */
  hashes: Buffer;
}

export const tileId = (level: number, index: number): string => `${level}/${index}`;
