// Requests the service sends to URLs that someone else chose (a CI issuer from a tenant admin's trust rule, a
// webhook subscriber's endpoint), so the URL may point anywhere, including at the service's own network (SSRF:
// cloud metadata at 169.254.169.254, internal admin pages, the database).
//
// The rules, one place for every caller:
// - https only; http only where the caller accepts it and the operator's allow list names the destination;
// - the host is resolved once and every address is checked against loopback, private, link-local and other
//   special-use ranges (special-addresses.ts), which are refused unless the allow list names the host or a CIDR
//   holding the address;
// - the connection goes to a checked address (a custom `lookup`), so a second DNS answer cannot switch it (DNS
//   rebinding); the Host header and the TLS name stay the URL's host;
// - no redirects (a 3xx is handed back, never followed: it could lead where the checks would refuse), no proxy
//   from the environment, a whole-request deadline as well as the socket's idle time-out, and a size limit;
// - a request either connects afresh (the default) or, given a caller's CheckedConnections (checked-connections.ts,
//   issue 46), reuses a kept-alive connection whose address was checked, by the same rules, when it connected.
import { lookup as dnsLookup } from 'node:dns/promises';
import {
  type Agent,
  type ClientRequest,
  request as httpRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
} from 'node:http';
import { request as httpsRequest } from 'node:https';
import { BlockList, isIP, type LookupFunction } from 'node:net';
import { createSecureContext, rootCertificates, type SecureContext } from 'node:tls';
import { CheckedConnections, type CheckedConnectionsOptions } from './checked-connections.js';
import { specialUseRange } from './special-addresses.js';

/** Adds an IP address or CIDR to `list`; false when `entry` is neither. */
export function addCidr(list: BlockList, entry: string): boolean {
  const [address, bits] = entry.split('/') as [string, string | undefined];
  const family = isIP(address);
  if (family === 0) return false;
  const type = family === 4 ? 'ipv4' : 'ipv6';
  if (bits === undefined) list.addAddress(address, type);
  else {
    const prefix = Number(bits);
    if (!/^\d{1,3}$/.test(bits) || prefix > (family === 4 ? 32 : 128)) return false;
    list.addSubnet(address, prefix, type);
  }
  return true;
}

/**
 * An IPv4-mapped IPv6 address is checked as the IPv4 address it is, in both spellings: ::ffff:a.b.c.d (resolvers)
 * and ::ffff:XXXX:XXXX (what the URL parser makes of [::ffff:127.0.0.1]).
 */
export function unmapped(address: string): { address: string; type: 'ipv4' | 'ipv6' } {
  const dotted = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(address);
  if (dotted) return { address: dotted[1] as string, type: 'ipv4' };
  const hex = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/i.exec(address);
  if (hex) {
    const high = Number.parseInt(hex[1] as string, 16);
    const low = Number.parseInt(hex[2] as string, 16);
    return { address: [high >> 8, high & 255, low >> 8, low & 255].join('.'), type: 'ipv4' };
  }
  return { address, type: isIP(address) === 4 ? 'ipv4' : 'ipv6' };
}

/** Allow-list entries that are not an IP address, a CIDR or a host name: a configuration error to report. */
export function invalidAllowEntries(allow: readonly string[]): string[] {
  return allow.filter((entry) => !addCidr(new BlockList(), entry) && !/^[A-Za-z0-9.-]{1,253}$/.test(entry));
}

/** scheme://host[:port] of a URL: what messages name (never the userinfo, path or query, which may hold secrets). */
export function originOf(url: URL): string {
  return `${url.protocol}//${url.host}`;
}

/** Why a request did not get an answer. `retryable`: whether the same request may succeed later by itself. */
export abstract class OutboundError extends Error {
  abstract readonly retryable: boolean;
}

/** The destination is not one the service may use: a bad URL, the scheme, or a special-use address. */
export class DestinationRefused extends OutboundError {
  readonly retryable = false;
  constructor(
    readonly reason: 'url' | 'scheme' | 'special-use',
    message: string,
    /** The URL's host as written ([::1] with brackets) and, for special-use, the address it resolved to. */
    readonly host?: string,
    readonly address?: string,
    /** For special-use: which range, e.g. "loopback (127.0.0.0/8)". */
    readonly range?: string,
  ) {
    super(message);
  }
}

