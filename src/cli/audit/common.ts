// What `audit prove` and `audit watch` share: the service options, the log's key (pinned by the user, or fetched
// with a warning), and one way to end: 0 verified, 1 the log does not prove it (or misbehaved), 2 it could not be
// checked (service unreachable or refusing, bad arguments); messages on stderr.
import { existsSync, readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { CredentialError } from '../../../daemon/credentials.js';
import { type Checkpoint, CheckpointError } from '../../transparency/verify/checkpoint.js';
import { CosignatureError } from '../../transparency/verify/cosignature.js';
import { EntryError } from '../../transparency/verify/entry.js';
import { InclusionError } from '../../transparency/verify/inclusion-bundle.js';
import { NoteError, parseVerifierKey, type VerifierKey } from '../../transparency/verify/note.js';
import {
  checkQuorum,
  PolicyFileError,
  parseWitnessPolicy,
  type QuorumVerdict,
  type WitnessPolicy,
} from '../../transparency/verify/witness-policy.js';
import { resolveService, ServiceClientError, type ServiceFlags } from '../service-client.js';
import { LogHttp, LogServiceError, LogUnavailableError } from './log-http.js';

export const EXIT_VERIFIED = 0;
export const EXIT_NOT_PROVEN = 1;
export const EXIT_CANNOT_CHECK = 2;

export interface LogFlags extends ServiceFlags {
  publicKey?: string;
  witnessPolicy?: string;
}

/** Arguments or local files the command cannot use. */
export class AuditUsageError extends Error {}
/** The log answered something that does not verify: a failed proof, a fork, a bad signature. */
export class LogMisbehaviourError extends Error {}
/** The checkpoint verifies but lacks the witnesses' cosignatures the policy asks for. */
export class WitnessQuorumError extends Error {}

export const say = (line: string) => process.stderr.write(`${line}\n`);

export function logOptions(cmd: Command): Command {
  return cmd
    .option(
      '--public-key <vkey-or-file>',
      "the log's verifier key (name+keyID+key, as GET /log/public-key shows it), or a file holding it; pin it: without it the key is fetched from the service, which proves nothing",
    )
    .option('--service-url <url>', 'signing service base URL (env SIGNBRIDGE_SERVICE_URL; default: the last login)')
    .option(
      '--api-key-file <file>',
      'file holding the API key, mode 600 (or env SIGNBRIDGE_API_KEY_FILE, SIGNBRIDGE_API_KEY; default: the key from `signbridge login`; none for a public log)',
    )
    .option(
      '--witness-policy <file>',
      'a C2SP tlog-policy file: the checkpoint must carry the cosignatures of the witnesses its quorum names (its log line may stand for --public-key)',
    )
    .option('--insecure-http', 'allow a plain http:// service URL to another host (the key would travel unencrypted)')
    .option('--timeout <seconds>', 'how long one request to the service may take', '30');
}

export function openLogHttp(flags: LogFlags): LogHttp {
  const { base, apiKey, apiKeyGiven, timeoutMs } = resolveService(flags);
  if (apiKeyGiven) return new LogHttp({ base, apiKey, timeoutMs });
  // No key configured and no login: a public log is read without one; a private one answers 401, said below.
  try {
    apiKey.get();
    return new LogHttp({ base, apiKey, timeoutMs });
  } catch {
    return new LogHttp({ base, apiKey: undefined, timeoutMs });
  }
}

/** --public-key as given: a file that holds a vkey line, or the vkey itself. */
export function pinnedKey(value: string): VerifierKey {
  let vkey = value;
  if (existsSync(value)) {
    const lines = readFileSync(value, 'utf8')
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l && !l.startsWith('#'));
    if (lines.length !== 1) throw new AuditUsageError(`--public-key ${value}: the file must hold one vkey line`);
    vkey = lines[0] as string;
  }
  try {
    return parseVerifierKey(vkey);
  } catch (err) {
    if (err instanceof NoteError) throw new AuditUsageError(`--public-key: ${err.message} (neither a file nor a vkey)`);
    throw err;
  }
}

/** --witness-policy, read once; undefined without it. */
export function witnessPolicyOf(flags: LogFlags): WitnessPolicy | undefined {
  if (flags.witnessPolicy === undefined) return undefined;
  try {
    return parseWitnessPolicy(readFileSync(flags.witnessPolicy, 'utf8'));
  } catch (err) {
    if (err instanceof PolicyFileError)
      throw new AuditUsageError(`--witness-policy ${flags.witnessPolicy}: ${err.message}`);
    throw err;
  }
}

