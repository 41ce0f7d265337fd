// POST / (and POST /aws/): where AWS clients pointed at signbridge send their calls. KMS speaks AWS's JSON 1.1
// protocol (Content-Type application/x-amz-json-1.1, X-Amz-Target: TrentService.<Op>); STS, which the SDKs' web
// identity provider calls, speaks the query protocol (a form body with Action=...). One path serves both, as
// cosign's `awskms://HOST/...` and AWS_ENDPOINT_URL_STS name a host only; the protocol picks the handler. Bodies are
// kept as bytes: the SigV4 check hashes exactly what arrived. docs/kms-api.md.

import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { clientGoneSignal } from '../client-gone.js';
import { AWS_JSON_CONTENT_TYPE, AwsJsonError } from './kms/errors.js';

/** What a protocol handler is given: the raw body and the request (headers, url, client address). */
export interface AwsCall {
  body: Buffer;
  request: FastifyRequest;
  /** Each header's lines as they arrived, names in lower case: what SigV4 signs (see distinctHeaders). */
  headers: Record<string, string[]>;
  /** Aborted when the client goes away (a held call then stops waiting). */
  signal: AbortSignal;
}

export interface AwsAnswer {
  status: number;
  contentType: string;
  body: string;
  headers?: Record<string, string>;
}

export type AwsHandler = (call: AwsCall) => Promise<AwsAnswer>;

export interface AwsEndpointOptions {
  /** AWS KMS (JSON 1.1). */
  kms: AwsHandler;
  /** AWS STS (query protocol); absent: such calls are answered as unknown to this endpoint. */
  sts?: AwsHandler;
}

/** KMS's largest request: a 4096-byte message as base64 in JSON, with room for the other fields. */
export const AWS_BODY_LIMIT = 64 * 1024;
export const FORM_CONTENT_TYPE = 'application/x-www-form-urlencoded';

/** Paths that answer: the root, and /aws/ for an SDK endpoint URL with a path (signed as sent). */
export const AWS_PATHS = ['/', '/aws', '/aws/'];

const awsAnswer = (description: string) => ({
  description,
  content: { [AWS_JSON_CONTENT_TYPE]: { schema: { type: 'object', additionalProperties: true } } },
});

/** POST / in the OpenAPI document: two AWS protocols on one path (docs/kms-api.md has every operation's fields). */
const AWS_ROOT_SCHEMA = {
  summary: 'AWS KMS (JSON 1.1) and STS (query protocol) drop-in endpoint',
  description:
    'AWS clients pointed at signbridge (cosign awskms://, the AWS CLI and SDKs with AWS_ENDPOINT_URL_KMS, Terraform) ' +
    'call KMS here: Content-Type application/x-amz-json-1.1, X-Amz-Target TrentService.Sign, Verify, GetPublicKey, ' +
    'DescribeKey, ListKeys or ListAliases, signed with SigV4 by an AWS-format API key or STS temporary credentials; ' +
    'every Sign passes the policy, approvals, the audit log and the transparency log, and its answer carries ' +
    'Signbridge-Log-Index. A form body with Action=AssumeRoleWithWebIdentity (unsigned, as at AWS) exchanges a CI ' +
    "job's OIDC token for temporary credentials (STS XML). Errors in KMS's JSON shape ({__type, message}) or STS's " +
    'XML. Also answered at POST /aws/. See docs/kms-api.md.',
  tags: ['kms-api'],
  consumes: [AWS_JSON_CONTENT_TYPE, FORM_CONTENT_TYPE],
  headers: {
    type: 'object',
    properties: {
      'x-amz-target': { type: 'string', description: 'TrentService.<Operation> (KMS); absent for STS' },
    },
  },
  body: { type: 'object', additionalProperties: true, description: "the operation's input, as AWS defines it" },
  security: [{ sigv4: [] }],
  response: {
    200: {
      description:
        "the operation's output (KMS JSON; STS XML for AssumeRoleWithWebIdentity); Sign with Signbridge-Log-Index",
      content: {
        [AWS_JSON_CONTENT_TYPE]: { schema: { type: 'object', additionalProperties: true } },
        'text/xml': { schema: { type: 'string' } },
      },
    },
    400: awsAnswer(
      'a refusal in KMS\'s shape: {"__type": "<error name>", "message": "..."} (docs/kms-api.md, "Errors")',
    ),
    403: { description: 'an STS refusal (XML ErrorResponse)', content: { 'text/xml': { schema: { type: 'string' } } } },
    412: awsAnswer('DryRunOperationException: the request would have succeeded'),
    413: awsAnswer('ValidationException: the body is larger than 64 KiB'),
    500: awsAnswer('KeyUnavailableException or KMSInternalException: retry'),
    503: awsAnswer('DependencyTimeoutException: the store cannot serve now; retry'),
  },
};