/** No answer: the name does not resolve, the connection fails or drops, or the deadline passed. */
export class DestinationUnreachable extends OutboundError {
  readonly retryable = true;
  constructor(
    readonly reason: 'dns' | 'no-address' | 'connect' | 'timeout',
    message: string,
    /** The error code (ECONNREFUSED, ENOTFOUND) or, without one, the underlying message. */
    readonly why: string,
    /** 'answer': the failure came after the status line, while the body was read. */
    readonly phase: 'request' | 'answer' = 'request',
    /**
     * A kept-alive connection was reset before any answer (the receiver closed it as it was reused): the request
     * may go again at once on a fresh connection.
     */
    readonly staleConnection = false,
  ) {
    super(message);
  }
}

/**
 * The TLS handshake failed (an untrusted or expired certificate, a name mismatch). Retryable: the other side can
 * fix its certificate, or the operator add its CA; a caller answering a person at once may refuse instead.
 */
export class TlsFailed extends OutboundError {
  readonly retryable = true;
  constructor(
    message: string,
    readonly why: string,
  ) {
    super(message);
  }
}

/** The answer is longer than maxBytes (without `truncate`). */
export class AnswerTooLarge extends OutboundError {
  readonly retryable = false;
  constructor(
    message: string,
    readonly maxBytes: number,
  ) {
    super(message);
  }
}

/** Node refused to send the request as given (a header name or value with characters HTTP does not allow). */
export class RequestNotSendable extends OutboundError {
  readonly retryable = false;
}

export interface ResolvedAddress {
  address: string;
  family: number;
}
/** Every address of a host name (dns.lookup with all: true by default; tests give their own). */
export type Resolver = (host: string) => Promise<ResolvedAddress[]>;

export interface OutboundPolicyOptions {
  /** Host names, IP addresses and CIDRs the operator allows (special-use addresses; http where accepted). */
  allow: readonly string[];
  /** Extra PEM trust anchors, added to Node's built-in roots. */
  extraCaPem?: string;
  resolve?: Resolver;
}

export interface CheckOptions {
  /** Accept http:// too, but only for a destination the allow list names (its host, or a range holding every address). */
  allowHttp?: boolean;
  /** Longest wait for the resolver (getaddrinfo's own retries can take many seconds); none by default. */
  resolveTimeoutMs?: number;
}

/** A URL whose host has been resolved and checked: requests connect to these addresses only. */
export interface CheckedDestination {
  url: URL;
  addresses: ResolvedAddress[];
  /** The allow list names the host, or holds every address it resolved to. */
  listed: boolean;
}

export interface OutboundRequestOptions extends CheckOptions {
  method?: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  /** Whole request, and also the longest the socket may sit idle. */
  timeoutMs: number;
  /** Most bytes of the answer's body read. */
  maxBytes: number;
  /**
   * Keep the first maxBytes of a longer body and hang up, instead of failing with AnswerTooLarge; a deadline that
   * passes after the status line also ends the body there instead of failing (the status is the answer).
   */
  truncate?: boolean;
  /** Whether the body of an answer with this status is read at all; when not, the connection is closed at once. */
  readBody?: (status: number) => boolean;
  /**
   * Reuse this caller's kept-alive connections (connectionsFor) instead of connecting afresh: the host is then
   * resolved and checked when a connection is made, not per request.
   */
  connections?: CheckedConnections;
}

export interface OutboundAnswer {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
  /** The body was cut short (truncate). */
  truncated: boolean;
}

const defaultResolve: Resolver = (host) => dnsLookup(host, { all: true, verbatim: true });

export class OutboundPolicy {
  private readonly allowHosts: Set<string>;
  private readonly allowRanges = new BlockList();
  private readonly hasRanges: boolean;
  private readonly resolve: Resolver;
  private secureContext: SecureContext | undefined;

