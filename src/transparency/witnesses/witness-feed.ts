// Sends the log's newest checkpoint to one witness per C2SP tlog-witness (`POST <url>/add-checkpoint`: an `old`
// size line, the consistency proof from that size, an empty line, the checkpoint) and stores the cosignature it
// answers with the checkpoint. A witness keeps only the latest size it cosigned, so only the newest checkpoint is
// ever sent: one that arrives while a request is under way replaces the one waiting. The witness's size is learned
// from its first 409 (text/x.tlog.size), as the spec suggests for a client that does not know it, and sent as `old`
// from then on.
// Faults: 5xx, timeouts and refused connections are retried with back-off (1 s doubling to 5 min); what the
// witness refuses for a reason (404 unknown log, 403 untrusted key, 422 proof refused, a 409 at the same size: it
// holds another root, a size larger than this log's) is reported once per condition and tried again with each
// new checkpoint. A witness that said it holds more entries than the log has is asked again with `old 0` (what a
// client that does not know the size sends): it may have been reset since, and its 409 says its size again.

import { parseCheckpointText } from '../verify/checkpoint.js';
import { type CosignerKey, cosignatureTime } from '../verify/cosignature.js';
import { hex8 } from '../verify/note.js';
import type { WitnessSettings } from './witness-settings.js';

export interface CheckpointToWitness {
  treeSize: number;
  /** The signed note as the log serves it (cosignatures of other witnesses included; the witness ignores them). */
  note: string;
}

export interface WitnessFeedDeps {
  /** The consistency proof between two sizes of this log's tree. */
  consistency(from: number, to: number): Promise<Buffer[]>;
  /** Stores the witness's verified cosignature line with the checkpoint of that size. */
  store(treeSize: number, line: string, key: CosignerKey): Promise<void>;
  /** A problem worth an operator's attention, told once until it changes or clears. */
  onProblem(witness: string, message: string): void;
  onCosigned?(witness: string, treeSize: number): void;
  /** Per request (default 10 s). */
  timeoutMs?: number;
  /** First retry delay after a fault (default 1 s; doubles to 5 min). */
  retryMs?: number;
}

const MAX_RETRY_MS = 5 * 60_000;
const MAX_ANSWER_BYTES = 64 * 1024;

/**
 * The witness refused for a reason: sending the same again would get the same answer. `condition` names the
 * reason without the sizes of the moment, so that a refusal repeated checkpoint after checkpoint is reported once.
 */
class WitnessRefused extends Error {
  constructor(
    readonly condition: string,
    message: string,
  ) {
    super(message);
  }
}

export class WitnessFeed {
  /** The size of the latest checkpoint the witness cosigned, once known. */
  private witnessSize: number | undefined;
  private waiting: CheckpointToWitness | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;
  /** The condition last reported (a refusal's, or a fault's message), so that it is told once until it changes. */
  private lastProblem: string | undefined;
  /** The last answer was a refusal: the witness will not cosign this log until someone acts on it. */
  private refusedLast = false;
  private retryTimer: { timer: NodeJS.Timeout; wake: () => void } | undefined;

  constructor(
    private readonly witness: WitnessSettings,
    private readonly deps: WitnessFeedDeps,
  ) {}

  get name(): string {
    return this.witness.key.name;
  }

  /** Whether the witness refused the last checkpoint for a reason (not a fault): waiting for it is in vain. */
  get refusing(): boolean {
    return this.refusedLast;
  }

  /** A newer checkpoint to send (an older or equal one than the waiting one is ignored). */
  offer(checkpoint: CheckpointToWitness): void {
    if (this.stopped) return;
    if (this.waiting && this.waiting.treeSize >= checkpoint.treeSize) return;
    this.waiting = checkpoint;
    // A feed sleeping after a fault tries the new checkpoint now.
    this.retryTimer?.wake();
    this.running ??= this.run().finally(() => {
      this.running = undefined;
    });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.retryTimer?.wake();
    await this.running;
  }

  private async run(): Promise<void> {
    let delay = this.deps.retryMs ?? 1000;
    while (this.waiting && !this.stopped) {
      const checkpoint = this.waiting;
      try {
        await this.send(checkpoint);
        this.clearProblem();
        this.refusedLast = false;
        delay = this.deps.retryMs ?? 1000;
        if (this.waiting === checkpoint) this.waiting = undefined;
      } catch (err) {
        const message = (err as Error).message;
        this.problem(err instanceof WitnessRefused ? err.condition : message, message);
        this.refusedLast = err instanceof WitnessRefused;
        if (err instanceof WitnessRefused) {
          if (this.waiting === checkpoint) this.waiting = undefined;
          continue;
        }
        await this.sleep(delay);
        delay = Math.min(delay * 2, MAX_RETRY_MS);
      }
    }
  }

