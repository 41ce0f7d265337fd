// HTTP/1.1 on a bare socket (node:net): a request sent byte for byte as a client builds it (its headers, their
// order, no Content-Type when the client sends none), in one write or in several, and the answer read as it comes,
// without waiting for the server to close a kept-alive connection.
import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

export interface RawAnswer {
  status: number;
  /** Header names in lower case; a repeated header's values joined with ", ". */
  headers: Record<string, string>;
  body: string;
  /** The answer's bytes as they came (latin1). */
  text: string;
  /** Whether the connection had already closed when the answer was read (a kept-alive one is closed by us). */
  closed: boolean;
}

function parse(text: string, closed: boolean): RawAnswer | undefined {
  const end = text.indexOf('\r\n\r\n');
  if (end < 0) return undefined;
  const [statusLine = '', ...lines] = text.slice(0, end).split('\r\n');
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    const name = line.slice(0, colon).toLowerCase();
    const value = line.slice(colon + 1).trim();
    headers[name] = headers[name] === undefined ? value : `${headers[name]}, ${value}`;
  }
  const body = text.slice(end + 4);
  const length = headers['content-length'];
  if (length !== undefined ? Buffer.byteLength(body, 'latin1') < Number(length) : !closed) return undefined;
  return { status: Number(statusLine.split(' ')[1]), headers, body, text, closed };
}

/**
 * Sends `chunks` (each its own write, `pauseMs` apart, so that the server is likely to read them apart) and resolves
 * with the first answer once it is whole, or with what came when the server closed the connection.
 */
export function rawExchange(port: number, chunks: Array<string | Buffer>, pauseMs = 0): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    socket.setNoDelay(true);
    let text = '';
    let done = false;
    const finish = (closed: boolean) => {
      const answer = parse(text, closed);
      if (done || (!answer && !closed)) return;
      done = true;
      socket.destroy();
      if (answer) resolve(answer);
      else reject(new Error(`the connection closed without a whole answer: ${JSON.stringify(text)}`));
    };
    socket.on('data', (chunk) => {
      text += chunk.toString('latin1');
      finish(false);
    });
    socket.on('error', (err: NodeJS.ErrnoException) => (err.code === 'ECONNRESET' ? finish(true) : reject(err)));
    socket.on('close', () => finish(true));
    socket.once('connect', async () => {
      for (const [i, chunk] of chunks.entries()) {
        if (i > 0 && pauseMs > 0) await sleep(pauseMs);
        if (socket.destroyed) return;
        socket.write(chunk);
      }
    });
  });
}
