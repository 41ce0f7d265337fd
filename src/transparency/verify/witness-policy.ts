// C2SP tlog-policy (c2sp.org/tlog-policy): which logs are trusted, which witnesses, and the quorum of witnesses
// whose cosignatures a checkpoint needs before a verifier believes it. `audit prove` and `audit watch` take one with
// --witness-policy. Read strictly: names defined before use, each member once per group, one quorum line, no
// duplicate keys; anything else is an error naming the line.
import type { Checkpoint } from './checkpoint.js';
import { type CosignerKey, cosignatureTime, parseCosignerKey } from './cosignature.js';
import { NoteError, parseVerifierKey, type VerifierKey } from './note.js';

export type QuorumRule =
  | { kind: 'none' }
  | { kind: 'witness'; name: string }
  | { kind: 'group'; name: string; threshold: number; members: QuorumRule[] };

export interface WitnessPolicy {
  logs: VerifierKey[];
  witnesses: Map<string, CosignerKey>;
  quorum: QuorumRule;
}

export class PolicyFileError extends Error {}

/** Well above the spec's recommended minimum of 32 each. */
const MAX_ENTRIES = 256;

export function parseWitnessPolicy(text: string): WitnessPolicy {
  const logs: VerifierKey[] = [];
  const witnesses = new Map<string, CosignerKey>();
  const rules = new Map<string, QuorumRule>();
  const keys = new Set<string>();
  let quorum: QuorumRule | undefined;
  const lines = text.split('\n');
  for (const [i, raw] of lines.entries()) {
    const at = `line ${i + 1}`;
    // Tab and newline are the only control characters the format allows.
    if ([...raw].some((c) => (c < ' ' && c !== '\t') || c === '\x7f')) {
      throw new PolicyFileError(`${at}: a control character`);
    }
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const [word, ...args] = line.split(/[ \t]+/) as [string, ...string[]];
    const defined = (name: string) => {
      if (name === 'none' || rules.has(name)) throw new PolicyFileError(`${at}: the name ${name} is already taken`);
    };
    const uniqueKey = (material: string) => {
      if (keys.has(material)) throw new PolicyFileError(`${at}: the same key is listed twice`);
      keys.add(material);
    };
    if (word === 'log' && (args.length === 1 || args.length === 2)) {
      let key: VerifierKey;
      try {
        key = parseVerifierKey(args[0] as string);
      } catch (err) {
        if (err instanceof NoteError) throw new PolicyFileError(`${at}: ${err.message}`);
        throw err;
      }
      uniqueKey((args[0] as string).split('+').slice(2).join('+'));
      logs.push(key);
    } else if (word === 'witness' && (args.length === 2 || args.length === 3)) {
      const [name, vkey] = args as [string, string];
      defined(name);
      let key: CosignerKey;
      try {
        key = parseCosignerKey(vkey);
      } catch (err) {
        throw new PolicyFileError(`${at}: ${(err as Error).message}`);
      }
      uniqueKey(key.publicKey.toString('base64'));
      witnesses.set(name, key);
      rules.set(name, { kind: 'witness', name });
    } else if (word === 'group' && args.length >= 3) {
      const [name, threshold, ...members] = args as [string, string, ...string[]];
      defined(name);
      if (new Set(members).size !== members.length) throw new PolicyFileError(`${at}: a member listed twice`);
      const rulesOf = members.map((m) => {
        const rule = rules.get(m);
        if (!rule) throw new PolicyFileError(`${at}: ${m} is not a witness or group defined above`);
        return rule;
      });
      const k =
        threshold === 'all'
          ? members.length
          : threshold === 'any'
            ? 1
            : /^[1-9][0-9]*$/.test(threshold)
              ? Number(threshold)
              : 0;
      if (k < 1 || k > members.length) {
        throw new PolicyFileError(`${at}: the threshold must be all, any or 1 to ${members.length}, got ${threshold}`);
      }
      rules.set(name, { kind: 'group', name, threshold: k, members: rulesOf });
    } else if (word === 'quorum' && args.length === 1) {
      if (quorum) throw new PolicyFileError(`${at}: a second quorum line`);
      const name = args[0] as string;
      const rule = name === 'none' ? ({ kind: 'none' } as const) : rules.get(name);
      if (!rule) throw new PolicyFileError(`${at}: the quorum ${name} is not a witness or group defined above`);
      quorum = rule;
    } else {
      throw new PolicyFileError(`${at}: not a log, witness, group or quorum line: ${line}`);
    }
    if (logs.length + rules.size > MAX_ENTRIES) throw new PolicyFileError(`more than ${MAX_ENTRIES} logs and names`);
  }
  if (!quorum) throw new PolicyFileError('the policy has no quorum line');
  return { logs, witnesses, quorum };
}

export interface QuorumVerdict {
  met: boolean;
  /** The witnesses whose cosignatures verified. */
  cosigned: string[];
  /** What the quorum asks for, e.g. "2 of (w1, w2, w3)". */
  required: string;
}

/**
 * Whether the checkpoint `note` (opened as `checkpoint` with the log's key) carries the cosignatures the policy's
 * quorum needs. A witness line that does not verify throws (CosignatureError).
 */
export function checkQuorum(
  policy: WitnessPolicy,
  note: string,
  checkpoint: Checkpoint,
  now = new Date(),
): QuorumVerdict {
  const cosigned = new Set<string>();
  for (const [name, key] of policy.witnesses) {
    if (cosignatureTime(note, checkpoint, key, now) !== undefined) cosigned.add(name);
  }
  const holds = (rule: QuorumRule): boolean => {
    if (rule.kind === 'none') return true;
    if (rule.kind === 'witness') return cosigned.has(rule.name);
    return rule.members.filter(holds).length >= rule.threshold;
  };
  const describe = (rule: QuorumRule): string => {
    if (rule.kind === 'none') return 'none';
    if (rule.kind === 'witness') return rule.name;
    return `${rule.threshold} of (${rule.members.map(describe).join(', ')})`;
  };
  return { met: holds(policy.quorum), cosigned: [...cosigned].sort(), required: describe(policy.quorum) };
}
