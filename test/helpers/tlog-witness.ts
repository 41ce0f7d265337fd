// A transparency-log witness written for the tests from the C2SP specs alone (tlog-witness, tlog-cosignature,
// signed-note, tlog-checkpoint), sharing no code with src/transparency. It STANDS IN FOR A REAL WITNESS (the
// Armored Witness, litewitness, a witness of a public network): it trusts one log key (ECDSA, note type 0x02, or
// Ed25519, type 0x01, the only one a public network's witness takes),
// keeps the latest size and root it cosigned, answers add-checkpoint with 404 / 403 / 400 / 409 (its size, as
// text/x.tlog.size) / 422 as the protocol says, and cosigns with Ed25519 or ML-DSA-44. `seed` gives it a history
// of its own (another root at some size) so it refuses the log as a fork, as a real witness that saw another view
// would.
import { createHash, createPublicKey, generateKeyPairSync, type KeyObject, sign, verify } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ml_dsa44 } from '@noble/post-quantum/ml-dsa.js';
import { refVerifyConsistency } from './rfc9162-verify.js';

export type CosignerKind = 'ed25519' | 'ml-dsa-44';

interface Recorded {
  size: number;
  root: Buffer;
}

export class TestWitness {
  readonly name: string;
  /** Every answer's status, in order. */
  readonly statuses: number[] = [];
  /** Every add-checkpoint request it read as such: the old size it was sent and the checkpoint's size. */
  readonly requests: Array<{ old: number; size: number }> = [];
  url = '';
  /** Answer this many requests with 503 first (a witness that is restarting). */
  failNext = 0;
  private server: Server | undefined;
  private recorded: Recorded | undefined;
  private logOrigin = '';
  private logKey: KeyObject | undefined;
  private logKeyType = 0;
  private logKeyId = Buffer.alloc(0);
  private readonly kind: CosignerKind;
  private readonly ed25519?: { privateKey: KeyObject; raw: Buffer };
  private readonly mlDsa?: { secretKey: Uint8Array; publicKey: Uint8Array };

  constructor(opts: { name: string; kind: CosignerKind; seed?: Recorded }) {
    this.name = opts.name;
    this.kind = opts.kind;
    this.recorded = opts.seed;
    if (opts.kind === 'ed25519') {
      const { privateKey, publicKey } = generateKeyPairSync('ed25519');
      const jwk = publicKey.export({ format: 'jwk' });
      this.ed25519 = { privateKey, raw: Buffer.from(jwk.x as string, 'base64url') };
    } else {
      const keys = ml_dsa44.keygen();
      this.mlDsa = { secretKey: keys.secretKey, publicKey: keys.publicKey };
    }
  }