  private async send(checkpoint: CheckpointToWitness): Promise<void> {
    // Twice at most: the first answer may be a 409 telling the witness's size.
    for (let attempt = 0; attempt < 2; attempt++) {
      // A size larger than this log's cannot be sent as `old` (the witness answers 400): ask what it holds now.
      const known = this.witnessSize ?? 0;
      const old = known > checkpoint.treeSize ? 0 : known;
      const proof =
        old === 0 || old === checkpoint.treeSize ? [] : await this.deps.consistency(old, checkpoint.treeSize);
      const body = `old ${old}\n${proof.map((h) => `${h.toString('base64')}\n`).join('')}\n${checkpoint.note}`;
      const res = await this.post(body);
      if (res.status === 200) {
        await this.accept(checkpoint, res.text);
        this.witnessSize = checkpoint.treeSize;
        return;
      }
      if (res.status === 409 && /^text\/x\.tlog\.size\b/.test(res.type)) {
        const size = /^(0|[1-9][0-9]*)\n$/.exec(res.text)?.[1];
        if (size === undefined) throw new WitnessRefused('no size', `${this.name} answered 409 without a tree size`);
        this.witnessSize = Number(size);
        if (this.witnessSize > checkpoint.treeSize) {
          // Its size is the condition: the same size again is the same problem; another size is news.
          throw new WitnessRefused(
            `ahead of the log: ${size}`,
            `${this.name} has cosigned a tree of ${size} entries, more than this log's ${checkpoint.treeSize}: ` +
              'it saw another history of this log (a fork), or the log lost entries (a database restored from an ' +
              'older backup); it is asked again with each new checkpoint',
          );
        }
        continue;
      }
      throw this.refusal(res.status, old, checkpoint, res.text);
    }
    throw new WitnessRefused('size keeps changing', `${this.name} kept answering 409 with another size`);
  }

  private refusal(status: number, old: number, checkpoint: CheckpointToWitness, text: string): Error {
    const said = text
      .trim()
      .slice(0, 200)
      .replace(/[^\x20-\x7e]/g, '?');
    const detail = said ? ` (${said})` : '';
    const origin = checkpoint.note.slice(0, checkpoint.note.indexOf('\n'));
    switch (status) {
      case 404:
        return new WitnessRefused(
          'unknown log',
          `${this.name} does not know this log (origin ${origin}): give the witness the log's vkey${detail}`,
        );
      case 403:
        return new WitnessRefused(
          'untrusted key',
          `${this.name} does not trust the key that signed the checkpoint${detail}`,
        );
      case 409:
        return new WitnessRefused(
          'another history',
          `${this.name} holds another root for tree size ${checkpoint.treeSize}: the witness saw another history of this log${detail}`,
        );
      case 422:
        return new WitnessRefused(
          'another history',
          `${this.name} refused the consistency proof from ${old} to ${checkpoint.treeSize} entries: it recorded another history of this log${detail}`,
        );
      case 400:
        return new WitnessRefused('malformed', `${this.name} refused the request as malformed${detail}`);
      default:
        return new Error(`${this.name} answered HTTP ${status}${detail}; trying again`);
    }
  }

  /** The answer's line of this witness's key, verified against the checkpoint, then stored with it. */
  private async accept(checkpoint: CheckpointToWitness, answer: string): Promise<void> {
    const key = this.witness.key;
    const text = checkpoint.note.slice(0, checkpoint.note.indexOf('\n\n') + 1);
    const parsed = parseCheckpointText(text);
    // Lines of other keys are ignored, as the spec asks (a witness may answer for several keys).
    for (const line of answer.split('\n').filter((l) => l.startsWith(`\u2014 ${key.name} `))) {
      let time: number | undefined;
      try {
        time = cosignatureTime(`${text}\n${line}\n`, parsed, key);
      } catch (err) {
        throw new WitnessRefused('bad cosignature', `${this.name}: ${(err as Error).message}`);
      }
      if (time === undefined) continue;
      await this.deps.store(checkpoint.treeSize, `${line}\n`, key);
      this.deps.onCosigned?.(this.name, checkpoint.treeSize);
      return;
    }
    throw new WitnessRefused(
      'no cosignature',
      `${this.name} answered 200 without a cosignature of its key ${key.name}+${hex8(key.keyId)}`,
    );
  }

  private async post(body: string): Promise<{ status: number; type: string; text: string }> {
    let res: Response;
    try {
      res = await fetch(`${this.witness.url}/add-checkpoint`, {
        method: 'POST',
        body,
        headers: { 'content-type': 'text/plain; charset=utf-8' },
        redirect: 'error',
        signal: AbortSignal.timeout(this.deps.timeoutMs ?? 10_000),
      });
    } catch (err) {
      const cause = (err as { cause?: { code?: string } }).cause?.code ?? (err as Error).name;
      throw new Error(`${this.name} (${this.witness.url}) did not answer: ${cause}; trying again`);
    }
    const bytes = Buffer.from(await res.arrayBuffer());
    if (bytes.length > MAX_ANSWER_BYTES) throw new Error(`${this.name} answered ${bytes.length} bytes; trying again`);
    return { status: res.status, type: res.headers.get('content-type') ?? '', text: bytes.toString('utf8') };
  }

  private problem(condition: string, message: string): void {
    if (condition === this.lastProblem) return;
    this.lastProblem = condition;
    this.deps.onProblem(this.name, message);
  }

  private clearProblem(): void {
    if (this.lastProblem !== undefined) this.deps.onProblem(this.name, `${this.name} cosigns again`);
    this.lastProblem = undefined;
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.retryTimer = undefined;
        resolve();
      };
      const timer = setTimeout(wake, ms);
      timer.unref();
      this.retryTimer = { timer, wake };
    });
  }
}
