import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { ApiError, type ErrorCode, RETRY_AFTER_SECONDS } from '../errors.js';
import { storeFault, storeUnavailable } from '../store/store-errors.js';
import type { ErrorBody } from './schemas.js';

interface AjvError {
  instancePath: string;
  keyword: string;
  message?: string;
  params: Record<string, unknown>;
}

/** One readable sentence naming the field, e.g. "body.hash must be string". */
export function describeValidationError(context: string, errors: AjvError[]): { code: ErrorCode; reason: string } {
  const first = errors[0];
  if (!first) return { code: 'invalid_request', reason: `${context} is invalid` };
  const field = first.instancePath ? `${context}${first.instancePath.replaceAll('/', '.')}` : context;
  if (first.instancePath === '/version') {
    return { code: 'unsupported_version', reason: 'version must be v1 (the only supported API version)' };
  }
  switch (first.keyword) {
    case 'required':
      return { code: 'invalid_request', reason: `${context}.${String(first.params.missingProperty)} is required` };
    case 'additionalProperties':
      return {
        code: 'invalid_request',
        reason: `${context}.${String(first.params.additionalProperty)} is not a known field`,
      };
    case 'enum':
      return {
        code: 'invalid_request',
        reason: `${field} must be one of: ${(first.params.allowedValues as string[]).join(', ')}`,
      };
    default:
      return { code: 'invalid_request', reason: `${field} ${first.message ?? 'is invalid'}` };
  }
}

function toApiError(err: FastifyError): ApiError {
  if (err instanceof ApiError) return err;
  const fault = storeFault(err);
  if (fault) return storeUnavailable(fault);
  if (err.validation) {
    const { code, reason } = describeValidationError(err.validationContext ?? 'body', err.validation as AjvError[]);
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
  const apiError = toApiError(err);
  if (apiError.statusCode >= 500) {
    request.log.error({ err }, 'request failed');
  } else {
    request.log.info({ code: apiError.code, reason: apiError.message }, 'request refused');
  }
  const retryAfter = RETRY_AFTER_SECONDS[apiError.code];
  if (retryAfter !== undefined) reply.header('retry-after', String(retryAfter));
  return reply.code(apiError.statusCode).send(errorBody(apiError));
}
