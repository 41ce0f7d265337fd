// A webhook receiver for the event tests: a real HTTP server on 127.0.0.1 that checks every request's signature with
// the Standard Webhooks reference library (npm standardwebhooks), remembers every attempt, and answers each attempt
// as the test scripted (500, 429 with Retry-After, 410, slow past the sender's time-out, or 200), or not at all
// while it is down. "Answered 200" counts only answers that reached the sender (the socket still open). It can also
// hold every request unanswered until the test releases it (hold()/release()): a receiver that is slow just while
// a sender dies, so that the sender's requests are in flight, answered only after its sockets are gone. Several
// subscriptions (one per tenant) can point at it, each at its own path with its own secret (urlFor, secrets). It
// counts the requests it has open at once (inFlight, maxInFlight), and can answer every request alike until told
// otherwise (answerAll): a receiver that keeps failing.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';

export type Answer =
  | { status: number; headers?: Record<string, string>; body?: string }
  | { delayMs: number; status: number };

export interface Attempt {
  id: string;
  /** The request's path: which subscription sent it when several point here (urlFor). */
  path: string;
  type: string;
  at: number;
  /** What the receiver answered (undefined: it answered after the sender had gone). */
  status: number | undefined;
  signatureValid: boolean;
  body: Record<string, unknown>;
}

export class WebhookReceiver {
  readonly attempts: Attempt[] = [];
  /** Answers for the next attempts, in order; then 200. */
  readonly script: Answer[] = [];
  /** While set, every attempt gets this answer and the script waits (a receiver that keeps failing). */
  answerAll: Answer | undefined;
  /** Requests open now (from the first byte read to the answer or the sender going), and the most at once. */
  inFlight = 0;
  maxInFlight = 0;
  private server: Server | undefined;
  private port = 0;

  /** The subscription's whsec_ secret, known once the subscription is made. */
  secret: string | undefined;
  /** Secrets by request path, for subscriptions made with urlFor(name); a path not here is checked with `secret`. */
  readonly secrets = new Map<string, string>();
  /** While set, every request waits for it unanswered (hold()). */
  private gate: { opened: Promise<void>; open: () => void } | undefined;
  private readonly waiting = new Set<{ attempt: Attempt; senderGone: boolean }>();

  get url(): string {
    return `http://127.0.0.1:${this.port}/hook`;
  }

  /** A URL of its own for one subscription: requests to it are checked with secrets.get(pathOf(name)). */
  urlFor(name: string): string {
    return `http://127.0.0.1:${this.port}${this.pathOf(name)}`;
  }

  pathOf(name: string): string {
    return `/hook/${encodeURIComponent(name)}`;
  }

  /** From now on every request is held without an answer (its attempt has no status) until release(). */
  hold(): void {
    if (this.gate) return;
    let open = () => {};
    const opened = new Promise<void>((resolve) => {
      open = resolve;
    });
    this.gate = { opened, open };
  }

  /** Answers the held requests (as scripted, else 200); a request whose sender has gone gets nothing. */
  release(): void {
    const gate = this.gate;
    this.gate = undefined;
    gate?.open();
  }

  /** The requests held now, and for each whether its sender has gone (the connection closed). */
  held(): { attempt: Attempt; senderGone: boolean }[] {
    return [...this.waiting].map((w) => ({ ...w }));
  }

  /** Ids answered 200, with how many times each. */
  delivered(): Map<string, number> {
    const counts = new Map<string, number>();
    for (const a of this.attempts) if (a.status === 200) counts.set(a.id, (counts.get(a.id) ?? 0) + 1);
    return counts;
  }

  async start(): Promise<void> {
    this.server = createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((resolve) => this.server?.listen(this.port, '127.0.0.1', resolve));
    this.port = (this.server.address() as AddressInfo).port;
  }

  /** Down: the port refuses connections until start() again (same port). */
  async stop(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    if (!server) return;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    this.inFlight++;
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    try {
      await this.answer(req, res);
    } finally {
      this.inFlight--;
    }
  }

  private async answer(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const raw = Buffer.concat(chunks).toString('utf8');
    let signatureValid = false;
    const path = req.url ?? '/';
    const secret = this.secrets.get(path) ?? this.secret;
    if (secret) {
      try {
        new Webhook(secret).verify(raw, req.headers as Record<string, string>);
        signatureValid = true;
      } catch {
        signatureValid = false;
      }
    }
    const body = JSON.parse(raw) as Record<string, unknown>;
    const attempt: Attempt = {
      id: String(req.headers['webhook-id']),
      path,
      type: String(body.type),
      at: Date.now(),
      status: undefined,
      signatureValid,
      body,
    };
    this.attempts.push(attempt);
    const gate = this.gate;
    if (gate) {
      const waiting = { attempt, senderGone: false };
      const gone = () => {
        waiting.senderGone = true;
      };
      this.waiting.add(waiting);
      req.socket.once('close', gone);
      await gate.opened;
      req.socket.off('close', gone);
      this.waiting.delete(waiting);
    }
    const answer = this.answerAll ?? this.script.shift() ?? { status: 200 };
    if ('delayMs' in answer) await new Promise((resolve) => setTimeout(resolve, answer.delayMs));
    // The sender gave up (its time-out) or died while held: nothing reaches it, so this is no delivery.
    if (req.socket.destroyed || res.destroyed) return;
    res.writeHead(answer.status, 'headers' in answer ? answer.headers : {});
    res.end('body' in answer ? answer.body : 'ok');
    attempt.status = answer.status;
  }
}
