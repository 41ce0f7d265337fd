// The fields of a KMS request body, checked as KMS checks them and refused in its words ("1 validation error
// detected: Value ... at 'keyId' failed to satisfy constraint: ..."). The SDKs check most of these before sending;
// a hand-written client (jsign, curl) gets the same answer AWS would give it.

import { AwsJsonError } from './errors.js';

export type KmsInput = Record<string, unknown>;

function invalid(field: string, value: unknown, constraint: string): AwsJsonError {
  const shown =
    value === undefined ? 'null' : typeof value === 'string' ? `'${value.slice(0, 100)}'` : `of ${typeof value}`;
  // AWS names the member in lower camel case in these messages.
  const member = field.charAt(0).toLowerCase() + field.slice(1);
  return new AwsJsonError(
    'ValidationException',
    `1 validation error detected: Value ${shown} at '${member}' failed to satisfy constraint: ${constraint}`,
  );
}

/** The body: a JSON object (an empty body is `{}`, as the SDKs send for operations without input). */
export function parseKmsInput(body: Buffer): KmsInput {
  if (body.length === 0) return {};
  let value: unknown;
  try {
    value = JSON.parse(body.toString('utf8'));
  } catch {
    throw new AwsJsonError('SerializationException', 'the request body is not valid JSON');
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new AwsJsonError('SerializationException', 'the request body must be a JSON object');
  }
  return value as KmsInput;
}

export function requiredString(input: KmsInput, field: string, max = 2048): string {
  const value = input[field];
  if (typeof value !== 'string') throw invalid(field, value, 'Member must not be null');
  if (value.length < 1 || value.length > max) {
    throw invalid(field, value, `Member must have length between 1 and ${max}`);
  }
  return value;
}

export function optionalString(input: KmsInput, field: string, max = 2048): string | undefined {
  return input[field] === undefined ? undefined : requiredString(input, field, max);
}

export function enumValue<T extends string>(input: KmsInput, field: string, values: readonly T[]): T;
export function enumValue<T extends string>(input: KmsInput, field: string, values: readonly T[], fallback: T): T;
export function enumValue<T extends string>(input: KmsInput, field: string, values: readonly T[], fallback?: T): T {
  const value = input[field];
  if (value === undefined && fallback !== undefined) return fallback;
  if (typeof value !== 'string' || !(values as readonly string[]).includes(value)) {
    throw invalid(field, value, `Member must satisfy enum value set: [${values.join(', ')}]`);
  }
  return value as T;
}

/** A blob: base64 in JSON 1.1. */
export function requiredBlob(input: KmsInput, field: string, max: number): Buffer {
  const value = input[field];
  if (typeof value !== 'string') throw invalid(field, value, 'Member must not be null');
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(value) || value.length % 4 !== 0) {
    throw new AwsJsonError('SerializationException', `${field} is not valid base64`);
  }
  const bytes = Buffer.from(value, 'base64');
  if (bytes.length < 1 || bytes.length > max) {
    throw invalid(field, `(${bytes.length} bytes)`, `Member must have length between 1 and ${max}`);
  }
  return bytes;
}

export function optionalBoolean(input: KmsInput, field: string): boolean {
  const value = input[field];
  if (value === undefined) return false;
  if (typeof value !== 'boolean') throw new AwsJsonError('SerializationException', `${field} must be a boolean`);
  return value;
}

export function optionalInteger(input: KmsInput, field: string, min: number, max: number): number | undefined {
  const value = input[field];
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw invalid(field, String(value), `Member must have value between ${min} and ${max}`);
  }
  return value;
}

/** GrantTokens: KMS grants do not exist here; tokens are accepted (the SDKs may send them) and have no effect. */
export function grantTokens(input: KmsInput): void {
  const value = input.GrantTokens;
  if (value === undefined) return;
  if (!Array.isArray(value) || value.length > 10 || value.some((t) => typeof t !== 'string')) {
    throw invalid('GrantTokens', value, 'Member must be a list of at most 10 strings');
  }
}
