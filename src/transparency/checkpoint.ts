// C2SP tlog-checkpoint bodies (c2sp.org/tlog-checkpoint): `<origin>\n<tree size>\n<base64 root hash>\n`, signed as
// a signed note whose key name is the origin.
export interface CheckpointBody {
  origin: string;
  size: number;
  root: Buffer;
}

export function formatCheckpoint(c: CheckpointBody): string {
  return `${c.origin}\n${c.size}\n${c.root.toString('base64')}\n`;
}

/** Parses a checkpoint's note text (extension lines after the root are allowed and ignored). */
export function parseCheckpoint(text: string): CheckpointBody | undefined {
  const lines = text.split('\n');
  if (lines.length < 4 || lines[lines.length - 1] !== '') return undefined;
  const [origin, size, root] = lines as [string, string, string];
  if (!origin || !/^(0|[1-9][0-9]*)$/.test(size) || !/^[A-Za-z0-9+/]{43}=$/.test(root)) return undefined;
  return { origin, size: Number(size), root: Buffer.from(root, 'base64') };
}
