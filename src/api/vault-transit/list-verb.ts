// hvac lists keys with Vault's own HTTP method, `LIST /v1/<mount>/keys` (its default, strict_http=False), which
// Node's HTTP parser refuses before any route sees it. Vault's Go client and jsign send `GET ...?list=true` instead;
// this answers hvac's LIST as that GET: the refused request's head is read from the bytes Node hands to
// `clientError`, run through the app (the same hooks, authentication and route), and the answer is written on the
// socket, which then closes (the parser cannot go on after the refusal). Only a whole, valid head without a body
// (list-head.ts), for the list path alone, is answered this way; anything else keeps the ordinary 400.
//
// A head may come in several packets. Node reports the refusal with the packet that held the method, and then, its
// parser stuck in that error, each later packet of the connection as another refusal: those are gathered until the
// head is whole (at most the server's header size, within its headers timeout). A head whose method itself was
// split (`LI` + `ST ...`) cannot be read back (the packets before the refusal are gone) and keeps the 400.
import { maxHeaderSize } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { ParserRescue } from '../http-strict.js';
import { HOP_HEADERS, parseListHead } from './list-head.js';

/** Node's default, where the server sets no headers timeout: 60 s to receive a head. */
const DEFAULT_HEAD_WAIT_MS = 60_000;

interface PartialHead {
  bytes: Buffer;
  timer: NodeJS.Timeout;
}

function statusLine(status: number, message: string): string {
  return `HTTP/1.1 ${status} ${message.replace(/[\r\n]/g, '')}\r\n`;
}

/** The head did not arrive in time: Vault's shape, and the connection closes. */
function headTimedOut(socket: Socket): void {
  const body = JSON.stringify({ errors: ['the request head was not received in time'] });
  socket.end(
    `${statusLine(408, 'Request Timeout')}content-type: application/json\r\n` +
      `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
}

/** The rescue for `LIST <prefix>/keys` on `app`'s server (prefix: `/v1/<mount>`). */
export function listVerbRescue(app: FastifyInstance, prefix: string): ParserRescue {
  const listPath = `${prefix}/keys`;
  const partial = new WeakMap<Socket, PartialHead>();
  const maxHeadBytes = maxHeaderSize; // Node's limit on a head (16 KiB unless --max-http-header-size says more)
  const headWaitMs = app.server.headersTimeout || DEFAULT_HEAD_WAIT_MS;

  /** The head so far with this packet: undefined when it cannot be (or become) a LIST head to answer. */
  const gather = (socket: Socket, packet: Buffer): Buffer | undefined => {
    const earlier = partial.get(socket);
    if (!earlier && !packet.toString('latin1').startsWith('LIST ')) return undefined;
    const bytes = earlier ? Buffer.concat([earlier.bytes, packet]) : packet;
    if (earlier) earlier.bytes = bytes;
    return bytes.length > maxHeadBytes ? undefined : bytes;
  };

  /** Waits for the rest of the head: one timer from its first packet on, as Node times a head. */
  const awaitRest = (socket: Socket, bytes: Buffer): void => {
    if (partial.has(socket)) return;
    const timer = setTimeout(() => {
      partial.delete(socket);
      headTimedOut(socket);
    }, headWaitMs);
    timer.unref();
    socket.once('close', () => clearTimeout(timer));
    partial.set(socket, { bytes, timer });
  };

  const forget = (socket: Socket): void => {
    clearTimeout(partial.get(socket)?.timer);
    partial.delete(socket);
  };

  return (err, socket: Socket) => {
    if (err.code !== 'HPE_INVALID_METHOD' || !err.rawPacket) return false;
    const bytes = gather(socket, err.rawPacket);
    if (bytes && !bytes.includes('\r\n\r\n')) {
      awaitRest(socket, bytes);
      return true; // the rest of the head comes as the next refusals
    }
    forget(socket);
    if (!bytes) return false;
    const head = parseListHead(bytes, listPath);
    if (!head) return false;
    const query = head.query ? `${head.query}&list=true` : 'list=true';
    app
      .inject({
        method: 'GET',
        url: `${head.path}?${query}`,
        headers: head.headers,
        ...(socket.remoteAddress !== undefined && { remoteAddress: socket.remoteAddress }),
      })
      .then((res) => {
        const lines = Object.entries(res.headers)
          .filter(([name]) => !HOP_HEADERS.has(name.toLowerCase()))
          .flatMap(([name, value]) => (Array.isArray(value) ? value : [value]).map((v) => `${name}: ${v}\r\n`));
        socket.end(
          `${statusLine(res.statusCode, res.statusMessage)}${lines.join('')}` +
            `content-length: ${res.rawPayload.length}\r\nconnection: close\r\n\r\n${res.rawPayload.toString('latin1')}`,
          'latin1',
        );
      })
      .catch(() => socket.destroy());
    return true;
  };
}
