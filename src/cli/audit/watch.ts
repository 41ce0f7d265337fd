// `signbridge audit watch`: a monitor that remembers the last checkpoint it verified (in --state FILE) and accepts
// a new one only when the log's key signed it and a consistency proof shows the old tree is a prefix of the new.
// A log that shrank, forked (same size, another root) or rewrote its history is reported, with both checkpoints,
// and the state is left as it was: the old checkpoint stays the reference and the new one the evidence.

import { randomBytes } from 'node:crypto';
import { closeSync, fsyncSync, openSync, readFileSync, renameSync, rmSync, writeSync } from 'node:fs';
import type { Command } from 'commander';
import { type Checkpoint, openCheckpoint, parseCheckpointText } from '../../transparency/verify/checkpoint.js';
import { hashFromBase64 } from '../../transparency/verify/inclusion-bundle.js';
import { verifyConsistency } from '../../transparency/verify/merkle.js';
import { hex8, parseSignedNote, parseVerifierKey, type VerifierKey } from '../../transparency/verify/note.js';
import {
  AuditUsageError,
  EXIT_VERIFIED,
  type LogFlags,
  LogMisbehaviourError,
  logKey,
  logOptions,
  openLogHttp,
  pinnedKey,
  requireQuorum,
  runAudit,
  say,
  witnessPolicyOf,
} from './common.js';
import { type LogHttp, LogUnavailableError } from './log-http.js';

const STATE_FORMAT = 'signbridge-log-watch-v1';

interface WatchFlags extends LogFlags {
  state: string;
  interval?: string;
  once?: boolean;
}

/** The state file: the last verified checkpoint (the signed note as received) and the key that verified it. */
interface WatchState {
  format: typeof STATE_FORMAT;
  vkey: string;
  checkpoint: string;
  verified_at: string;
}

export function registerWatchCommand(audit: Command): void {
  logOptions(
    audit
      .command('watch')
      .description(
        "check that the service's audit log only grows: each new signed checkpoint must be consistent with the last one verified (kept in --state FILE)",
      )
      .requiredOption('--state <file>', 'where the last verified checkpoint is kept (created 0600 on the first run)')
      .option('--interval <seconds>', 'keep watching, checking this often (default: check once and exit)')
      .option('--once', 'check once and exit (the default; for cron and CI)'),
  )
    .addHelpText(
      'after',
      '\nExit status: 0 consistent (or the first checkpoint recorded), 1 the log misbehaved (a fork, a shrunk tree,\n' +
        'a rewritten history, a bad signature), 2 it could not be checked. The first run trusts the checkpoint it\n' +
        'sees (the key must still verify it); the state file then also pins the key unless --public-key is given.',
    )
    .action(async (flags: WatchFlags) => {
      process.exitCode = await runAudit('watch', () => watch(flags));
    });
}

