// HTTP below the routes, held to the same rule as they are: every error body is an ErrorResponse. Fastify
// answers some requests itself (a wrong method, oversized headers, requests that arrive while it shuts down, the
// bodies its own JSON parser refuses); these replace those answers with ours.
import type { Socket } from 'node:net';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ApiError, type ErrorCode } from '../errors.js';
import { isAwsJsonRequest, replyAwsJsonError } from './aws/endpoint.js';
import { AwsJsonError } from './aws/kms/errors.js';
import { errorBody } from './error-handler.js';

const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'] as const;

/**
 * Not-found handler: a known path asked with another method is 405 with `Allow`; anything else 404. A KMS client's
 * request gets KMS's shape (UnknownOperationException), which is all its SDK parses.
 */
export function notFoundOrWrongMethod(app: FastifyInstance) {
  return (request: FastifyRequest, reply: FastifyReply) => {
    const path = request.url.split('?')[0] ?? '/';
    const allowed = METHODS.filter((method) => app.findRoute({ method, url: path }) !== null);
    if (isAwsJsonRequest(request)) {
      if (allowed.length > 0) reply.header('allow', allowed.join(', '));
      return replyAwsJsonError(
        reply,
        new AwsJsonError(
          'UnknownOperationException',
          allowed.length > 0
            ? `${request.method} is not allowed on ${path}; KMS calls are POST / (or POST /aws/)`
            : `no KMS endpoint at ${request.method} ${path}; KMS calls are POST / (or POST /aws/)`,
          allowed.length > 0 ? 405 : 404,
        ),
      );
    }
    if (allowed.length > 0) {
      return reply
        .code(405)
        .header('allow', allowed.join(', '))
        .send(
          errorBody(
            new ApiError(
              'method_not_allowed',
              `${request.method} is not allowed on ${path}; use ${allowed.join(', ')}`,
            ),
          ),
        );
    }
    return reply.code(404).send(errorBody(new ApiError('not_found', `no route ${request.method} ${path}`)));
  };
}

/** Requests that arrive while the service shuts down: 503 with our body, and the connection closes. */
export function refuseWhileClosing(app: FastifyInstance): void {
  let closing = false;
  app.addHook('preClose', (done) => {
    closing = true;
    done();
  });
  app.addHook('onRequest', (request, reply, done) => {
    if (!closing) return done();
    if (isAwsJsonRequest(request)) {
      reply.header('connection', 'close').header('retry-after', '1');
      // KMS's retryable fault: the SDKs retry it, as they retry every 503.
      replyAwsJsonError(
        reply,
        new AwsJsonError(
          'DependencyTimeoutException',
          'the service is shutting down; retry (another instance may answer)',
          503,
        ),
      );
      return;
    }
    reply
      .code(503)
      .header('connection', 'close')
      .header('retry-after', '1')
      .send(
        errorBody(new ApiError('shutting_down', 'the service is shutting down; retry (another instance may answer)')),
      );
  });
}

const CLIENT_ERRORS: Record<string, { status: number; code: ErrorCode; reason: string }> = {
  HPE_HEADER_OVERFLOW: {
    status: 431,
    code: 'headers_too_large',
    reason: 'the request headers are larger than the server accepts (16 KiB in all)',
  },
  ERR_HTTP_REQUEST_TIMEOUT: {
    status: 408,
    code: 'request_timeout',
    reason: 'the request was not received in time; retry',
  },
};

/**
 * A request Node's parser refused that a protocol served here still means (Vault's LIST method): the rescue answers
 * it on the socket itself and returns true, or returns false and the refusal below stands.
 */
export type ParserRescue = (err: NodeJS.ErrnoException & { rawPacket?: Buffer }, socket: Socket) => boolean;
const rescues = new WeakMap<object, ParserRescue[]>();

