// Real HTTP and HTTPS servers on 127.0.0.1 (port 0) for the outbound-request and webhook tests: they stand in for
// a webhook receiver or any other destination the service sends to. The HTTPS server's certificate is self-signed
// (openssl, into a temp dir) for localhost, hooks.example.com and 127.0.0.1; tests pass it as the extra CA.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TLSSocket } from 'node:tls';
import { selfSignedP256 } from './crypto.js';

export interface SelfSigned {
  key: string;
  cert: string;
}

/** A self-signed certificate (its own CA) for the names tests use. */
export function selfSignedCert(): SelfSigned {
  const dir = mkdtempSync(join(tmpdir(), 'sb-outbound-tls-'));
  try {
    selfSignedP256(join(dir, 'key.pem'), join(dir, 'cert.pem'), '/CN=signbridge outbound test', {
      extensions: [
        'subjectAltName=DNS:localhost,DNS:hooks.example.com,IP:127.0.0.1',
        'basicConstraints=critical,CA:TRUE',
      ],
    });
    return { key: readFileSync(join(dir, 'key.pem'), 'utf8'), cert: readFileSync(join(dir, 'cert.pem'), 'utf8') };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export interface SeenRequest {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
  /** The TLS server name the client sent (https only). */
  servername?: string | false;
}

export interface LocalServer {
  port: number;
  /** http://127.0.0.1:PORT or https://127.0.0.1:PORT */
  url: string;
  requests: SeenRequest[];
  /** Responses whose connection closed before the handler ended them (the client hung up). */
  hungUp: number;
  close(): Promise<void>;
}

/** A server whose `handle` answers each request after its body has arrived (or never, if it does not end it). */
export async function startServer(
  handle: (req: IncomingMessage, res: ServerResponse) => void,
  tls?: SelfSigned,
): Promise<LocalServer> {
  const sockets = new Set<Socket>();
  const state: LocalServer = {
    port: 0,
    url: '',
    requests: [],
    hungUp: 0,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const onRequest = (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      state.requests.push({
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
        ...(tls && { servername: (req.socket as TLSSocket & { servername?: string | false }).servername }),
      });
      res.on('close', () => {
        if (!res.writableFinished) state.hungUp++;
      });
      handle(req, res);
    });
  };
  const server: Server = tls ? createHttpsServer(tls, onRequest) : createHttpServer(onRequest);
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  // TLS handshakes the client gives up on are expected in the tests (untrusted certificate).
  server.on('tlsClientError', () => {});
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  state.port = (server.address() as AddressInfo).port;
  state.url = `${tls ? 'https' : 'http'}://127.0.0.1:${state.port}`;
  return state;
}

/** A port nothing listens on (bound, then closed): connections to it are refused. */
export async function closedPort(): Promise<number> {
  const server = createHttpServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Writes `chunk` every `everyMs` (0: as fast as the socket takes it) until the client hangs up. */
export function endlessBody(res: ServerResponse, chunk: Buffer, everyMs: number): void {
  let timer: NodeJS.Timeout | undefined;
  const write = () => {
    if (res.destroyed) return;
    if (everyMs > 0) {
      res.write(chunk);
      timer = setTimeout(write, everyMs);
    } else {
      while (res.write(chunk)) if (res.destroyed) return;
      res.once('drain', write);
    }
  };
  res.on('close', () => clearTimeout(timer));
  write();
}
