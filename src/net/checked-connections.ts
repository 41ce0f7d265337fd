// Kept-alive connections for one caller of the outbound rules (issue 46: a webhook subscription, so that one
// receiver that hangs holds only its own sockets). Connecting afresh for every request cost a TCP (and TLS)
// handshake per webhook, most of the dispatcher's time under load. The SSRF guarantee stays that of
// outbound-request.ts: the agents' lookup resolves the host and checks every address by the same rules (checkUrl)
// each time a connection is made, so a reused connection is one whose address was checked when it connected, and a
// DNS change is seen at the next connection. Bounded: at most maxSockets connections per scheme, each closed after
// idleMs unused, all of them on close().
import { Agent as HttpAgent } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import type { LookupFunction } from 'node:net';

/** Resolves a URL's host and checks every address (OutboundPolicy.checkUrl); throws its refusals. */
export type CheckHost = (url: URL) => Promise<{ addresses: Array<{ address: string; family: number }> }>;

export interface CheckedConnectionsOptions {
  /** Most connections open at once (each scheme), busy and idle together. */
  maxSockets: number;
  /**
   * How long a connection may sit unused before it is closed; below a receiver's own keep-alive time-out (Node's
   * 5 s) so that it is rarely the receiver that closes one as it is reused.
   */
  idleMs: number;
  /** Longest wait for the resolver when connecting (the request's own deadline also runs). */
  resolveTimeoutMs: number;
}

export class CheckedConnections {
  private readonly http: HttpAgent;
  private readonly https: HttpsAgent;

  constructor(check: CheckHost, options: CheckedConnectionsOptions) {
    // Node connects to an address literal without a lookup: outbound-request.ts checks those per request.
    const lookupFor =
      (protocol: 'http:' | 'https:'): LookupFunction =>
      (hostname, lookupOptions, callback) => {
        check(new URL(`${protocol}//${hostname}`)).then(
          ({ addresses }) => {
            const first = addresses[0] as { address: string; family: number };
            if ((lookupOptions as { all?: boolean }).all) callback(null, addresses);
            else callback(null, first.address, first.family);
          },
          (err: Error) => callback(err as NodeJS.ErrnoException, '', 0),
        );
      };
    const agentOptions = {
      keepAlive: true,
      maxSockets: options.maxSockets,
      maxFreeSockets: options.maxSockets,
      // The agent's timeout is a free connection's idle time-out (a request sets its own while it runs).
      timeout: options.idleMs,
      // Reuse the most recently used connection: the others go idle and close, so a burst's extra ones do not linger.
      scheduling: 'lifo' as const,
    };
    this.http = new HttpAgent({ ...agentOptions, lookup: lookupFor('http:') });
    this.https = new HttpsAgent({ ...agentOptions, lookup: lookupFor('https:') });
  }

  /** The agent for a URL's scheme. */
  agentFor(protocol: string): HttpAgent {
    return protocol === 'https:' ? this.https : this.http;
  }

  /** Closes every connection, idle or busy (a request under way fails as a dropped connection). */
  close(): void {
    this.http.destroy();
    this.https.destroy();
  }
}