/** Adds a rescue on the app's server (routes register theirs; the handler below is the server's before they run). */
export function rescueRefusedRequests(app: FastifyInstance, rescue: ParserRescue): void {
  rescues.set(app.server, [...(rescues.get(app.server) ?? []), rescue]);
}

/**
 * Node's `clientError` (bad framing, oversized headers, a request not received in time) happens before any route or
 * hook, so the answer is written raw on the socket, with the headers every answer carries (`headers`). The reason
 * never echoes the client's bytes.
 */
export function clientErrorHandler(headers: () => Record<string, string>) {
  return function onClientError(this: FastifyInstance, err: NodeJS.ErrnoException, socket: Socket): void {
    if (err.code === 'ECONNRESET' || socket.destroyed) return;
    if (rescues.get(this.server)?.some((rescue) => rescue(err, socket))) return;
    const known = CLIENT_ERRORS[err.code ?? ''] ?? {
      status: 400,
      code: 'invalid_request' as const,
      reason: 'the request is not valid HTTP/1.1',
    };
    this.log.info({ code: err.code, status: known.status }, 'client error');
    if (socket.writable) {
      const body = JSON.stringify({ error: known.code, reason: known.reason });
      const statusText =
        known.status === 431
          ? 'Request Header Fields Too Large'
          : known.status === 408
            ? 'Request Timeout'
            : 'Bad Request';
      const extra = Object.entries(headers())
        .map(([name, value]) => `${name}: ${value}\r\n`)
        .join('');
      socket.write(
        `HTTP/1.1 ${known.status} ${statusText}\r\nContent-Type: application/json; charset=utf-8\r\n${extra}` +
          `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
      );
    }
    socket.destroy(err);
  };
}

/** Fastify's router errors (a URL it cannot decode, a path parameter over its length limit). */
export function frameworkErrors(error: FastifyError, _request: FastifyRequest, reply: FastifyReply): void {
  const reason =
    error.code === 'FST_ERR_MAX_PARAM_LENGTH'
      ? 'a segment of the request path is longer than the server accepts'
      : 'the request path is not a valid URL (bad percent-encoding)';
  reply.code(400).send(errorBody(new ApiError('invalid_request', reason)));
}

const POISON_KEY = /"(?:__proto__|constructor)"/;
/** JSON's escape for U+0000, not itself escaped (an even run of backslashes before it, or none). */
const NUL_ESCAPE = /(?<!\\)(?:\\\\)*\\u0000/;

/**
 * The JSON body parser. Plain JSON.parse, except that a key that could poison prototypes (`__proto__`, or
 * `constructor` holding `prototype`) is refused with a reason that says so: it is valid JSON, just not accepted.
 */
export function parseJsonBody(
  _request: FastifyRequest,
  text: string,
  done: (err: Error | null, body?: unknown) => void,
) {
  if (text.length === 0) return done(new ApiError('invalid_json', 'body is empty; a JSON object is required'));
  try {
    const body: unknown = POISON_KEY.test(text) ? JSON.parse(text, refusePoisonKeys) : JSON.parse(text);
    // PostgreSQL stores no NUL in text or jsonb, and no field of the API needs one: refused here, on both stores.
    if (NUL_ESCAPE.test(text)) {
      return done(new ApiError('invalid_request', 'strings in the body must not contain U+0000 (NUL)'));
    }
    done(null, body);
  } catch (err) {
    if (err instanceof ApiError) return done(err);
    done(new ApiError('invalid_json', `body is not valid JSON: ${(err as Error).message}`));
  }
}

function refusePoisonKeys(key: string, value: unknown): unknown {
  if (key === '__proto__') {
    throw new ApiError(
      'invalid_request',
      'body contains the key "__proto__", which is refused (prototype-poisoning protection)',
    );
  }
  if (key === 'constructor' && typeof value === 'object' && value !== null && 'prototype' in value) {
    throw new ApiError(
      'invalid_request',
      'body contains a "constructor" key holding "prototype", which is refused (prototype-poisoning protection)',
    );
  }
  return value;
}
