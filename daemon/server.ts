// The Unix socket server: binds under a private folder, checks every peer's uid with SO_PEERCRED, cuts the byte
// stream into frames and answers one request at a time per connection. A protocol error closes that connection
// (never the daemon); p11-kit's server does the same.
import { chmodSync, lstatSync, unlinkSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import type { Logger } from 'pino';
import type { BusyPoll } from '../src/busy-poll.js';
import { decodeMessage, encodeMessage, FrameReader, FrameTooLargeError } from '../wire/codec.js';
import { type Message, REQUEST_TYPES, type Request, type Response } from '../wire/messages.js';
import { ProtocolError, WireStatus } from '../wire/wire.js';
import { errorMessage, type PeerInfo, type RequestHandler } from './handler.js';
import { type PeerCred, peerOf } from './peercred.js';
import { currentUid, prepareSocketDir } from './socket-path.js';

export interface DaemonServerOptions {
  socketPath: string;
  handler: RequestHandler;
  log: Logger;
  /** Peers allowed in; default: the daemon's own uid and root. */
  allowedUids?: number[];
  /** A connection that has not said HELLO by then is closed (default 10 s): idle sockets cost descriptors. */
  helloTimeoutMs?: number;
  /** For tests: where peer credentials come from (default: the SO_PEERCRED addon). */
  getPeerCred?: (fd: number) => PeerCred;
  /** Keeps the event loop polling around requests (src/busy-poll.ts); default: none. */
  busyPoll?: BusyPoll;
  /** close() waits this long for requests being served to be answered (default 8 s), then cuts them off. */
  closeGraceMs?: number;
}

export class DaemonServer {
  readonly socketPath: string;
  private readonly opts: DaemonServerOptions;
  private readonly allowed: Set<number>;
  private readonly connections = new Map<Socket, Connection | undefined>();
  private server: Server | undefined;
  private socketIno: number | undefined;
  private nextConnectionId = 1;

  constructor(opts: DaemonServerOptions) {
    this.opts = opts;
    this.socketPath = opts.socketPath;
    this.allowed = new Set(opts.allowedUids ?? [currentUid(), 0]);
  }

  get connectionCount(): number {
    return this.connections.size;
  }

  async start(): Promise<void> {
    prepareSocketDir(this.socketPath);
    await removeStaleSocket(this.socketPath);
    const server = createServer({ allowHalfOpen: false, pauseOnConnect: true }, (socket) => this.accept(socket));
    this.server = server;
    // The folder is already 0700; the umask makes the socket 0600 from the moment it exists as well.
    const old = process.umask(0o177);
    try {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(this.socketPath, () => {
          server.off('error', reject);
          resolve();
        });
      });
    } finally {
      process.umask(old);
    }
    chmodSync(this.socketPath, 0o600);
    this.socketIno = lstatSync(this.socketPath).ino;
    server.on('error', (err) => this.opts.log.error({ err }, 'socket server error'));
    this.opts.log.info({ socket: this.socketPath, allowedUids: [...this.allowed] }, 'daemon listening');
  }

  /**
   * Stops accepting, closes every connection and removes the socket file (if it is still ours). A connection
   * closes at once when idle, or right after answering the request it is serving: so a connection that closes
   * without an answer never had its request served, and the module may send it again (docs/wire-protocol.md).
   */
  async close(): Promise<void> {
    const server = this.server;
    if (!server) return;
    this.server = undefined;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    const ends = [...this.connections].map(([socket, connection]) => {
      const ended = new Promise<void>((resolve) => {
        if (socket.destroyed) resolve();
        else socket.once('close', () => resolve());
      });
      if (connection) connection.shutdown();
      else socket.destroy();
      return ended;
    });
    const grace = setTimeout(() => {
      for (const socket of this.connections.keys()) socket.destroy();
    }, this.opts.closeGraceMs ?? 8_000);
    await Promise.all(ends);
    clearTimeout(grace);
    await closed;
    try {
      if (this.socketIno !== undefined && lstatSync(this.socketPath).ino === this.socketIno)
        unlinkSync(this.socketPath);
    } catch {
      // already gone
    }
  }

  private accept(socket: Socket): void {
    const id = this.nextConnectionId++;
    const log = this.opts.log.child({ conn: id });
    const cred = peerOf(socket, this.opts.getPeerCred);
    if (cred instanceof Error) {
      log.warn({ err: cred.message }, 'connection refused: cannot read peer credentials');
      socket.destroy();
      return;
    }
    if (!this.allowed.has(cred.uid)) {
      log.warn({ uid: cred.uid, pid: cred.pid }, 'connection refused: peer uid not allowed');
      socket.destroy();
      return;
    }
    socket.once('close', () => this.connections.delete(socket));
    socket.on('error', (err) => log.debug({ err: err.message }, 'connection error'));
    log.debug({ uid: cred.uid, pid: cred.pid }, 'connection accepted');
    const connection = new Connection(
      socket,
      { pid: cred.pid, uid: cred.uid },
      this.opts.handler,
      log,
      this.opts.busyPoll,
    );
    this.connections.set(socket, connection);
    connection.run(this.opts.helloTimeoutMs ?? 10_000);
  }
}

/** One client connection: strictly one request, one response, in turn. */
class Connection {
  private readonly reader = new FrameReader();
  private readonly queue: Request[] = [];
  private busy = false;
  private greeted = false;
  /** The protocol version HELLO chose for this connection. */
  private version = 0;
  private closed = false;
  private stopping = false;
  private serving: Request['type'] | undefined;

