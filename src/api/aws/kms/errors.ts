// AWS's JSON 1.1 error answer, which the KMS clients parse: the body `{"__type": "<Name>", "message": "..."}` with
// Content-Type application/x-amz-json-1.1 and the error's HTTP status. botocore and the other SDKs read `__type`
// (anything before a `#` is a namespace they drop) as the error code: ClientError's Error.Code, the exception class.

import type { ServerResponse } from 'node:http';
import type { ApiError, ErrorCode } from '../../../errors.js';

export const AWS_JSON_CONTENT_TYPE = 'application/x-amz-json-1.1';

export class AwsJsonError extends Error {
  constructor(
    /** AWS's error name, e.g. InvalidSignatureException, NotFoundException. */
    readonly type: string,
    message: string,
    readonly status = 400,
  ) {
    super(message);
    this.name = 'AwsJsonError';
  }

  body(): string {
    return JSON.stringify({ __type: this.type, message: this.message });
  }
}

/** Writes the error on a Node response (fastify: `reply.raw`, or `reply.code().type().send(error.body())`). */
export function sendAwsJsonError(response: ServerResponse, error: AwsJsonError): void {
  const body = error.body();
  response.writeHead(error.status, {
    'content-type': AWS_JSON_CONTENT_TYPE,
    'content-length': Buffer.byteLength(body),
  });
  response.end(body);
}

/**
 * signbridge's errors under KMS's names (docs/kms-api.md, "Errors"): what a KMS client branches on. Server-side
 * conditions that pass by themselves are KMS's retryable faults (5xx), which the SDKs retry on their own.
 */
const AWS_NAME: Partial<Record<ErrorCode, { type: string; status: number }>> = {
  invalid_request: { type: 'ValidationException', status: 400 },
  invalid_hash: { type: 'ValidationException', status: 400 },
  hash_mismatch: { type: 'ValidationException', status: 400 },
  claims_conflict: { type: 'ValidationException', status: 400 },
  unsupported_algorithm: { type: 'ValidationException', status: 400 },
  unsupported_key_spec: { type: 'ValidationException', status: 400 },
  algorithm_key_mismatch: { type: 'InvalidKeyUsageException', status: 400 },
  key_spec_mismatch: { type: 'InvalidKeyUsageException', status: 400 },
  tenant_not_found: { type: 'NotFoundException', status: 400 },
  key_not_found: { type: 'NotFoundException', status: 400 },
  request_not_found: { type: 'NotFoundException', status: 400 },
  unauthorized: { type: 'AccessDeniedException', status: 400 },
  forbidden: { type: 'AccessDeniedException', status: 400 },
  policy_denied: { type: 'AccessDeniedException', status: 400 },
  request_rejected: { type: 'AccessDeniedException', status: 400 },
  request_expired: { type: 'KMSInvalidStateException', status: 400 },
  key_not_usable: { type: 'KMSInvalidStateException', status: 400 },
  key_changed: { type: 'KMSInvalidStateException', status: 400 },
  rate_limited: { type: 'ThrottlingException', status: 400 },
  key_store_unavailable: { type: 'KeyUnavailableException', status: 500 },
  store_unavailable: { type: 'DependencyTimeoutException', status: 503 },
  shutting_down: { type: 'DependencyTimeoutException', status: 503 },
};

export function awsErrorFor(error: ApiError): AwsJsonError {
  const name = AWS_NAME[error.code] ?? { type: 'KMSInternalException', status: 500 };
  const vuln = error.details.vuln_id
    ? ` (vulnerability ${error.details.vuln_id}${error.details.fix_version ? `, fixed in ${error.details.fix_version}` : ''})`
    : '';
  return new AwsJsonError(name.type, `${error.message}${vuln}`, name.status);
}
