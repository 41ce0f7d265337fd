// Why a request's signature was refused, and how AWS names that answer. The JSON protocol services (KMS) and the
// query protocol services (STS) name the same refusals differently; the names, statuses and message shapes below
// are those the real services answer (they are not in the service models: botocore has no shape for them), and
// the SDKs turn the name into the error code a caller branches on (ClientError's Error.Code in botocore).
// Messages never carry a secret, a signature or a canonical request; what the client wrote is quoted back only to
// the client, and left out of the form that is recorded (credential-echo.ts).

import { recordableAccessKeyId } from '../credential-echo.js';

export type SigV4RefusalReason =
  /** No Authorization header and no X-Amz-Algorithm query parameter. */
  | 'missing'
  /** The Authorization header or the credential scope is malformed, or a required part is missing or unsigned. */
  | 'incomplete'
  /** The access key id is unknown, revoked or expired. */
  | 'unknown_key'
  /** The signature does not match (wrong secret, body or signed header changed). */
  | 'mismatch'
  /** X-Amz-Date (or Date) is more than five minutes before or after the service's clock. */
  | 'expired'
  /** Temporary credentials (a session token) past their expiry, otherwise correct: signed with their own secret. */
  | 'expired_token';

/** The services whose SigV4 refusals are answered in their own dialect. */
export type SigV4Service = 'kms' | 'sts';

const AWS_NAMES: Record<SigV4Service, Record<SigV4RefusalReason, { type: string; status: number }>> = {
  kms: {
    missing: { type: 'MissingAuthenticationTokenException', status: 400 },
    incomplete: { type: 'IncompleteSignatureException', status: 400 },
    unknown_key: { type: 'UnrecognizedClientException', status: 400 },
    mismatch: { type: 'InvalidSignatureException', status: 400 },
    expired: { type: 'InvalidSignatureException', status: 400 },
    expired_token: { type: 'ExpiredTokenException', status: 400 },
  },
  sts: {
    missing: { type: 'MissingAuthenticationToken', status: 403 },
    incomplete: { type: 'IncompleteSignature', status: 400 },
    unknown_key: { type: 'InvalidClientTokenId', status: 403 },
    mismatch: { type: 'SignatureDoesNotMatch', status: 403 },
    expired: { type: 'SignatureDoesNotMatch', status: 403 },
    expired_token: { type: 'ExpiredToken', status: 400 },
  },
};

export const MISSING_TOKEN_MESSAGE: Record<SigV4Service, string> = {
  kms: 'Missing Authentication Token',
  sts: 'Request is missing Authentication Token',
};

export const MISMATCH_MESSAGE =
  'The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key ' +
  'and signing method. Consult the service documentation for details.';

export const UNKNOWN_KEY_MESSAGE = 'The security token included in the request is invalid.';

/** What the SDKs see at AWS when temporary credentials have run out (botocore: ClientError ExpiredTokenException). */
export const EXPIRED_TOKEN_MESSAGE = 'The security token included in the request is expired';

export class SigV4Refusal {
  /** AWS's error name for this service (`__type` in JSON 1.1, `Code` in the query protocol's XML). */
  readonly type: string;
  readonly status: number;
  /** The answer's message, which may quote what the client sent back to it. */
  readonly message: string;
  /** The message for the audit log and the service log: nothing the client wrote in it. */
  readonly recordedMessage: string;
  /**
   * The access key id the request named, when it got that far, as it may be recorded: itself when it has
   * signbridge's form, else a placeholder (the field may hold a secret sent in the wrong place).
   */
  readonly accessKeyId: string | undefined;

  constructor(
    readonly reason: SigV4RefusalReason,
    message: string | { shown: string; recorded: string },
    service: SigV4Service,
    accessKeyId?: string,
  ) {
    const name = AWS_NAMES[service][reason];
    this.type = name.type;
    this.status = name.status;
    this.message = typeof message === 'string' ? message : message.shown;
    this.recordedMessage = typeof message === 'string' ? message : message.recorded;
    this.accessKeyId = accessKeyId === undefined ? undefined : recordableAccessKeyId(accessKeyId);
  }
}