  constructor(
    private readonly socket: Socket,
    private readonly peer: PeerInfo,
    private readonly handler: RequestHandler,
    private readonly log: Logger,
    private readonly busyPoll: BusyPoll | undefined,
  ) {}

  run(helloTimeoutMs: number): void {
    const timer = setTimeout(() => {
      if (this.greeted || this.closed) return;
      this.log.warn({ helloTimeoutMs }, 'no HELLO in time: closing the connection');
      this.closed = true;
      this.socket.destroy();
    }, helloTimeoutMs);
    timer.unref();
    this.socket.on('data', (chunk: Buffer) => this.onData(chunk));
    this.socket.once('close', () => {
      this.closed = true;
      clearTimeout(timer);
    });
    this.socket.resume();
  }

  /**
   * The daemon stops: an idle connection closes now (a request the module sends meanwhile stays unread, and the
   * module sees the connection reset); one serving a request answers it first. A POLL is cut off at once: it only
   * asks, and the module asks again.
   */
  shutdown(): void {
    this.stopping = true;
    if (this.busy && this.serving !== 'POLL') return;
    this.closed = true;
    this.queue.length = 0;
    this.socket.destroy();
  }

  private onData(chunk: Buffer): void {
    try {
      for (const frame of this.reader.push(chunk)) {
        const message: Message = decodeMessage(frame.type, frame.body);
        if (!REQUEST_TYPES.has(message.type)) throw new ProtocolError(`${message.type} is not a request`);
        this.queue.push(message as Request);
      }
    } catch (err) {
      this.protocolError(err);
      return;
    }
    // A client that pipelines is served in order; stop reading while work is queued so memory stays bounded.
    if (this.queue.length > 0) {
      this.socket.pause();
      void this.drain();
    }
  }

  private async drain(): Promise<void> {
    if (this.busy) return;
    this.busy = true;
    try {
      for (let request = this.queue.shift(); request && !this.closed; request = this.queue.shift()) {
        // Poll while the request is served (a SIGN waits for the service) and just after: the module's next
        // request usually follows within microseconds (C_SignInit, then C_Sign). See src/busy-poll.ts.
        this.busyPoll?.begin();
        let served: { response: Response; close: boolean };
        this.serving = request.type;
        try {
          served = await this.serve(request);
        } finally {
          this.serving = undefined;
          this.busyPoll?.end();
        }
        const { response, close } = served;
        if (this.closed) return;
        if (this.stopping) {
          // The last answer: close as soon as it is handed to the kernel, reading nothing more (the socket is
          // paused), so that a request the module sends meanwhile stays unread and its connection is reset.
          this.queue.length = 0;
          this.closed = true;
          this.socket.write(this.encode(response), () => this.socket.destroy());
          return;
        }
        this.socket.write(this.encode(response));
        if (close) {
          this.queue.length = 0;
          this.socket.end();
          this.closed = true;
          return;
        }
      }
    } catch (err) {
      this.log.error({ err }, 'connection failed');
      this.socket.destroy();
      return;
    } finally {
      this.busy = false;
    }
    if (!this.closed) this.socket.resume();
  }

  private encode(response: Response): Buffer {
    try {
      return encodeMessage(response);
    } catch (err) {
      if (!(err instanceof FrameTooLargeError)) throw err;
      this.log.error({ err: err.message, response: response.type }, 'answer too large for one frame');
      return encodeMessage(
        errorMessage(
          WireStatus.INTERNAL,
          `the daemon's ${response.type} answer is over the 1 MiB frame limit; expose fewer tenants or certificates`,
        ),
      );
    }
  }

  private async serve(request: Request): Promise<{ response: Response; close: boolean }> {
    if (!this.greeted) {
      if (request.type !== 'HELLO') {
        return { response: errorMessage(WireStatus.BAD_REQUEST, 'the first request must be HELLO'), close: true };
      }
      const response = this.handler.hello(request);
      this.greeted = response.type === 'HELLO_OK';
      if (response.type === 'HELLO_OK') this.version = response.version;
      this.log.debug({ client: request.client, pid: request.pid, ok: this.greeted, version: this.version }, 'hello');
      return { response, close: !this.greeted };
    }
    return { response: await this.handler.handle(request, this.peer, this.version), close: false };
  }

  private protocolError(err: unknown): void {
    if (err instanceof ProtocolError) this.log.warn({ err: err.message }, 'protocol error: closing the connection');
    else this.log.error({ err }, 'unexpected error while decoding: closing the connection');
    this.closed = true;
    this.queue.length = 0;
    this.socket.destroy();
  }
}

/** A socket file left by a daemon that died: remove it. A live daemon on it: refuse to start a second one. */
async function removeStaleSocket(path: string): Promise<void> {
  let st: ReturnType<typeof lstatSync>;
  try {
    st = lstatSync(path);
  } catch {
    return;
  }
  if (!st.isSocket()) throw new Error(`${path} exists and is not a socket; refusing to replace it`);
  const alive = await new Promise<boolean>((resolve) => {
    const probe = connect(path);
    probe.once('connect', () => {
      probe.destroy();
      resolve(true);
    });
    probe.once('error', () => resolve(false));
  });
  if (alive) throw new Error(`another daemon is already listening on ${path}`);
  unlinkSync(path);
}
