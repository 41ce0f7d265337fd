// STS's errors, as AWS names them on the wire (Code, HTTP status, Sender or Receiver), and how a refused token
// exchange becomes one. The SDKs raise the Code: botocore's ClientError Error.Code, the JS SDK's exception name.
// botocore retries IDPCommunicationError (its retry rules name it for STS, status 400) and every 503.

import { EXCHANGE_RETRY_AFTER_S, type ExchangeError } from '../../../auth/workload/token-exchange.js';
import type { AwsAnswer } from '../endpoint.js';
import { errorDocument, STS_CONTENT_TYPE } from './sts-xml.js';

export class StsError extends Error {
  constructor(
    /** AWS's code, e.g. InvalidIdentityToken, ValidationError. */
    readonly code: string,
    message: string,
    readonly status = 400,
    readonly type: 'Sender' | 'Receiver' = 'Sender',
    readonly retryAfterS?: number,
  ) {
    super(message);
    this.name = 'StsError';
  }

  answer(requestId: string): AwsAnswer {
    return {
      status: this.status,
      contentType: STS_CONTENT_TYPE,
      body: errorDocument(this.type, this.code, this.message, requestId),
      headers: {
        'cache-control': 'no-store',
        ...(this.retryAfterS !== undefined && { 'retry-after': String(this.retryAfterS) }),
      },
    };
  }
}

/** The service cannot serve now (its database): 503, which every AWS SDK retries. */
export function serviceUnavailable(reason: string): StsError {
  return new StsError('ServiceUnavailable', reason, 503, 'Receiver', EXCHANGE_RETRY_AFTER_S);
}

/** A refused exchange under STS's name for the check that failed; the message is the exchange's (never the token). */
export function stsErrorForExchange(err: ExchangeError): StsError {
  switch (err.check) {
    case 'expired':
      return new StsError('ExpiredTokenException', err.message);
    case 'rule':
      return new StsError('IDPRejectedClaim', err.message, 403);
    case 'issuer_unreachable':
      // 400, as AWS answers it: botocore retries this code (with status 400) a few times before giving up.
      return new StsError('IDPCommunicationError', err.message, 400, 'Sender', err.retryAfterS);
    case 'store':
      return serviceUnavailable(err.message);
    case 'request':
      return new StsError('InvalidParameterValue', err.message);
    default:
      // malformed, issuer (also for a tenant that does not exist: the same answer), token, used: the token cannot be
      // taken (AWS: "get a new token and retry").
      return new StsError('InvalidIdentityToken', err.message);
  }
}