function isForm(request: FastifyRequest): boolean {
  return (request.headers['content-type'] ?? '').toLowerCase().startsWith(FORM_CONTENT_TYPE);
}

/**
 * Node's headersDistinct: repeated lines kept apart (SigV4 joins them with ",", where `headers` joins some with ", "
 * and drops repeated Host and Content-Type lines). Requests injected in-process (light-my-request) have no
 * headersDistinct: their raw header pairs give the same.
 */
function distinctHeaders(request: FastifyRequest): Record<string, string[]> {
  const raw = request.raw;
  if (raw.headersDistinct) return raw.headersDistinct as Record<string, string[]>;
  const headers: Record<string, string[]> = {};
  const pairs = raw.rawHeaders ?? [];
  for (let i = 0; i + 1 < pairs.length; i += 2) {
    const name = (pairs[i] as string).toLowerCase();
    const lines = headers[name] ?? [];
    lines.push(pairs[i + 1] as string);
    headers[name] = lines;
  }
  return headers;
}

function send(reply: FastifyReply, answer: AwsAnswer): FastifyReply {
  reply.code(answer.status).type(answer.contentType);
  for (const [name, value] of Object.entries(answer.headers ?? {})) reply.header(name, value);
  // x-amzn-RequestId: the SDKs show it with every error; the service's request id, also in its logs.
  reply.header('x-amzn-requestid', reply.request.id);
  // As bytes: fastify adds `; charset=utf-8` to a string sent under any JSON type, and AWS sends
  // `application/x-amz-json-1.1` bare, which is what clients that compare the header expect.
  return reply.send(Buffer.from(answer.body, 'utf8'));
}

function jsonError(error: AwsJsonError): AwsAnswer {
  return { status: error.status, contentType: AWS_JSON_CONTENT_TYPE, body: error.body() };
}

/**
 * A request an AWS JSON client made (it names an X-Amz-Target or sends KMS's content type): refused outside the
 * KMS route (a wrong path or method, the service shutting down), it is still answered in KMS's shape.
 */
export function isAwsJsonRequest(request: FastifyRequest): boolean {
  const contentType = (request.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase();
  return request.headers['x-amz-target'] !== undefined || contentType === AWS_JSON_CONTENT_TYPE;
}

/** A KMS error answered outside the KMS route (http-strict.ts's 404, 405 and 503). */
export function replyAwsJsonError(reply: FastifyReply, error: AwsJsonError): FastifyReply {
  return send(reply, jsonError(error));
}

export async function awsEndpointRoutes(app: FastifyInstance, opts: AwsEndpointOptions): Promise<void> {
  // Every content type arrives as bytes here (this plugin's parsers only): the handler checks the protocol's own.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: AWS_BODY_LIMIT }, (_request, body, done) =>
    done(null, body),
  );
  // Framework refusals (a body over the limit, a broken body) in KMS's shape: these clients parse nothing else.
  app.setErrorHandler((error: Error & { statusCode?: number }, _request, reply) => {
    const status = error.statusCode === 413 ? 413 : 400;
    const type = status === 413 ? 'ValidationException' : 'SerializationException';
    return send(reply, jsonError(new AwsJsonError(type, error.message, status)));
  });

  const handle = async (request: FastifyRequest, reply: FastifyReply) => {
    const call: AwsCall = {
      body: (request.body as Buffer | undefined) ?? Buffer.alloc(0),
      request,
      headers: distinctHeaders(request),
      get signal() {
        return clientGoneSignal(reply.raw);
      },
    };
    if (isForm(request) && request.headers['x-amz-target'] === undefined) {
      if (opts.sts) return send(reply, await opts.sts(call));
    }
    return send(reply, await opts.kms(call));
  };
  for (const url of AWS_PATHS) {
    // The body is checked by the protocol handler, not by the schema, which only documents it.
    app.post(
      url,
      { schema: url === '/' ? AWS_ROOT_SCHEMA : ({ hide: true } as never), validatorCompiler: () => () => true },
      handle,
    );
  }
}