async function watch(flags: WatchFlags): Promise<number> {
  if (flags.once && flags.interval !== undefined) throw new AuditUsageError('--once and --interval: give one');
  const intervalMs = flags.interval === undefined ? undefined : Number(flags.interval) * 1000;
  if (intervalMs !== undefined && !(Number.isFinite(intervalMs) && intervalMs >= 1000)) {
    throw new AuditUsageError(`--interval must be at least 1 second, got ${flags.interval}`);
  }
  const log = openLogHttp(flags);
  if (intervalMs === undefined) return checkOnce(flags, log);
  for (;;) {
    try {
      await checkOnce(flags, log);
    } catch (err) {
      // A service that is away is asked again; anything else (a misbehaving log) ends the watch.
      if (!(err instanceof LogUnavailableError)) throw err;
      say(`signbridge audit watch: ${err.message}; trying again in ${intervalMs / 1000} s`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

async function checkOnce(flags: WatchFlags, log: LogHttp): Promise<number> {
  const state = readState(flags.state);
  const key = await keyFor(flags, log, state);
  const note = await log.checkpoint();
  let next: Checkpoint;
  try {
    next = openCheckpoint(note, key);
  } catch (err) {
    throw new LogMisbehaviourError(`${(err as Error).message}\n${quote(note.toString('utf8'))}`);
  }
  // parseSignedNote in openCheckpoint has checked it is UTF-8.
  const noteText = note.toString('utf8');
  requireQuorum(witnessPolicyOf(flags), noteText, next);
  if (state === undefined) {
    writeState(flags.state, { format: STATE_FORMAT, vkey: key.vkey, checkpoint: noteText, verified_at: now() });
    say(
      `first checkpoint recorded (trusted as the starting point; every later one must be consistent with it): ` +
        `${next.origin}, tree size ${next.size}, root ${next.root.toString('base64')}`,
    );
    return EXIT_VERIFIED;
  }
  const last = stateCheckpoint(state, key);
  const seen = `last verified (${flags.state}):\n${quote(state.checkpoint)}\nnow served:\n${quote(noteText)}`;
  if (next.size < last.size) {
    throw new LogMisbehaviourError(
      `the log shrank from ${last.size} to ${next.size} entries: it was truncated (or the service serves an old checkpoint)\n${seen}`,
    );
  }
  if (next.size === last.size) {
    if (!next.root.equals(last.root)) {
      throw new LogMisbehaviourError(
        `fork: two signed checkpoints of tree size ${next.size} with different roots\n${seen}`,
      );
    }
    if (key.vkey !== state.vkey) writeState(flags.state, { ...state, vkey: key.vkey, verified_at: now() });
    say(`unchanged: ${next.origin}, tree size ${next.size}, root ${next.root.toString('base64')}`);
    return EXIT_VERIFIED;
  }
  // Every tree extends the empty one: nothing to ask (and a service may refuse from=0).
  const proof =
    last.size === 0 ? [] : consistencyProof(await log.consistency(last.size, next.size), last.size, next.size);
  if (!verifyConsistency(last.size, next.size, last.root, next.root, proof)) {
    throw new LogMisbehaviourError(
      `the consistency proof from tree size ${last.size} to ${next.size} does not verify: ` +
        `the new tree does not extend the one verified before (history rewritten?)\n${seen}`,
    );
  }
  writeState(flags.state, { format: STATE_FORMAT, vkey: key.vkey, checkpoint: noteText, verified_at: now() });
  say(
    `consistent: ${next.origin} grew from ${last.size} to ${next.size} entries, root ${next.root.toString('base64')}`,
  );
  return EXIT_VERIFIED;
}

/** --public-key, else the key the state file pinned on the first run, else the service's (with a warning). */
async function keyFor(flags: WatchFlags, log: LogHttp, state: WatchState | undefined): Promise<VerifierKey> {
  if (flags.publicKey !== undefined) {
    const key = pinnedKey(flags.publicKey);
    if (state !== undefined && state.vkey !== key.vkey) {
      say(`note: --public-key ${key.name}+${hex8(key.keyId)} replaces the key the state file had (${state.vkey})`);
    }
    return key;
  }
  if (state !== undefined) return parseVerifierKey(state.vkey);
  return logKey(flags, log);
}

function readState(path: string): WatchState | undefined {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  // A state file that cannot be read is never replaced: it may be what a rewritten log wants gone.
  try {
    const v = JSON.parse(text) as Partial<WatchState>;
    if (v.format === STATE_FORMAT && typeof v.vkey === 'string' && typeof v.checkpoint === 'string') {
      parseVerifierKey(v.vkey);
      parseSignedNote(v.checkpoint);
      return v as WatchState;
    }
  } catch {
    // said below
  }
  throw new AuditUsageError(
    `--state ${path} is not a ${STATE_FORMAT} state file; move it away to start over (the next checkpoint is then trusted as new)`,
  );
}

/** The checkpoint the state file holds. Its signature was checked when it was saved; the origin is checked again. */
function stateCheckpoint(state: WatchState, key: VerifierKey): Checkpoint {
  const checkpoint = parseCheckpointText(parseSignedNote(state.checkpoint).text);
  if (checkpoint.origin !== key.name) {
    throw new AuditUsageError(
      `the state file follows log ${checkpoint.origin}, the key is ${key.name}'s: use another --state FILE per log`,
    );
  }
  return checkpoint;
}

function consistencyProof(answer: unknown, from: number, to: number): Buffer[] {
  const v = answer as { from?: unknown; to?: unknown; proof?: unknown } | null;
  if (v === null || typeof v !== 'object' || v.from !== from || v.to !== to || !Array.isArray(v.proof)) {
    throw new LogMisbehaviourError(`GET /log/proof/consistency answered no proof from ${from} to ${to}`);
  }
  return v.proof.map((p, i) => {
    if (typeof p !== 'string') throw new LogMisbehaviourError(`consistency proof hash ${i} is not base64`);
    try {
      return hashFromBase64(p, `consistency proof hash ${i}`);
    } catch (err) {
      throw new LogMisbehaviourError((err as Error).message);
    }
  });
}

/** Written whole under a temporary name, synced, then renamed: a crash leaves the old state or the new one. */
function writeState(path: string, state: WatchState): void {
  const temporary = `${path}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  const fd = openSync(temporary, 'wx', 0o600);
  try {
    writeSync(fd, `${JSON.stringify(state, null, 2)}\n`);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  try {
    renameSync(temporary, path);
  } catch (err) {
    rmSync(temporary, { force: true });
    throw err;
  }
}

function quote(note: string): string {
  return note
    .trimEnd()
    .split('\n')
    .map((l) => `  | ${l}`)
    .join('\n');
}

function now(): string {
  return new Date().toISOString();
}
