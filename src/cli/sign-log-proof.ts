// `signbridge sign --log-proof [--witness-policy FILE]`: keeps the proof the service answered with beside the
// signature (FILE.sig.tlog-proof), after checking that its entry names this signature and, with a witness policy,
// that its checkpoint carries the cosignatures the policy's quorum asks for (C2SP tlog-policy), so that the file
// passes `signbridge audit prove --bundle --witness-policy` later, offline. With a policy the request asks for a
// witnessed checkpoint (`Prefer: wait-for-log=witnessed`, docs/transparency.md).
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import type { SignResult } from '../../daemon/upstream/upstream.js';
import { type Checkpoint, parseCheckpointText } from '../transparency/verify/checkpoint.js';
import { verifyInclusionBundle } from '../transparency/verify/inclusion-bundle.js';
import { decodeTlogProof, tlogProofToBundle } from '../transparency/verify/tlog-proof.js';
import {
  checkQuorum,
  PolicyFileError,
  parseWitnessPolicy,
  type QuorumVerdict,
  type WitnessPolicy,
} from '../transparency/verify/witness-policy.js';
import { ServiceClientError } from './service-client.js';

const say = (line: string) => process.stderr.write(`${line}\n`);

/** --witness-policy, read strictly before anything is signed; a bad file stops the command. */
export function readSignWitnessPolicy(file: string | undefined, logProof: boolean): WitnessPolicy | undefined {
  if (file === undefined) return undefined;
  if (!logProof) throw new ServiceClientError('--witness-policy is what --log-proof checks: give --log-proof too');
  try {
    return parseWitnessPolicy(readFileSync(file, 'utf8'));
  } catch (err) {
    if (err instanceof PolicyFileError) throw new ServiceClientError(`--witness-policy ${file}: ${err.message}`);
    throw err;
  }
}

/**
 * How long the service is asked to wait for the (witnessed) checkpoint: within the request's own timeout, leaving
 * a few seconds for the signature itself; at most 60 s, what the service allows.
 */
export function logWaitSeconds(requestTimeoutMs: number): number {
  return Math.max(1, Math.min(60, Math.floor(requestTimeoutMs / 1000) - 5));
}

/**
 * FILE.sig.tlog-proof beside the signature: the proof the service answered with, checked to be about this
 * signature (its entry names the signature's SHA-256) and, with a policy, witnessed as it requires, before it is
 * kept. Verifying it against the log's key is `signbridge audit prove --bundle` (offline, with the pinned key).
 */
export function keepLogProof(
  result: SignResult & { kind: 'signed' },
  out: string,
  context: { tenant: string; policyFile?: string | undefined; policy?: WitnessPolicy | undefined },
): number {
  const proofFile = `${out}.tlog-proof`;
  const policyArgs = context.policyFile !== undefined ? ` --witness-policy ${context.policyFile}` : '';
  const later = `signbridge audit prove --tenant ${context.tenant} --signature ${out}${policyArgs} --wait 60 --out ${proofFile}`;
  if (result.logProof === undefined) {
    say(
      `signbridge sign: the service gave no log proof in time (log index ${result.logIndex ?? 'unknown'}); ` +
        `fetch it later: ${later}`,
    );
    return 1;
  }
  let entry: Record<string, unknown> | undefined;
  let named: unknown;
  try {
    const proof = decodeTlogProof(result.logProof);
    entry = proof.entry && (JSON.parse(proof.entry.toString('utf8')) as Record<string, unknown>);
    // A signature of a batch is named by its item (checked against the entry's root by `audit prove --bundle`).
    named = proof.batchItem
      ? proof.batchItem.signature_sha256
      : ((entry?.details ?? {}) as Record<string, unknown>).signature_sha256;
  } catch {
    entry = undefined;
  }
  const sha256 = createHash('sha256').update(result.signature).digest('hex');
  if (named !== sha256) {
    say('signbridge sign: the log proof the service answered is not about this signature; not written');
    return 1;
  }
  if (context.policy) {
    let verdict: QuorumVerdict;
    try {
      verdict = quorumOf(result.logProof, context.policy);
    } catch (err) {
      say(
        `signbridge sign: the log proof the service answered does not verify: ${(err as Error).message}; not written`,
      );
      return 1;
    }
    if (!verdict.met) {
      const got = verdict.cosigned.length > 0 ? verdict.cosigned.join(', ') : 'none';
      say(
        `signbridge sign: the log proof's checkpoint is not witnessed as the policy requires (it needs ` +
          `${verdict.required}, cosigned by ${got}); not written. Fetch a witnessed one later: ${later}`,
      );
      return 1;
    }
    say(
      `witnessed: cosigned by ${verdict.cosigned.join(', ') || 'no witness (quorum none)'}; quorum ${verdict.required} met`,
    );
  }
  writeFileSync(proofFile, result.logProof, { mode: 0o644 });
  say(`log proof (index ${String(entry?.seq === undefined ? '?' : Number(entry.seq) - 1)}) written to ${proofFile}`);
  return 0;
}

/**
 * The policy's verdict on the proof's checkpoint. With one log line in the policy the whole proof is verified
 * against that key first; without, the checkpoint's text is read as it is (the cosignatures are verified against
 * the witnesses' keys either way; `audit prove --bundle --public-key` checks the log's own signature).
 */
function quorumOf(text: string, policy: WitnessPolicy): QuorumVerdict {
  const proof = decodeTlogProof(text);
  const logKey = policy.logs.length === 1 ? policy.logs[0] : undefined;
  const checkpoint: Checkpoint = logKey
    ? verifyInclusionBundle(tlogProofToBundle(proof), logKey).checkpoint
    : parseCheckpointText(proof.checkpoint.slice(0, proof.checkpoint.indexOf('\n\n') + 1));
  return checkQuorum(policy, proof.checkpoint, checkpoint);
}
