// hvac lists keys with Vault's own HTTP method, `LIST /v1/<mount>/keys` (its default, strict_http=False), which
// Node's HTTP parser refuses before any route sees it. Vault's Go client and jsign send `GET ...?list=true` instead;
// this answers hvac's LIST as that GET: the refused request's head is read from the bytes Node hands to
// `clientError`, run through the app (the same hooks, authentication and route), and the answer is written on the
// socket, which then closes (the parser cannot go on after the refusal). Only a complete head without a body, for
// the list path alone, is answered this way; anything else keeps the ordinary 400.
import type { Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { ParserRescue } from '../http-strict.js';

const REQUEST_LINE = /^LIST (\/[^\s?]*)(\?\S*)? HTTP\/1\.[01]$/;
/** Headers that describe the refused connection or body, not the request the app is to answer. */
const HOP_HEADERS = new Set(['connection', 'keep-alive', 'content-length', 'transfer-encoding', 'upgrade']);

interface ListRequest {
  path: string;
  query: string;
  headers: Record<string, string>;
}

function parseHead(raw: Buffer, listPath: string): ListRequest | undefined {
  const text = raw.toString('latin1');
  const end = text.indexOf('\r\n\r\n');
  if (end < 0 || end + 4 !== text.length) return undefined; // incomplete, or a body (or a pipelined request) follows
  const [line = '', ...lines] = text.slice(0, end).split('\r\n');
  const match = REQUEST_LINE.exec(line);
  if (!match || (match[1] as string).replace(/\/+$/, '') !== listPath) return undefined;
  const headers: Record<string, string> = {};
  for (const header of lines) {
    const colon = header.indexOf(':');
    if (colon <= 0) return undefined;
    const name = header.slice(0, colon).trim().toLowerCase();
    const value = header.slice(colon + 1).trim();
    if (name === 'transfer-encoding' || (name === 'content-length' && value !== '0')) return undefined;
    if (!HOP_HEADERS.has(name)) headers[name] = value;
  }
  return { path: match[1] as string, query: (match[2] ?? '').slice(1), headers };
}

function statusLine(status: number, message: string): string {
  return `HTTP/1.1 ${status} ${message.replace(/[\r\n]/g, '')}\r\n`;
}

/** The rescue for `LIST <prefix>/keys` on `app`'s server (prefix: `/v1/<mount>`). */
export function listVerbRescue(app: FastifyInstance, prefix: string): ParserRescue {
  const listPath = `${prefix}/keys`;
  return (err, socket: Socket) => {
    const head = err.code === 'HPE_INVALID_METHOD' && err.rawPacket ? parseHead(err.rawPacket, listPath) : undefined;
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
