// AWS's JSON 1.1 error answer, which the KMS clients parse: the body `{"__type": "<Name>", "message": "..."}` with
// Content-Type application/x-amz-json-1.1 and the error's HTTP status. botocore and the other SDKs read `__type`
// (anything before a `#` is a namespace they drop) as the error code: ClientError's Error.Code, the exception class.

import type { ServerResponse } from 'node:http';

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
