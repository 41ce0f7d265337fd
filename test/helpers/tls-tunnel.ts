// A TLS front for a plain-HTTP server on 127.0.0.1, for clients that speak only https (cosign's awskms://HOST).
// It decrypts and passes the bytes through unchanged: Host and every other signed header arrive as the client sent
// them, so a SigV4 check behind it sees exactly the signed request. The service itself has no TLS listener
// (docs/deployment.md puts nginx in front); this stands in for that proxy.
import type { AddressInfo, Socket } from 'node:net';
import { connect } from 'node:net';
import { createServer } from 'node:tls';
import type { SelfSigned } from './local-servers.js';

export interface TlsTunnel {
  port: number;
  /** 127.0.0.1:PORT, the host part of an awskms:// key reference. */
  host: string;
  /** Connections that reached the target (a refused handshake never does). */
  connections: number;
  close(): Promise<void>;
}

export async function startTlsTunnel(targetPort: number, tls: SelfSigned): Promise<TlsTunnel> {
  const sockets = new Set<Socket>();
  const track = (socket: Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  };
  const state: TlsTunnel = {
    port: 0,
    host: '',
    connections: 0,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const server = createServer(tls, (clear) => {
    state.connections++;
    const target = connect(targetPort, '127.0.0.1');
    track(clear);
    track(target);
    clear.on('error', () => target.destroy());
    target.on('error', () => clear.destroy());
    clear.pipe(target).pipe(clear);
  });
  // Handshakes the client gives up on are expected (an untrusted certificate).
  server.on('tlsClientError', () => {});
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  state.port = (server.address() as AddressInfo).port;
  state.host = `127.0.0.1:${state.port}`;
  return state;
}