  constructor(private readonly options: OutboundPolicyOptions) {
    this.allowHosts = new Set(options.allow.map((entry) => entry.toLowerCase()));
    let ranges = 0;
    for (const entry of options.allow) if (addCidr(this.allowRanges, entry)) ranges++;
    this.hasRanges = ranges > 0;
    this.resolve = options.resolve ?? defaultResolve;
  }

  /** Parses, resolves and checks `input`; throws DestinationRefused or DestinationUnreachable. */
  async checkUrl(input: URL | string, options: CheckOptions = {}): Promise<CheckedDestination> {
    const { url, host, literal, listedHost } = this.checkScheme(input, options);
    let addresses: ResolvedAddress[];
    if (isIP(literal)) addresses = [{ address: literal, family: isIP(literal) }];
    else {
      try {
        addresses = await withTimeout(this.resolve(literal), options.resolveTimeoutMs, () =>
          Object.assign(new Error('no answer in time'), {
            code: `no answer within ${(options.resolveTimeoutMs ?? 0) / 1000} s`,
          }),
        );
      } catch (err) {
        const code = (err as { code?: string }).code ?? (err as Error).message;
        throw new DestinationUnreachable('dns', `the host ${host} does not resolve (${code})`, code);
      }
    }
    if (addresses.length === 0) {
      throw new DestinationUnreachable('no-address', `the host ${host} has no address`, 'no address');
    }
    let listed = listedHost;
    if (!listedHost) {
      listed = addresses.every(({ address }) => {
        const checked = unmapped(address);
        return this.allowRanges.check(checked.address, checked.type);
      });
    }
    if (url.protocol === 'http:' && !listed)
      throw new DestinationRefused('scheme', `${originOf(url)} is not https`, host);
    for (const { address } of addresses) {
      const checked = unmapped(address);
      if (listedHost || this.allowRanges.check(checked.address, checked.type)) continue;
      const range = specialUseRange(address);
      if (range !== undefined) {
        throw new DestinationRefused(
          'special-use',
          `the host ${host} resolves to ${address}, a loopback, private or other special-use address: ${range}`,
          host,
          address,
          range,
        );
      }
    }
    return { url, addresses, listed };
  }

  /**
   * Keep-alive connections for one caller (one webhook subscription: one receiver's hang holds no other's sockets),
   * each resolved and checked by checkUrl when it connects; close() them when the caller is done.
   */
  connectionsFor(options: CheckedConnectionsOptions): CheckedConnections {
    return new CheckedConnections(
      (url) => this.checkUrl(url, { allowHttp: true, resolveTimeoutMs: options.resolveTimeoutMs }),
      options,
    );
  }

  /** The checks of a URL that need no DNS: it parses, and its scheme is https, or http where allowed and listed. */
  private checkScheme(
    input: URL | string,
    options: CheckOptions,
  ): { url: URL; host: string; literal: string; listedHost: boolean } {
    let url: URL;
    try {
      url = typeof input === 'string' ? new URL(input) : input;
    } catch {
      throw new DestinationRefused('url', 'not a URL');
    }
    const host = url.hostname;
    const literal = host.replace(/^\[|\]$/g, '');
    const listedHost = this.allowHosts.has(literal.toLowerCase());
    const http = url.protocol === 'http:' && options.allowHttp === true;
    // Only a listed destination takes http; without ranges to look an address up in, only its name can list it.
    if ((url.protocol !== 'https:' && !http) || (http && !listedHost && !this.hasRanges)) {
      throw new DestinationRefused('scheme', `${originOf(url)} is not https`, host);
    }
    return { url, host, literal, listedHost };
  }