  /** The log this witness cosigns (until then it answers 404: an unknown log). */
  trust(logVkey: string): void {
    const [origin, , b64] = splitVkey(logVkey);
    const raw = Buffer.from(b64, 'base64');
    this.logOrigin = origin;
    this.logKeyType = raw[0] as number;
    if (raw[0] === 0x02) {
      this.logKey = createPublicKey({ key: raw.subarray(1), format: 'der', type: 'spki' });
      this.logKeyId = createHash('sha256').update(raw.subarray(1)).digest().subarray(0, 4);
    } else if (raw[0] === 0x01) {
      const x = raw.subarray(1).toString('base64url');
      this.logKey = createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x }, format: 'jwk' });
      this.logKeyId = createHash('sha256')
        .update(Buffer.concat([Buffer.from(`${origin}\n`), raw]))
        .digest()
        .subarray(0, 4);
    } else {
      throw new Error('the test witness trusts ECDSA (0x02) or Ed25519 (0x01) log keys');
    }
  }

  /** The cosigner vkey: name+keyID+base64(type || key), type 0x04 (Ed25519) or 0x06 (ML-DSA-44). */
  get vkey(): string {
    const type = this.kind === 'ed25519' ? 0x04 : 0x06;
    const key =
      this.kind === 'ed25519' ? (this.ed25519?.raw as Buffer) : Buffer.from(this.mlDsa?.publicKey as Uint8Array);
    const material = Buffer.concat([Buffer.from([type]), key]);
    return `${this.name}+${this.keyId().toString('hex')}+${material.toString('base64')}`;
  }

  get cosignedSize(): number | undefined {
    return this.recorded?.size;
  }

  /**
   * Forgets what it cosigned (its operator reset it, e.g. after the log was restored): it takes the log anew; or,
   * with `seed`, holds that size and root instead (it saw another history of the log).
   */
  reset(seed?: Recorded): void {
    this.recorded = seed;
  }

  async start(): Promise<void> {
    this.server = createServer((req, res) => {
      this.handle(req, res).catch((err) => answer(res, 500, `${(err as Error).message}\n`));
    });
    await new Promise<void>((resolve) => this.server?.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    await new Promise((resolve) => this.server?.close(resolve));
  }

  private keyId(): Buffer {
    const type = this.kind === 'ed25519' ? 0x04 : 0x06;
    const key =
      this.kind === 'ed25519' ? (this.ed25519?.raw as Buffer) : Buffer.from(this.mlDsa?.publicKey as Uint8Array);
    return createHash('sha256')
      .update(Buffer.concat([Buffer.from(`${this.name}\n`), Buffer.from([type]), key]))
      .digest()
      .subarray(0, 4);
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const reply = (status: number, body: string, type?: string) => {
      this.statuses.push(status);
      answer(res, status, body, type);
    };
    if (req.method !== 'POST' || req.url !== '/add-checkpoint') return reply(404, 'no such endpoint\n');
    if (this.failNext > 0) {
      this.failNext--;
      return reply(503, 'restarting\n');
    }
    const body = Buffer.concat(chunks).toString('utf8');
    const blank = body.indexOf('\n\n');
    if (blank < 0) return reply(400, 'no empty line\n');
    const head = body.slice(0, blank).split('\n');
    const oldLine = /^old (0|[1-9][0-9]*)$/.exec(head[0] ?? '');
    if (!oldLine) return reply(400, 'no old size line\n');
    const old = Number(oldLine[1]);
    const proof = head.slice(1).map((l) => Buffer.from(l, 'base64'));
    if (proof.length > 63) return reply(400, 'too many proof lines\n');
    const note = body.slice(blank + 2);
    const cut = note.indexOf('\n\n');
    const text = note.slice(0, cut + 1);
    const [origin, sizeLine, rootLine] = text.split('\n');
    if (!this.logKey || origin !== this.logOrigin) return reply(404, 'unknown log\n');
    const logKey = this.logKey;
    const signed = note
      .slice(cut + 2)
      .split('\n')
      .filter((l) => l.startsWith(`\u2014 ${origin} `))
      .map((l) => Buffer.from(l.split(' ')[2] as string, 'base64'))
      .some(
        (sig) =>
          sig.subarray(0, 4).equals(this.logKeyId) &&
          verify(this.logKeyType === 0x01 ? null : 'sha256', Buffer.from(text), logKey, sig.subarray(4)),
      );
    if (!signed) return reply(403, 'no signature of a trusted key\n');
    const size = Number(sizeLine);
    const root = Buffer.from(rootLine as string, 'base64');
    this.requests.push({ old, size });
    if (old > size) return reply(400, 'old size larger than the checkpoint\n');
    const mine = this.recorded?.size ?? 0;
    if (old !== mine) return reply(409, `${mine}\n`, 'text/x.tlog.size');
    if (old === size) {
      if (this.recorded && !this.recorded.root.equals(root)) return reply(409, 'same size, another root\n');
    } else if (
      old === 0 ? proof.length > 0 : !refVerifyConsistency(old, size, this.recorded?.root as Buffer, root, proof)
    ) {
      return reply(422, 'consistency proof does not verify\n');
    }
    this.recorded = { size, root };
    reply(200, `${this.cosign(text)}\n`);
  }

  /** The cosignature line for checkpoint `text` at `at` (the witness's own clock by default). */
  cosign(text: string, at = new Date()): string {
    const [origin = '', sizeLine, rootLine = ''] = text.split('\n');
    const size = Number(sizeLine);
    const root = Buffer.from(rootLine, 'base64');
    const timestamp = BigInt(Math.floor(at.getTime() / 1000));
    const ts = Buffer.alloc(8);
    ts.writeBigUInt64BE(timestamp);
    let signature: Buffer;
    if (this.kind === 'ed25519') {
      const message = Buffer.from(`cosignature/v1\ntime ${timestamp}\n${text}`);
      signature = sign(null, message, this.ed25519?.privateKey as KeyObject);
    } else {
      const u64 = (v: bigint) => {
        const b = Buffer.alloc(8);
        b.writeBigUInt64BE(v);
        return b;
      };
      const name = Buffer.from(this.name);
      const o = Buffer.from(origin);
      const message = Buffer.concat([
        Buffer.from('subtree/v1\n\0', 'latin1'),
        Buffer.from([name.length]),
        name,
        u64(timestamp),
        Buffer.from([o.length]),
        o,
        u64(0n),
        u64(BigInt(size)),
        root,
      ]);
      signature = Buffer.from(ml_dsa44.sign(message, this.mlDsa?.secretKey as Uint8Array));
    }
    return `\u2014 ${this.name} ${Buffer.concat([this.keyId(), ts, signature]).toString('base64')}`;
  }
}

function splitVkey(vkey: string): [string, string, string] {
  const [name, id, ...rest] = vkey.trim().split('+');
  return [name as string, id as string, rest.join('+')];
}

function answer(res: ServerResponse, status: number, body: string, type = 'text/plain; charset=utf-8'): void {
  res.writeHead(status, { 'content-type': type });
  res.end(body);
}
