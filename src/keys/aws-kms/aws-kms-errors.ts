// What an AWS KMS failure means for the caller. Conditions that pass by themselves (throttling, KMS's own 5xx,
// timeouts, a network that drops) are 503 key_store_unavailable with Retry-After, after the SDK's own retries;
// a key KMS will not use now (disabled, pending deletion or import, gone) is 409 key_not_usable naming why; the
// import refusals keep AWS's names. Anything else is a bug or a misconfiguration and stays an error of its own.
import { ApiError } from '../../errors.js';

/** KMS error names (`__type`) that mean "not now": the SDK already retried them. */
const TRANSIENT = new Set([
  'ThrottlingException',
  'KMSInternalException',
  'DependencyTimeoutException',
  'KeyUnavailableException',
  'ServiceUnavailableException',
  'InternalFailure',
  'RequestTimeout',
  'RequestTimeoutException',
  'TimeoutError',
  'AbortError',
]);

/** Node network errors: KMS could not be reached or the connection broke. */
const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
]);

/** Credentials KMS refuses, or none found: the service cannot reach its keys until an operator fixes it. */
const NOT_AUTHORISED = new Set([
  'AccessDeniedException',
  'UnrecognizedClientException',
  'InvalidSignatureException',
  'ExpiredTokenException',
  'IncompleteSignatureException',
  'CredentialsProviderError',
]);

const IMPORT_REFUSALS: Record<string, ConstructorParameters<typeof ApiError>[0]> = {
  ExpiredImportTokenException: 'expired_import_token',
  InvalidImportTokenException: 'invalid_import_token',
  InvalidCiphertextException: 'invalid_ciphertext',
  IncorrectKeyMaterialException: 'incorrect_key_material',
};

interface SdkError {
  name?: string;
  code?: string;
  message?: string;
  $metadata?: { httpStatusCode?: number };
}

export function kmsErrorName(err: unknown): string {
  return (err as SdkError)?.name ?? 'Error';
}

/** True for KMS's NotFoundException (unknown key or alias; also briefly right after CreateKey). */
export function isNotFound(err: unknown): boolean {
  return kmsErrorName(err) === 'NotFoundException';
}

/** A 503 for failures that pass by themselves, else undefined. */
export function kmsUnavailable(err: unknown, what: string): ApiError | undefined {
  const e = err as SdkError;
  const name = kmsErrorName(err);
  const status = e?.$metadata?.httpStatusCode;
  const network = (e?.code !== undefined && NETWORK_CODES.has(e.code)) || NETWORK_CODES.has(name);
  if (TRANSIENT.has(name) || network || (status !== undefined && status >= 500)) {
    return new ApiError(
      'key_store_unavailable',
      `AWS KMS cannot serve ${what} right now (${describe(e)}); retry later`,
    );
  }
  if (NOT_AUTHORISED.has(name)) {
    // Not transient, but fixed outside the service (IAM, credentials) and then it works again without a restart.
    return new ApiError(
      'key_store_unavailable',
      `AWS KMS refused the service's credentials for ${what} (${name}); check the IAM policy (docs/aws-kms.md)`,
    );
  }
  if (status === undefined) {
    // No HTTP answer at all (refused, reset, DNS, no region or credentials found): KMS was not reached.
    return new ApiError(
      'key_store_unavailable',
      `AWS KMS could not be reached for ${what} (${describe(e)}: ${e?.message ?? ''}); retry later`,
    );
  }
  return undefined;
}

/**
 * The caller's error for a failed KMS call, about a key the service recorded when `keyRef` is given. KMS's own
 * message names the state for KMSInvalidStateException ("... is pending deletion", "... is pending import").
 */
export function kmsError(err: unknown, what: string, keyRef?: string): unknown {
  if (err instanceof ApiError) return err;
  const unavailable = kmsUnavailable(err, what);
  if (unavailable) return unavailable;
  const name = kmsErrorName(err);
  const key = keyRef ?? 'the key';
  if (name === 'DisabledException') {
    return new ApiError('key_not_usable', `KMS key ${key} is disabled; enable it in KMS to sign again`);
  }
  if (name === 'KMSInvalidStateException') {
    return new ApiError('key_not_usable', `KMS key ${key} cannot be used now: ${(err as SdkError).message}`);
  }
  if (name === 'NotFoundException' && keyRef !== undefined) {
    return new ApiError('key_not_usable', `KMS has no key ${key} (deleted from KMS?); this key version cannot sign`);
  }
  const refusal = IMPORT_REFUSALS[name];
  if (refusal) return new ApiError(refusal, `AWS KMS refused the import: ${name}: ${(err as SdkError).message}`);
  return err;
}

function describe(e: SdkError): string {
  const status = e?.$metadata?.httpStatusCode;
  const name = e?.name ?? 'Error';
  return [e?.code && e.code !== name ? `${name} ${e.code}` : name, status && `HTTP ${status}`]
    .filter(Boolean)
    .join(', ');
}