  /** Checks `url` (checkUrl) and sends one request to a checked address; a 3xx is returned, never followed. */
  async request(url: URL | string, options: OutboundRequestOptions): Promise<OutboundAnswer> {
    // One deadline for the whole request: resolving the name takes from the same time-out.
    const startedMs = Date.now();
    const remaining = () => Math.max(1, options.timeoutMs - (Date.now() - startedMs));
    const { connections } = options;
    if (!connections) {
      const target = await this.checkUrl(url, { ...options, resolveTimeoutMs: options.timeoutMs });
      return this.send(target, options, remaining());
    }
    // Kept-alive connections: a host name is resolved and checked when a connection is made (the agent's lookup);
    // an address literal, which Node connects to without a lookup, is checked here.
    const { url: parsed, literal } = this.checkScheme(url, options);
    if (isIP(literal)) await this.checkUrl(parsed, options);
    const agent = connections.agentFor(parsed.protocol);
    try {
      return await this.exchange(parsed, { agent }, options, remaining());
    } catch (err) {
      // The receiver closed a kept-alive connection as it was reused (its idle time-out raced ours): once more, on
      // a fresh one. Nothing was answered, so at most the receiver saw the request twice (webhooks are at least once).
      if (!(err instanceof DestinationUnreachable && err.staleConnection)) throw err;
      return this.exchange(parsed, { agent }, options, remaining());
    }
  }

  /** One request to an already checked destination, on a fresh connection to one of its checked addresses. */
  send(
    target: CheckedDestination,
    options: OutboundRequestOptions,
    remainingMs = options.timeoutMs,
  ): Promise<OutboundAnswer> {
    const { url, addresses } = target;
    const first = addresses[0] as ResolvedAddress;
    // Every address handed to the connection was checked; with all: true Node tries them in turn (happy eyeballs).
    const pinned: LookupFunction = (_hostname, lookupOptions, callback) => {
      if ((lookupOptions as { all?: boolean }).all) callback(null, addresses);
      else callback(null, first.address, first.family);
    };
    // A fresh agent per request: no pooled socket to an address checked for another request, and none of the
    // global agent's settings (Node 24 can route it through *_PROXY variables).
    return this.exchange(url, { lookup: pinned, agent: false }, options, remainingMs);
  }

