// What a refused request's credential may leave behind in the audit log, the transparency log, events and the service
// log, which are kept for good (the logs are never pruned) and read by people who hold no credential. A client puts
// whatever it has where a credential id belongs: a Bearer API key in SigV4's `Credential=`, an AWS secret in the
// access key id field (a credentials file with the two swapped; boto3 signs it without complaint). So only an id of
// the form signbridge issues is written down as it came: `SBAK`/`SBTK` + 16 hex digits, which is an id, never a
// secret (credential-format.ts). Anything else is written as UNRECOGNIZED_CREDENTIAL, not its text and not a hash of
// it: a hash of a typed password can be reversed by guessing, and the client address beside it already tells one
// caller's refusals apart. docs/kms-api.md, "Request signatures".

import { parseAccessKeyId } from './aws-credentials/credential-format.js';

/**
 * Query parameters that carry a credential when a client sends one in the URL, where signbridge accepts none (a
 * presigned AWS URL, RFC 6750's access_token): the request is refused, and its URL still reaches the request log,
 * whose serializer (src/app.ts) writes these parameters' values as `[redacted]`.
 */
export const CREDENTIAL_QUERY_PARAMETERS = [
  'x-amz-credential',
  'x-amz-security-token',
  'x-amz-signature',
  'access_token',
  'api_key',
  'token',
];

/** Written in place of a credential id signbridge did not issue. */
export const UNRECOGNIZED_CREDENTIAL = '(not a signbridge access key id)';

/** An access key id as it may be recorded: itself when it has signbridge's form, else UNRECOGNIZED_CREDENTIAL. */
export function recordableAccessKeyId(accessKeyId: string): string {
  return parseAccessKeyId(accessKeyId) ? accessKeyId : UNRECOGNIZED_CREDENTIAL;
}

/**
 * What a client wrote, quoted back in an answer to that client: at most `max` characters, printable ASCII only (any
 * other character becomes `?`), so that no control character or terminal escape reaches whoever reads the answer.
 */
export function quoted(clientText: string, max = 100): string {
  return clientText.slice(0, max).replace(/[^\x20-\x7e]/g, '?');
}

/**
 * A refusal's message in two forms from one template: `shown`, for the caller who sent the request, with its own
 * text quoted back (bounded, printable ASCII) as AWS's answers do; and `recorded`, for the logs, with every quoted
 * part left out, since that text may be a secret sent in the wrong field.
 */
export function echoed(template: (quote: (clientText: string) => string) => string): {
  shown: string;
  recorded: string;
} {
  return {
    shown: template((text) => quoted(text)),
    recorded: template((text) => `(${text.length} characters, not recorded)`),
  };
}
