// Route responses for the OpenAPI document: each a reference to a named schema (components/schemas) with a
// description of its own; fastify-swagger would write "Default Response" for all of them otherwise.
import type { TSchema } from '@sinclair/typebox';
import { ERROR_CODES } from '../errors.js';
import { ErrorResponse, Ref } from './schemas.js';

/** `headers`: response headers (name → schema with a description), listed under the response in the document. */
export function documented(schema: TSchema, description: string, headers?: Record<string, unknown>) {
  return { description, ...Ref(schema), ...(headers && { headers }) };
}

/**
 * The index in the audit log (and its transparency log) of the `signed` entry that records the signature a
 * response hands out: seq - 1 (docs/api.md, "Signbridge-Log-Index").
 */
export const LOG_INDEX_HEADER = 'Signbridge-Log-Index';

/** What `Prefer: wait-for-log` sets on an answer that carries log proofs (src/api/log-proof-preference.ts). */
export const LOG_PROOF_HEADERS = {
  'Preference-Applied': {
    type: 'string',
    description:
      '`wait-for-log` when the request sent `Prefer: wait-for-log` and the answer carries `log_proof`; ' +
      '`wait-for-log=witnessed` when it asked for `wait-for-log=witnessed` and the witnesses cosigned (docs/api.md)',
  },
  'Signbridge-Log-Witnessed': {
    type: 'string',
    enum: ['yes', 'no'],
    description:
      'with `Prefer: wait-for-log=witnessed` and a `log_proof`: whether every witness waited for cosigned its ' +
      'checkpoint (`no`: the wait ended first; docs/transparency.md)',
  },
};

/** Signbridge-Log-Index on the answers that hand out a signature (src/api/routes/v1.ts). */
export const LOG_INDEX_HEADERS = {
  'Signbridge-Log-Index': {
    type: 'integer',
    minimum: 0,
    description:
      'index (audit seq - 1) of the `signed` audit entry recording the signature, in the audit log and its ' +
      'transparency log; absent only for a request approved before the upgrade that added it (docs/api.md)',
  },
  ...LOG_PROOF_HEADERS,
};

/** An error status, described by the error codes it can carry (src/errors.ts, docs/api.md). */
export function errorResponse(status: number) {
  const codes = Object.entries(ERROR_CODES)
    .filter(([, s]) => s === status)
    .map(([code]) => code);
  return documented(ErrorResponse, `ErrorResponse; error is one of: ${codes.join(', ')}`);
}
