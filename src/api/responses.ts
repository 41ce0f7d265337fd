// Route responses for the OpenAPI document: each a reference to a named schema (components/schemas) with a
// description of its own; fastify-swagger would write "Default Response" for all of them otherwise.
import type { TSchema } from '@sinclair/typebox';
import { ERROR_CODES } from '../errors.js';
import { ErrorResponse, Ref } from './schemas.js';

export function documented(schema: TSchema, description: string) {
  return { description, ...Ref(schema) };
}

/** An error status, described by the error codes it can carry (src/errors.ts, docs/api.md). */
export function errorResponse(status: number) {
  const codes = Object.entries(ERROR_CODES)
    .filter(([, s]) => s === status)
    .map(([code]) => code);
  return documented(ErrorResponse, `ErrorResponse; error is one of: ${codes.join(', ')}`);
}