/** The policy's one log key, standing for --public-key; several logs need --public-key to say which. */
export function policyLogKey(flags: LogFlags): VerifierKey | undefined {
  const logs = witnessPolicyOf(flags)?.logs ?? [];
  if (logs.length > 1 && flags.publicKey === undefined) {
    throw new AuditUsageError(`--witness-policy names ${logs.length} logs: say which with --public-key`);
  }
  return logs[0];
}

/**
 * Throws WitnessQuorumError unless the checkpoint `note` (opened as `checkpoint` with the log's key) carries the
 * cosignatures the policy's quorum asks for; a witness line that does not verify is the log misbehaving.
 */
export function requireQuorum(policy: WitnessPolicy | undefined, note: string, checkpoint: Checkpoint): void {
  if (!policy) return;
  let verdict: QuorumVerdict;
  try {
    verdict = checkQuorum(policy, note, checkpoint);
  } catch (err) {
    if (err instanceof CosignatureError) throw new LogMisbehaviourError(err.message);
    throw err;
  }
  if (!verdict.met) {
    const got = verdict.cosigned.length > 0 ? verdict.cosigned.join(', ') : 'none';
    throw new WitnessQuorumError(
      `the checkpoint of size ${checkpoint.size} is not witnessed as the policy requires: it needs ${verdict.required}, cosigned by ${got}`,
    );
  }
  say(
    `witnessed: cosigned by ${verdict.cosigned.join(', ') || 'no witness (quorum none)'}; quorum ${verdict.required} met`,
  );
}

/** The key from --public-key, the policy's log line, or else from the service, with a warning (trust on first use). */
export async function logKey(flags: LogFlags, log: LogHttp): Promise<VerifierKey> {
  if (flags.publicKey !== undefined) return pinnedKey(flags.publicKey);
  const fromPolicy = policyLogKey(flags);
  if (fromPolicy) return fromPolicy;
  const vkey = (await log.publicKey()).trim();
  let key: VerifierKey;
  try {
    key = parseVerifierKey(vkey);
  } catch (err) {
    if (err instanceof NoteError) throw new LogMisbehaviourError(`GET /log/public-key: ${err.message}`);
    throw err;
  }
  say(
    `warning: no --public-key: using the key the service sent (${vkey}). A service that lies can send its own key ` +
      'too, so this checks the proof but not the service; pin this key (--public-key) once you have it from a source you trust',
  );
  return key;
}

/** Runs a command body and turns what it throws into a message and an exit status. */
export async function runAudit(command: string, body: () => Promise<number>): Promise<number> {
  try {
    return await body();
  } catch (err) {
    const [message, code] = describe(err);
    say(`signbridge audit ${command}: ${message}`);
    return code;
  }
}

function describe(err: unknown): [string, number] {
  if (
    err instanceof InclusionError ||
    err instanceof CheckpointError ||
    err instanceof EntryError ||
    err instanceof LogMisbehaviourError ||
    err instanceof WitnessQuorumError
  ) {
    return [`the log does not prove it: ${err.message}`, EXIT_NOT_PROVEN];
  }
  if (err instanceof LogUnavailableError) return [`${err.message} (temporary: try again)`, EXIT_CANNOT_CHECK];
  if (err instanceof LogServiceError) {
    const hint =
      err.status === 401 || err.status === 403
        ? ' (the log is not public: pass --api-key-file FILE, set SIGNBRIDGE_API_KEY or run `signbridge login`)'
        : '';
    return [`${err.message}${hint}`, EXIT_CANNOT_CHECK];
  }
  if (err instanceof AuditUsageError || err instanceof ServiceClientError || err instanceof CredentialError) {
    return [err.message, EXIT_CANNOT_CHECK];
  }
  const e = err as NodeJS.ErrnoException;
  if (e.code === 'ENOENT' || e.code === 'EACCES' || e.code === 'EISDIR') {
    return [`${e.path ?? 'file'}: ${e.code}`, EXIT_CANNOT_CHECK];
  }
  return [e.message ?? String(err), EXIT_CANNOT_CHECK];
}