  /**
   * Sends the request and reads the answer: on a fresh connection through `lookup` (checked addresses), or on a
   * connection of a caller's agent, whose lookup checks each address it connects to.
   */
  private exchange(
    url: URL,
    connect: { lookup: LookupFunction; agent: false } | { agent: Agent },
    options: OutboundRequestOptions,
    remainingMs: number,
  ): Promise<OutboundAnswer> {
    const { timeoutMs, maxBytes } = options;
    const origin = originOf(url);
    return new Promise<OutboundAnswer>((resolve, reject) => {
      let settled = false;
      let response: IncomingMessage | undefined;
      const chunks: Buffer[] = [];
      let size = 0;
      let deadline: NodeJS.Timeout | undefined;
      const answer = (truncated: boolean) => {
        if (settled || !response) return;
        settled = true;
        clearTimeout(deadline);
        resolve({
          status: response.statusCode ?? 0,
          headers: response.headers,
          body: Buffer.concat(chunks),
          truncated,
        });
      };
      const fail = (err: OutboundError) => {
        if (settled) return;
        settled = true;
        clearTimeout(deadline);
        reject(err);
      };
      let secureContext: SecureContext;
      try {
        secureContext = this.context();
      } catch (err) {
        fail(new TlsFailed(`the extra CA certificates cannot be used: ${(err as Error).message}`, 'bad CA'));
        return;
      }
      let req: ReturnType<typeof httpRequest>;
      try {
        const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
        req = send(
          url,
          {
            method: options.method ?? 'GET',
            headers: options.headers ?? {},
            ...connect,
            // Only an IP literal skips lookup; then the TLS name is the address itself, as in the certificate.
            ...(url.protocol === 'https:' && { secureContext }),
            timeout: timeoutMs,
          },
          (res) => {
            response = res;
            const status = res.statusCode ?? 0;
            if (options.readBody && !options.readBody(status)) {
              answer(false);
              // A kept-alive connection goes back to its pool once the unread body has passed (a short one; a long
              // or slow one ends the connection instead); a fresh one is closed at once.
              if (connect.agent) drainForReuse(req, res, maxBytes, remainingMs);
              else req.destroy();
              return;
            }
            res.on('data', (chunk: Buffer) => {
              if (settled) return;
              if (size + chunk.length > maxBytes) {
                if (options.truncate) {
                  chunks.push(chunk.subarray(0, maxBytes - size));
                  size = maxBytes;
                  answer(true);
                } else {
                  fail(new AnswerTooLarge(`${url.href} answered more than ${maxBytes} bytes`, maxBytes));
                }
                // Never wait for the rest of a long answer.
                req.destroy();
                return;
              }
              size += chunk.length;
              chunks.push(chunk);
            });
            res.on('end', () => answer(false));
            res.on('error', (err: NodeJS.ErrnoException) =>
              fail(new DestinationUnreachable('connect', `${url.href}: ${err.message}`, err.message, 'answer')),
            );
            res.on('close', () => {
              if (!res.complete) {
                fail(new DestinationUnreachable('connect', `${url.href}: the answer was cut off`, 'cut off', 'answer'));
              }
            });
          },
        );
      } catch (err) {
        // Node checks header names and values before anything is sent; the message names no header value.
        fail(
          new RequestNotSendable(`the request cannot be sent (${(err as NodeJS.ErrnoException).code ?? 'invalid'})`),
        );
        return;
      }
      // A whole-request deadline as well as the socket's idle time-out: a trickling answer also ends.
      const timedOut = () => {
        const why = `no answer within ${timeoutMs / 1000} s`;
        if (response && options.truncate) answer(true);
        else {
          fail(
            new DestinationUnreachable(
              'timeout',
              `${origin} cannot be reached (${why})`,
              why,
              response ? 'answer' : 'request',
            ),
          );
        }
        req.destroy();
      };
      deadline = setTimeout(timedOut, remainingMs);
      req.on('timeout', timedOut);
      req.on('error', (err: NodeJS.ErrnoException) => {
        // A connection's lookup refused the address it resolved to, or could not resolve it (CheckedConnections).
        if (err instanceof OutboundError) {
          fail(err);
          return;
        }
        const why = err.code ?? err.message;
        const stale = !response && req.reusedSocket && (err.code === 'ECONNRESET' || err.code === 'EPIPE');
        if (stale) {
          fail(new DestinationUnreachable('connect', `${origin} cannot be reached (${why})`, why, 'request', true));
        } else if (err.code?.startsWith('ERR_TLS') || /certificate|self.signed/i.test(err.message)) {
          fail(new TlsFailed(`${origin}: TLS failed (${why})`, why));
        } else if (response) {
          fail(new DestinationUnreachable('connect', `${url.href}: ${err.message}`, err.message, 'answer'));
        } else {
          fail(new DestinationUnreachable('connect', `${origin} cannot be reached (${why})`, why));
        }
      });
      req.on('close', () => clearTimeout(deadline));
      req.end(options.body);
    });
  }

  /** Node's roots plus the extra CA, made once: building a context from ~150 PEM roots per request costs ms. */
  private context(): SecureContext {
    this.secureContext ??= createSecureContext({
      ca: this.options.extraCaPem ? [...rootCertificates, this.options.extraCaPem] : [...rootCertificates],
    });
    return this.secureContext;
  }
}

/** Reads and drops the rest of `res` so that its connection can be reused; ends it past `maxBytes` or `ms`. */
function drainForReuse(req: ClientRequest, res: IncomingMessage, maxBytes: number, ms: number): void {
  let size = 0;
  const timer = setTimeout(() => req.destroy(), ms);
  res.on('data', (chunk: Buffer) => {
    size += chunk.length;
    if (size > maxBytes) req.destroy();
  });
  res.on('close', () => clearTimeout(timer));
}

/** `promise`, or a rejection with `error()` after `ms` (no limit when ms is undefined). */
function withTimeout<T>(promise: Promise<T>, ms: number | undefined, error: () => Error): Promise<T> {
  if (ms === undefined) return promise;
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(error()), ms);
  });
  return Promise.race([promise, expired]).finally(() => clearTimeout(timer));
}
