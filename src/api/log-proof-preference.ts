// `Prefer: wait-for-log` on a signing request (docs/api.md): the answer waits until the signature's audit entry is
// in a signed checkpoint and carries its C2SP tlog-proof (the inclusion proof, the checkpoint, the entry), so the
// client keeps a proof with the signature without asking again. RFC 7240's `wait=N` bounds the wait in seconds;
// when no checkpoint holds the entry in time the signature is answered without a proof (it is made and logged
// either way) and without Preference-Applied. `wait-for-log=witnessed` waits, within the same bound, for a
// checkpoint the log's witnesses cosigned (docs/transparency.md, "Waiting for the witnesses"). The routes that
// sign (/v1/sign and the others with Signbridge-Log-Index, /v1/sign_batch, KMS Sign) all answer through here.
import type { LogService } from '../transparency/log-service.js';
import type { BatchItemJson } from '../transparency/verify/batch-item.js';
import { encodeTlogProof } from '../transparency/verify/tlog-proof.js';

export const WAIT_FOR_LOG = 'wait-for-log';
export const WITNESSED = 'witnessed';
/** Without `wait=N`: a checkpoint comes within about 1.25 s with the default settings. */
export const DEFAULT_WAIT_MS = 10_000;
export const MAX_WAIT_MS = 60_000;

/** `yes` when every witness waited for cosigned the proof's checkpoint, `no` when the wait ended first. */
export const LOG_WITNESSED_HEADER = 'Signbridge-Log-Witnessed';

export interface LogPreference {
  waitMs: number;
  /** `wait-for-log=witnessed`: wait for the witnesses' cosignatures too. */
  witnessed: boolean;
}

/** What the request asks of the log, or undefined when it does not prefer wait-for-log. */
export function logPreferenceOf(prefer: string | string[] | undefined): LogPreference | undefined {
  if (prefer === undefined) return undefined;
  const text = Array.isArray(prefer) ? prefer.join(',') : prefer;
  // Each preference is `token [= value] *(; parameter)`; the value is compared without quotes, in any case.
  const asked = text
    .split(',')
    .map((p) => /^\s*([^=;\s]+)\s*(?:=\s*"?([^";]*)"?)?/.exec(p.split(';')[0] ?? ''))
    .find((m) => m?.[1]?.toLowerCase() === WAIT_FOR_LOG);
  if (!asked) return undefined;
  // RFC 7240's own `wait=N` preference (`wait-for-log, wait=5`), also taken as its parameter (`wait-for-log; wait=5`).
  const wait = text
    .split(/[,;]/)
    .map((p) => /^wait\s*=\s*"?([0-9]{1,6})"?$/i.exec(p.trim())?.[1])
    .find((v) => v !== undefined);
  return {
    waitMs: wait === undefined ? DEFAULT_WAIT_MS : Math.min(Number(wait) * 1000, MAX_WAIT_MS),
    witnessed: asked[2]?.trim().toLowerCase() === WITNESSED,
  };
}

/** How long the request asks to wait for the log, or undefined when it does not prefer wait-for-log. */
export function logWaitOf(prefer: string | string[] | undefined): number | undefined {
  return logPreferenceOf(prefer)?.waitMs;
}

export interface LogProofs {
  /** The tlog-proof text of each entry asked for, in order, all against one checkpoint. */
  proofs: string[];
  /** Every witness waited for cosigned that checkpoint (only with `witnessed`). */
  witnessed: boolean;
}

/**
 * The tlog-proofs of entries `logIndexes` (one signature's, or a batch's), against one checkpoint that holds them
 * all, once published within the wait; undefined when none was.
 */
export async function logProofsOf(
  log: LogService,
  logIndexes: readonly number[],
  preference: LogPreference,
  /** A batch's signatures (issue 46): each index's item, and where the items' paths come from. */
  batch?: { items: readonly number[]; proof: (seq: number, item: number) => Promise<BatchItemJson | undefined> },
): Promise<LogProofs | undefined> {
  if (logIndexes.length === 0) return undefined;
  const found = await log.checkpointWhenLogged(Math.max(...logIndexes), preference.waitMs, preference.witnessed);
  if (!found) return undefined;
  const proofs: string[] = [];
  for (const [i, index] of logIndexes.entries()) {
    const answer = await log.inclusion(index, found.checkpoint.treeSize);
    const item = batch?.items[i];
    const batchItem = batch && item !== undefined ? await batch.proof(index + 1, item) : undefined;
    proofs.push(
      encodeTlogProof({
        index: answer.index,
        entry: answer.entry,
        proof: answer.proof,
        checkpoint: answer.checkpoint.note,
        ...(batchItem && { batchItem }),
      }),
    );
  }
  return { proofs, witnessed: found.witnessed };
}

/**
 * The response headers that say what was applied: Preference-Applied (`wait-for-log`, or `wait-for-log=witnessed`
 * when the witnesses cosigned) and, when the witnesses were asked for, Signbridge-Log-Witnessed. None without a proof.
 */
export function logProofHeaders(preference: LogPreference, got: LogProofs | undefined): Record<string, string> {
  if (!got) return {};
  if (!preference.witnessed) return { 'Preference-Applied': WAIT_FOR_LOG };
  return {
    'Preference-Applied': got.witnessed ? `${WAIT_FOR_LOG}=${WITNESSED}` : WAIT_FOR_LOG,
    [LOG_WITNESSED_HEADER]: got.witnessed ? 'yes' : 'no',
  };
}
