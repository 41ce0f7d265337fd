// `Prefer: wait-for-log` on a signing request (docs/api.md): the answer waits until the signature's audit entry is
// in a signed checkpoint and carries its C2SP tlog-proof (the inclusion proof, the checkpoint, the entry), so the
// client keeps a proof with the signature without asking again. RFC 7240's `wait=N` bounds the wait in seconds;
// when no checkpoint holds the entry in time the signature is answered without a proof (it is made and logged
// either way) and without Preference-Applied.
import type { LogService } from '../transparency/log-service.js';
import { encodeTlogProof } from '../transparency/verify/tlog-proof.js';

export const WAIT_FOR_LOG = 'wait-for-log';
/** Without `wait=N`: a checkpoint comes within about 1.25 s with the default settings. */
export const DEFAULT_WAIT_MS = 10_000;
export const MAX_WAIT_MS = 60_000;

/** How long the request asks to wait for the log, or undefined when it does not prefer wait-for-log. */
export function logWaitOf(prefer: string | string[] | undefined): number | undefined {
  if (prefer === undefined) return undefined;
  const text = Array.isArray(prefer) ? prefer.join(',') : prefer;
  const preferences = text.split(',').map((p) => p.split(';')[0]?.trim().toLowerCase() ?? '');
  if (!preferences.includes(WAIT_FOR_LOG)) return undefined;
  // RFC 7240's own `wait=N` preference (`wait-for-log, wait=5`), also taken as its parameter (`wait-for-log; wait=5`).
  const wait = text
    .split(/[,;]/)
    .map((p) => /^wait\s*=\s*"?([0-9]{1,6})"?$/i.exec(p.trim())?.[1])
    .find((v) => v !== undefined);
  return wait === undefined ? DEFAULT_WAIT_MS : Math.min(Number(wait) * 1000, MAX_WAIT_MS);
}

/** The tlog-proof text of entry `logIndex`, once logged within `waitMs`; undefined otherwise. */
export async function logProofText(log: LogService, logIndex: number, waitMs: number): Promise<string | undefined> {
  const answer = await log.proofWhenLogged(logIndex, waitMs);
  if (!answer) return undefined;
  return encodeTlogProof({
    index: answer.index,
    entry: answer.entry,
    proof: answer.proof,
    checkpoint: answer.checkpoint.note,
  });
}
