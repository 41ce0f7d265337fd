// C2SP tlog-checkpoint bodies (c2sp.org/tlog-checkpoint) as the log writes them: `<origin>\n<tree size>\n<base64
// root hash>\n`, signed as a signed note whose key name is the origin. Reading one is verify/checkpoint.ts's.
export interface CheckpointBody {
  origin: string;
  size: number;
  root: Buffer;
}

export function formatCheckpoint(c: CheckpointBody): string {
  return `${c.origin}\n${c.size}\n${c.root.toString('base64')}\n`;
}
