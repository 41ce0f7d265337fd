// A small client for the daemon's socket: `signbridge status` uses it, and so do the tests (the same codec the
// daemon uses, on the other side of the socket).
import { connect, type Socket } from 'node:net';
import { decodeMessage, encodeMessage, FrameReader } from './codec.js';
import type { Request, Response } from './messages.js';
import { PROTOCOL_VERSION, PROTOCOL_VERSION_MIN } from './wire.js';

export class DaemonClient {
  private readonly reader = new FrameReader();
  private readonly waiting: Array<{ resolve: (r: Response) => void; reject: (e: Error) => void }> = [];
  private failure: Error | undefined;

  private constructor(private readonly socket: Socket) {
    socket.on('data', (chunk: Buffer) => {
      try {
        for (const f of this.reader.push(chunk))
          this.waiting.shift()?.resolve(decodeMessage(f.type, f.body) as Response);
      } catch (err) {
        this.fail(err as Error);
        socket.destroy();
      }
    });
    socket.on('error', (err) => this.fail(err));
    socket.on('close', () => this.fail(new Error('the daemon closed the connection')));
  }

  static connect(path: string, timeoutMs = 5000): Promise<DaemonClient> {
    return new Promise((resolve, reject) => {
      const socket = connect(path);
      const timer = setTimeout(() => {
        socket.destroy();
        reject(new Error(`no answer from ${path} within ${timeoutMs} ms`));
      }, timeoutMs);
      socket.once('connect', () => {
        clearTimeout(timer);
        resolve(new DaemonClient(socket));
      });
      socket.once('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
    });
  }

  /** Connects and says HELLO; resolves with the HELLO answer (HELLO_OK or ERROR). */
  static async open(path: string, client = 'signbridge-client'): Promise<{ client: DaemonClient; hello: Response }> {
    const c = await DaemonClient.connect(path);
    const hello = await c.request({
      type: 'HELLO',
      versionMin: PROTOCOL_VERSION_MIN,
      versionMax: PROTOCOL_VERSION,
      client,
      pid: process.pid,
    });
    return { client: c, hello };
  }

  request(request: Request): Promise<Response> {
    return this.send(encodeMessage(request));
  }

  /** Sends raw bytes (tests send broken frames) and waits for one response frame. */
  send(bytes: Buffer): Promise<Response> {
    if (this.failure) return Promise.reject(this.failure);
    return new Promise((resolve, reject) => {
      this.waiting.push({ resolve, reject });
      this.socket.write(bytes);
    });
  }

  /** Resolves when the daemon closes the connection. */
  closed(): Promise<void> {
    if (this.socket.closed) return Promise.resolve();
    return new Promise((resolve) => this.socket.once('close', () => resolve()));
  }

  close(): void {
    this.socket.destroy();
  }

  private fail(err: Error): void {
    this.failure ??= err;
    for (const w of this.waiting.splice(0)) w.reject(this.failure);
  }
}
