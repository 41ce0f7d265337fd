import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { decodeBase64Field } from '../crypto/encoding.js';
import { ApiError, type ErrorCode, RETRY_AFTER_SECONDS } from '../errors.js';
import { storeFault, storeUnavailable } from '../store/store-errors.js';
import { type ErrorBody, RequestFields } from './schemas.js';

interface AjvError {
  instancePath: string;
  keyword: string;
  message?: string;
  params: Record<string, unknown>;
}

/**
 * One readable sentence naming the field, e.g. "body.hash must be string". `action` is the operation the request
 * was for (from the path), so a field of another action is named as such: "body.pss_padding does not apply to sign".
 */
export function describeValidationError(
  context: string,
  errors: AjvError[],
  action?: string,
  body?: unknown,
): { code: ErrorCode; reason: string } {
  const first = errors[0];
  if (!first) return { code: 'invalid_request', reason: `${context} is invalid` };
  const field = first.instancePath ? `${context}${first.instancePath.replaceAll('/', '.')}` : context;
  if (first.instancePath === '/version') {
    return { code: 'unsupported_version', reason: 'version must be v1 (the only supported API version)' };
  }
  if (context === 'body' && first.instancePath === '/action' && action !== undefined && first.keyword === 'enum') {
    const given = (body as { action?: unknown } | undefined)?.action;
    return { code: 'action_mismatch', reason: `body.action is ${String(given)} but the path is /v1/${action}` };
  }
  if (context === 'body' && first.instancePath === '/hash' && first.keyword === 'pattern') {
    return describeHash((body as { hash?: unknown } | undefined)?.hash, action === undefined ? '32' : '32-, 48- or 64');
  }
  switch (first.keyword) {
    case 'required':
      return { code: 'invalid_request', reason: `${context}.${String(first.params.missingProperty)} is required` };
    case 'additionalProperties': {
      const name = String(first.params.additionalProperty);
      const known = context === 'body' && action !== undefined && Object.hasOwn(RequestFields, name);
      return {
        code: 'invalid_request',
        reason: known ? `${context}.${name} does not apply to ${action}` : `${context}.${name} is not a known field`,
      };
    }
    case 'enum':
      return {
        code: 'invalid_request',
        reason: `${field} must be one of: ${(first.params.allowedValues as string[]).join(', ')}`,
      };
    default:
      return { code: 'invalid_request', reason: `${field} ${first.message ?? 'is invalid'}` };
  }
}

/**
 * Why a hash failed the schema's pattern, in the words the server's own checks use: outside the alphabet is
 * invalid_request; base64 of a length no digest has is invalid_hash with the length it decodes to.
 */
function describeHash(value: unknown, sizes: string): { code: ErrorCode; reason: string } {
  if (typeof value !== 'string' || !/^[A-Za-z0-9+/_-]+={0,2}$/.test(value)) {
    return { code: 'invalid_request', reason: 'body.hash must be base64 (standard or URL-safe alphabet)' };
  }
  try {
    const bytes = decodeBase64Field('body.hash', value);
    return {
      code: 'invalid_hash',
      reason: `body.hash must be a ${sizes}-byte digest, got ${bytes.length} bytes`,
    };
  } catch (err) {
    if (err instanceof ApiError) return { code: err.code, reason: err.message };
    throw err;
  }
}

/** The action of a /v1/<action> request, to name it in validation errors. */
function actionOf(request: FastifyRequest): string | undefined {
  const m = /^\/v1\/([a-z0-9_]+)(?:\?|$)/.exec(request.url);
  return m?.[1];
}

/**
 * An error a protocol of its own (KMS, Vault) answers in its own shape: an ApiError as it is, a store fault as
 * store_unavailable (retry), anything else an internal error whose details stay in the log.
 */
export function asApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  const fault = storeFault(err);
  if (fault) return storeUnavailable(fault);
  return new ApiError('internal_error', 'internal error; the service log has the details under this request id');
}

function toApiError(err: FastifyError, request: FastifyRequest): ApiError {
  if (err instanceof ApiError) return err;
  const fault = storeFault(err);
  if (fault) return storeUnavailable(fault);
  if (err.validation) {
    const { code, reason } = describeValidationError(
      err.validationContext ?? 'body',
      err.validation as AjvError[],
      actionOf(request),
      request.body,
    );
    return new ApiError(code, reason);
  }
  switch (err.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new ApiError('payload_too_large', 'request body is larger than the limit');
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new ApiError('unsupported_media_type', 'content type must be application/json');
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return new ApiError('invalid_json', 'body is not valid JSON');
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new ApiError('invalid_json', 'body is empty; a JSON object is required');
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new ApiError('invalid_request', 'Content-Length does not match the body');
  }
  if (err.statusCode === 400 && err instanceof SyntaxError) {
    return new ApiError('invalid_json', `body is not valid JSON: ${err.message}`);
  }
  if (err.statusCode !== undefined && err.statusCode >= 400 && err.statusCode < 500) {
    return new ApiError('invalid_request', err.message);
  }
  return new ApiError('internal_error', 'internal error; the service log has the details under this request id');
}

export function errorBody(err: ApiError): ErrorBody {
  return { error: err.code, reason: err.message, ...err.details };
}

/** Every error leaves as an ErrorResponse; 5xx details stay in the log, never in the response. */
export function handleError(err: FastifyError, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const apiError = toApiError(err, request);
  const retryAfter = apiError.retryAfterSeconds ?? RETRY_AFTER_SECONDS[apiError.code];
  if (apiError.statusCode >= 500 && retryAfter !== undefined) {
    // A fault the caller retries (a token or database away, a busy pool): the fault itself is logged once where it
    // is seen; each refused request gets one line with its cause, not a stack trace (a long outage under load
    // refuses thousands a second).
    request.log.warn({ code: apiError.code, reason: apiError.message, cause: causeOf(err) }, 'request failed');
  } else if (apiError.statusCode >= 500) {
    request.log.error({ err }, 'request failed');
  } else {
    request.log.info({ code: apiError.code, reason: apiError.message }, 'request refused');
  }
  if (retryAfter !== undefined) reply.header('retry-after', String(retryAfter));
  return reply.code(apiError.statusCode).send(errorBody(apiError));
}

/** The messages of an error and its causes, outermost first: what an operator needs, without the stack. */
function causeOf(err: unknown): string {
  const messages: string[] = [];
  for (let e: unknown = err; e instanceof Error && messages.length < 5; e = e.cause) messages.push(e.message);
  return messages.join(': ');
}
